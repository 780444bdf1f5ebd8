"""The playground page's own text rules, run as the page runs them: its JavaScript, taken
from the page and run by Node.js (no browser, no server). The page in a browser against a
real server is ``test_playground.py``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

NODE = shutil.which("node") or shutil.which("nodejs")
PAGE = Path(__file__).resolve().parents[2] / "src/setllm/serve/static/playground.html"
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (the page's functions run in it)")


def page_function(name: str) -> str:
    """The page's top-level ``function NAME(...)``, as written there: up to the blank line after it."""
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(f"\nfunction {name}(") + 1
    end = page.find("\n\n", start)
    return page[start:end]


def run_js(function: str, name: str, args: list[str]) -> list[str]:
    script = f"{function}\nprocess.stdout.write(JSON.stringify({json.dumps(args)}.map({name})));"
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


# A winner that ends a sentence keeps its own stop, also inside closing quotes or brackets; any
# other winner gets one.
ENDINGS = {
    "Red": "Red.", "Red.": "Red.", "Why?": "Why?", "Wait...": "Wait...", "Hmm…": "Hmm…",
    '"hi."': '"hi."', "(red.)": "(red.)", "'ok!'": "'ok!'", "“Yes.”": "“Yes.”", "[a?]": "[a?]", "«non.»": "«non.»",
    '("hi.")': '("hi.")', '"hi"': '"hi".', "(red)": "(red).", "3.5 kg": "3.5 kg.",
}


def test_the_verdict_adds_no_second_stop_after_one_inside_quotes_or_brackets():
    assert run_js(page_function("sentence"), "sentence", list(ENDINGS)) == list(ENDINGS.values())
