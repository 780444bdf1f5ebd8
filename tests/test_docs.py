"""The docs show what the program prints: every ``console`` block of README.md and docs/*.md
is run, command by command, and its output compared with what the block shows.

A block is ``$ command`` lines, each followed by the output it shows (``...`` stands for any
text, as in doctest's ELLIPSIS; lines of stderr are not shown). Commands run in bash from the
repository root, with this environment's ``setllm`` on the PATH; ``localhost:8000`` is a real
``setllm serve`` (embedded model, shipped adapter) started for these tests on a free port.
Blocks run the real embedded model, so they are marked slow. Parsing is Sybil's.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sybil = pytest.importorskip("sybil")
from server_process import serve_process  # noqa: E402
from sybil.parsers.markdown import CodeBlockParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVER = "localhost:8000"


def console_blocks() -> list:
    parser = sybil.Sybil(parsers=[CodeBlockParser("console", evaluator=lambda example: None)])
    return [pytest.param(path, example.line, example.parsed, id=f"{path.name}:{example.line}", marks=pytest.mark.slow)
            for path in DOCS for example in parser.parse(path)]


def steps(block: str) -> list[tuple[str, str]]:
    """``(command, expected output)`` pairs of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in block.rstrip("\n").splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
        else:
            raise AssertionError(f"output before any command: {line!r}")
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


def matches(expected: str, got: str) -> bool:
    """``expected`` with ``...`` as a wildcard, against ``got`` (trailing whitespace ignored)."""
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, got.strip(), flags=re.DOTALL) is not None


@pytest.fixture(scope="module")
def server():
    """A real `setllm serve` on the embedded model, on a free loopback port."""
    with serve_process(cwd=ROOT) as (_, url):
        yield url.removeprefix("http://")


def _env() -> dict:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.parametrize("path, line, block", console_blocks())
def test_console_block_prints_what_the_docs_show(path, line, block, request):
    address = request.getfixturevalue("server") if SERVER in block else None
    for command, expected in steps(block):
        run = command.replace(SERVER, address) if address else command
        done = subprocess.run(["bash", "-c", run], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 or expected.startswith("error:"), f"{path.name}:{line}: `{command}` failed:\n{done.stderr[-2000:]}"
        shown = done.stdout if done.returncode == 0 else done.stderr
        assert matches(expected, shown), f"{path.name}:{line}: `{command}` printed:\n{shown}\nthe docs show:\n{expected}"


def test_the_console_parser_reads_commands_and_outputs():
    assert steps("$ echo a\na\n$ true\n") == [("echo a", "a"), ("true", "")]
    assert matches('{"x": ..., "y": 2}', '{"x": -1.2345, "y": 2}') and not matches('{"x": 1}', '{"x": 2}')


def python_blocks_that_print() -> list:
    """Python blocks of the docs that say what they print (``# prints "..."``)."""
    parser = sybil.Sybil(parsers=[CodeBlockParser("python", evaluator=lambda example: None)])
    return [pytest.param(path, example.line, example.parsed, id=f"{path.name}:{example.line}", marks=pytest.mark.slow)
            for path in DOCS for example in parser.parse(path) if re.search(r'# prints "', example.parsed)]


@pytest.mark.parametrize("path, line, block", python_blocks_that_print())
def test_python_block_prints_what_the_docs_say(path, line, block, request):
    """Run against the real server where a block talks to 127.0.0.1:8000 (an OpenAI client, say)."""
    address = request.getfixturevalue("server") if "127.0.0.1:8000" in block else None
    code = block.replace("127.0.0.1:8000", address) if address else block
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{path.name}:{line} failed:\n{done.stderr[-2000:]}"
    expected = "".join(ast.literal_eval(m) + "\n" for m in re.findall(r'# prints (".*")', block))
    assert done.stdout == expected, f"{path.name}:{line} printed {done.stdout!r}, the docs say {expected!r}"
