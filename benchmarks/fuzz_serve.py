"""schemathesis over every operation of `setllm serve`'s ``/openapi.json``, every check, against a
tiny random model (tests/tiny.py: no weights to load) on a loopback port: the larger run of what
tests/serve/test_fuzz.py runs bounded. What no JSON Schema can say is in
tests/serve/schemathesis.toml. Exits with schemathesis's status (0: no failure).

    python benchmarks/fuzz_serve.py --max-examples 400 --seed 7
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "serve")]

from serve_helpers import running  # noqa: E402
from tiny import tiny_model, tiny_tokenizer  # noqa: E402

from setllm import SetLLM  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=400, help="examples per operation and phase")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    with running(lm, batch_check=False, max_generate_tokens=8) as (_, _, url):
        command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(TESTS / "serve" / "schemathesis.toml"),
                   "run", f"{url}/openapi.json", "--checks", "all", "--max-examples", str(args.max_examples), "--seed", str(args.seed),
                   "-w", "1", "--no-color"]
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
