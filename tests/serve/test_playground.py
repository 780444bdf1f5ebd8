"""The playground page at ``/`` in a real browser (headless Chromium, Selenium) against a
real ``setllm serve``: a question with four options, Run, every ordering through the chosen
reading and through the base model, the result read off the page; the server's one-line
error; the API key asked for once."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from browser import ask, chromium, missing, wait_for
from server_process import serve_process

REASON = missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

QUESTION = "Which city is the capital of France?"
OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def post(url: str, route: str, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url + route, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.fixture(scope="module")
def server():
    """The embedded model with its shipped adapters (choose, judge, documents, base)."""
    with serve_process(cwd=ROOT) as (_, url):
        yield url


def by_id(driver, name):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, name)


def test_every_ordering_in_the_browser(server):
    from selenium.webdriver.common.by import By

    status, expected = post(server, "/v1/choose", {"question": QUESTION, "options": OPTIONS})
    assert status == 200
    with chromium() as driver:
        driver.get(server + "/")
        wait_for(driver, "#server", 60, "Model ")
        assert by_id(driver, "keybox").get_attribute("hidden") is not None  # no key on this server: none asked for
        # Every control has a label a screen reader reads; results are announced.
        unlabelled = driver.execute_script(
            "return [...document.querySelectorAll('textarea, select, input:not([type=radio])')].filter(e => !e.labels.length).map(e => e.id)")
        assert unlabelled == []
        assert by_id(driver, "results").get_attribute("aria-live") == "polite" and by_id(driver, "error").get_attribute("role") == "alert"
        adapters = [o.get_attribute("value") for o in by_id(driver, "adapter").find_elements(By.TAG_NAME, "option")]
        with urllib.request.urlopen(server + "/health", timeout=30) as r:
            served = list(json.load(r)["adapters"])
        assert adapters == ["", *served] and {"choose", "judge", "documents", "base"} <= set(served)  # what the server holds

        ask(driver, QUESTION, OPTIONS, variant="setmask-setpe")
        by_id(driver, "run").click()
        assert wait_for(driver, "#answer", 120).text == expected["answer"]
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#scores tbody tr")]
        assert len(rows) == 4 and rows[OPTIONS.index(expected["answer"])].startswith("★ " + expected["answer"])
        for row, score in zip(rows, expected["scores"]):
            assert row.endswith(f"{score:.4f}")

        by_id(driver, "orderings").click()
        wait_for(driver, "#ordering-result", 600)
        chosen = driver.find_element(By.CSS_SELECTOR, "section.reading[data-reading=chosen]")
        base = driver.find_element(By.CSS_SELECTOR, "section.reading[data-reading=base]")
        # The invariant reading: one answer in every one of the 24 orderings, the one Run gave.
        assert (chosen.get_attribute("data-orderings"), chosen.get_attribute("data-distinct")) == ("24", "1")
        counts = {b.get_attribute("data-option"): int(b.get_attribute("data-count")) for b in chosen.find_elements(By.CSS_SELECTOR, "rect[data-option]")}
        assert counts == {o: 24 if o == expected["answer"] else 0 for o in OPTIONS}
        assert chosen.find_element(By.CLASS_NAME, "verdict").text == f"The same option in all 24 orderings: {expected['answer']}."
        base_counts = [int(b.get_attribute("data-count")) for b in base.find_elements(By.CSS_SELECTOR, "rect[data-option]")]
        assert base.get_attribute("data-variant") == "causal-pe" and sum(base_counts) == 24 and len(base_counts) == 4
        assert "Base model: causal-pe, no adapter" in base.text

        # A phone-width screen: nothing wider than the window.
        driver.set_window_size(390, 844)
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")

        # An error: the server's own one line.
        status, refusal = post(server, "/v1/choose", {"question": QUESTION, "options": ["Paris", "Rome", "Paris"]})
        assert status == 400
        ask(driver, QUESTION, ["Paris", "Rome", "Paris"])
        by_id(driver, "run").click()
        assert wait_for(driver, "#error", 60, "error: ").text == "error: " + refusal["error"]


def test_the_page_asks_for_the_key_once(model_dir):
    from selenium.webdriver.common.by import By

    key = "page-key"
    with serve_process("--model", model_dir, "--adapter", "none", "--api-key", key) as (_, url), chromium() as driver:
        driver.get(url + "/")
        wait_for(driver, "#keybox", 60)
        assert driver.switch_to.active_element == by_id(driver, "key")  # focus goes to the key
        assert by_id(driver, "server").text == "This server needs an API key."  # /health without the key names nothing served
        by_id(driver, "key").send_keys("wrong")
        by_id(driver, "usekey").click()
        ask(driver, "Which is a fruit?", ["apple", "dog"])
        by_id(driver, "run").click()
        assert wait_for(driver, "#error", 60, "error: ").text == "error: wrong API key"
        wait_for(driver, "#keybox", 10)  # asked again
        by_id(driver, "key").clear()
        by_id(driver, "key").send_keys(key)
        by_id(driver, "usekey").click()
        wait_for(driver, "#server", 60, "Model ")  # with the key, /health names the model
        by_id(driver, "run").click()
        _, expected = post(url, "/v1/choose", {"question": "Which is a fruit?", "options": ["apple", "dog"]}, key)
        assert wait_for(driver, "#answer", 120).text == expected["answer"]
        driver.refresh()  # once per tab: a reload keeps the key
        wait_for(driver, "#server", 60, "Model ")
        assert by_id(driver, "keybox").get_attribute("hidden") is not None
        assert driver.find_elements(By.CSS_SELECTOR, "#error:not(:empty)") == []


def test_a_winner_that_ends_a_sentence_and_an_error_after_an_answer(model_dir):
    """The verdict keeps a winner's own full stop ("A dog.", not "A dog.."; '"hi."' and
    "(red.)" as they are, the stop inside the quotes or brackets); an error clears the answer
    before it, which would otherwise read as this request's."""
    from selenium.webdriver.common.by import By

    options = ["An apple.", "A dog."]
    with serve_process("--model", model_dir, "--adapter", "none") as (_, url), chromium() as driver:
        driver.get(url + "/")
        wait_for(driver, "#server", 60, "Model ")
        ended = ['"hi."', "(red.)", "“Yes!”", '"hi"', "(red)"]
        assert driver.execute_script("return arguments[0].map(sentence)", ended) == ['"hi."', "(red.)", "“Yes!”", '"hi".', "(red)."]
        ask(driver, "Which is a fruit?", options)
        by_id(driver, "orderings").click()
        wait_for(driver, "#ordering-result", 120)
        chosen = driver.find_element(By.CSS_SELECTOR, "section.reading[data-reading=chosen]")
        _, expected = post(url, "/v1/choose", {"question": "Which is a fruit?", "options": options})
        assert chosen.find_element(By.CLASS_NAME, "verdict").text == f"The same option in all 2 orderings: {expected['answer']}"
        by_id(driver, "run").click()
        assert wait_for(driver, "#answer", 60).text == expected["answer"]
        ask(driver, "Which is a fruit?", ["An apple.", "An apple."])
        by_id(driver, "run").click()
        wait_for(driver, "#error", 60, "error: ")
        assert driver.find_elements(By.CSS_SELECTOR, "#answer, #run-result, #ordering-result") == []
