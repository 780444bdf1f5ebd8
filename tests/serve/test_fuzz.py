"""Every operation of ``/openapi.json`` fuzzed from its own schema (schemathesis, every check,
seeded and bounded) against a tiny-model server on a loopback port: no server error, no answer
outside its schema, no schema-violating request answered, no schema-valid one refused but for
what no schema can say (tests/serve/schemathesis.toml). docs/serving-limits.md has a larger run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from serve_helpers import running

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import CHECKS  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = 15  # per operation and mode: the suite's budget; the larger run is by hand


@pytest.fixture(scope="module")
def api(lm):
    with running(lm, batch_check=False, max_generate_tokens=8) as (_, _, url):
        yield schemathesis.openapi.from_url(f"{url}/openapi.json", config=schemathesis.config.SchemathesisConfig.from_path(CONFIG))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_holds_to_its_schema(api, mode):
    operations = [result.ok() for result in api.get_all_operations()]
    assert {"POST /v1/choose", "POST /v1/generate", "POST /v1/completions", "POST /v1/chat/completions", "POST /v1/responses",
            "GET /v1/models", "GET /health"} <= {op.label for op in operations}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not len(operation.body):  # a GET without parameters has no invalid request
            continue
        @given(operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def holds(case):
            case.call_and_validate(checks=CHECKS.get_all(), timeout=30)

        holds()
