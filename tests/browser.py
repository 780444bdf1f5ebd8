"""Headless Chromium from Debian's packages (``chromium``, ``chromium-driver``; ``make
browser`` installs them), driven by Selenium, for the playground page's tests and its
screenshot (``benchmarks/screenshot_playground.py``)."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def missing() -> str | None:
    """Why no browser can run here (None: it can)."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    if not (BROWSER and DRIVER):
        return "Debian's chromium and chromium-driver are not installed (make browser installs them: as root or with sudo)"
    return None


@contextlib.contextmanager
def chromium(width: int = 1100, height: int = 900):
    """A headless Chromium window of ``width`` x ``height`` CSS pixels; closed after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--disable-extensions", f"--window-size={width},{height}", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, css: str, timeout: float = 300.0, text: str | None = None):
    """The first element matching ``css`` once it shows (and holds ``text``, if given)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    located = (By.CSS_SELECTOR, css)
    condition = ec.text_to_be_present_in_element(located, text) if text else ec.visibility_of_element_located(located)
    WebDriverWait(driver, timeout).until(condition)
    return driver.find_element(*located)


def ask(driver, text: str, items: list[str], task: str = "choose", variant: str | None = None) -> None:
    """Fill the page's form as a person would (click the task, type into the fields)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.find_element(By.CSS_SELECTOR, f"input[name=task][value={task}]").click()
    for field, value in (("text", text), ("items", "\n".join(items))):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    if variant:
        Select(driver.find_element(By.ID, "variant")).select_by_value(variant)
