"""The playground page's screenshot for the docs (docs/figures/playground.png), made with the
browser test's own tooling: `setllm serve` (the embedded model and its shipped adapters) on a
free loopback port, headless Chromium from Debian's packages driven by Selenium, four options,
*Every ordering*, then a picture of the whole page.

    python benchmarks/screenshot_playground.py [--out docs/figures/playground.png] [--width 1100]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the browser test's helpers

from bench_serve import start_server, stop_server  # noqa: E402
from browser import ask, chromium, missing, wait_for  # noqa: E402

QUESTION = "Which city is the capital of France?"
OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]


def full_page(driver) -> bytes:
    """The whole page as PNG bytes, below the window's fold too (Chromium's DevTools capture)."""
    import base64

    width, height = driver.execute_script("return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    return base64.b64decode(shot["data"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "figures" / "playground.png"))
    p.add_argument("--width", type=int, default=1100, help="window width in CSS pixels")
    args = p.parse_args()
    if missing():
        sys.exit(f"error: {missing()}")
    proc, url = start_server([])
    try:
        with chromium(args.width, 900) as driver:
            driver.get(url + "/")
            wait_for(driver, "#server", 60, "Model ")
            ask(driver, QUESTION, OPTIONS, variant="setmask-setpe")
            driver.find_element("id", "orderings").click()
            wait_for(driver, "#ordering-result", 600)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_bytes(full_page(driver))
            chosen = driver.find_element("css selector", "section.reading[data-reading=chosen] .verdict").text
            base = driver.find_element("css selector", "section.reading[data-reading=base] .verdict").text
    finally:
        stop_server(proc)
    print(f"chosen reading: {chosen}\nbase model: {base}\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
