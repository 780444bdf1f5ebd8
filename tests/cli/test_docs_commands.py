"""Every ``setllm`` command in a ``bash`` block of README.md and docs/*.md (not results.md, a
record of runs) parses and validates with the real parser, and the ones that read benchmark
data find it where a user's clone finds it: the hub by default, here a local copy named by
``SETLLM_DATA_DIR`` (tests/fixtures/data; no command may name a folder a clone lacks).

A command is a line (with its ``\\`` continuations) whose first word after any ``VAR=value``
is ``setllm``; ``# ...`` comments are dropped; a command with a bare ``...`` argument is
elided prose and is skipped. Each is checked in a fresh folder holding what the page's earlier
``setllm train --out DIR`` commands make, an adapter (``--init-adapter DIR`` checks for one).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from setllm.cli import build_parser
from setllm.cli.common import validate
from setllm.tasks import get_task, load_records

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "results.md")]
DATA = ROOT / "tests" / "fixtures" / "data"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def commands(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, argv after "setllm")`` of each setllm command in the file's bash blocks."""
    text = path.read_text(encoding="utf-8")
    found = []
    for block in BLOCK.finditer(text):
        first = text[: block.start()].count("\n") + 2
        for offset, line in _logical_lines(block.group(1)):
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value setllm ...
                words.pop(0)
            elided = re.search(r"(^|\s)\.\.\.(\s|$)", line.split("#")[0])  # a bare `...`, not a quoted "..."
            if words[:1] == ["setllm"] and not elided:
                found.append((first + offset, words[1:]))
    return found


def _logical_lines(block: str) -> list[tuple[int, str]]:
    out, start, pending = [], 0, ""
    for i, line in enumerate(block.splitlines()):
        if not pending:
            start = i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def cases() -> list:
    out = []
    for path in DOCS:
        trained: list[str] = []  # what the page's earlier `setllm train --out DIR` made
        for line, argv in commands(path):
            out.append(pytest.param(argv, tuple(trained), id=f"{path.name}:{line}"))
            if argv[0] == "train" and "--out" in argv:
                trained.append(argv[argv.index("--out") + 1])
    return out


CASES = cases()


def test_the_docs_have_commands_and_name_no_folder_a_clone_lacks():
    assert len(CASES) >= 25
    for case in CASES:
        assert not any("../shared" in word for word in case.values[0]), f"{case.id}: names ../shared, which a user's clone lacks"


@pytest.mark.parametrize("argv, trained", CASES)
def test_a_docs_command_parses_validates_and_finds_its_data(argv, trained, monkeypatch, tmp_path):
    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA))
    monkeypatch.chdir(tmp_path)
    for out in trained:
        (tmp_path / out).mkdir(parents=True)
        (tmp_path / out / "adapter_config.json").write_text("{}")
    parser, _ = build_parser(argv[0])
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"setllm {shlex.join(argv)}: the parser refused it") from e
    validate(args)
    reads_data(args)


def reads_data(args) -> None:
    """Resolve the benchmark data a command would read (without running the command)."""
    from setllm.training.examples import load_examples

    command = (args.command, getattr(args, "generator", None) or getattr(args, "what", None))
    if command[0] == "eval" and args.dataset and not args.data_file:
        records, source = load_records(get_task(args.dataset), args.split, args.data_dir, limit=args.limit)
    elif command == ("export", "data"):
        records, source = load_records(get_task(args.dataset), args.split, args.data_dir, limit=args.limit)
    elif command == ("data", "qa-lookup"):
        records, source = load_records(get_task(args.source), args.split, args.data_dir)
    elif command[0] == "train":
        examples, _ = load_examples(args.data.split(","), args.data_dir, limit=2)
        assert examples
        return
    else:
        return
    assert records and source.startswith(str(DATA.resolve())), source
