"""Each declaration once: the routes ``serve --help`` lists are the app's, every command's
cache flags are one declaration, and the document cache's gauges are one list that the
single server and the Ray endpoint both show."""

from __future__ import annotations

import re

import pytest

from setllm.cli import build_parser
from setllm.core.doccache import DocumentCache
from setllm.core.doccache.stats import PREFIX, CacheStats, gauges
from setllm.serve import ServeConfig
from setllm.serve.app import create_app
from setllm.serve.ray.ingress import REPLICA_GAUGES
from setllm.serve.service import Service


def command_help(name: str) -> str:
    return " ".join(build_parser(name)[1].format_help().split())


def test_serve_help_lists_the_routes_the_app_serves(lm):
    """The OpenAPI schema's routes, and the page at / (not in the schema)."""
    served = {(m.upper(), path) for path, ops in create_app(lm, ServeConfig()).openapi()["paths"].items() for m in ops}
    text = command_help("serve").split("Several adapters")[0]
    listed = {(method, path) for method, paths in re.findall(r"(POST|GET) ((?:/[\w/.]*(?:, )?)+)", text) for path in paths.split(", ")}
    assert listed == served and ("POST", "/v1/answer") in served and "the playground page at / " in text


@pytest.mark.parametrize("flag", ["--cache-mb", "--cache-dir", "--cache-dir-mb"])
def test_the_cache_flags_say_the_same_on_every_command(flag):
    def said(command):
        action = next(a for a in build_parser(command)[1]._actions if flag in a.option_strings)
        return action.help, action.metavar

    assert said("answer") == said("eval") == said("serve") and said("serve")[0]


def test_every_gauge_is_a_field_of_the_stats_shown_by_both_servers(lm, tmp_path):
    shown = set(gauges(disk=True))
    assert shown <= {f for f in CacheStats.__dataclass_fields__} and {"hits", "disk_check_s"} <= shown
    assert {k: v for k, v in REPLICA_GAUGES.items() if v[0].startswith(PREFIX)} == gauges(disk=True)
    service = Service(lm, ServeConfig(cache_mb=1, cache_dir=str(tmp_path)))
    assert isinstance(service.documents, DocumentCache) and service.documents.disk is not None
    assert {name for name in service.gauges() if name.startswith(PREFIX)} == {metric for metric, _ in gauges(disk=True).values()}
    assert service.documents.stats().gauged(True).keys() == shown
