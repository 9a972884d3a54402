"""The web console in tests: an auth-on cluster's settings with the console on, where a
node serves it and a client of its JSON API (``ferrymq/launcher/console.py``), and a
headless Chromium driven by selenium (Debian's ``chromium`` and
``chromium-driver``, installed here when missing, through ``deploy/debian_packages.py``).

``FERRYMQ_CONSOLE_SCREENSHOTS=<dir>`` makes the browser tests save each page's screenshot
there as ``console-<page>.png`` (``docs/img`` for the docs; ``make test`` leaves them)."""

from __future__ import annotations

import os
import shutil

import pytest

from deploy import debian_packages
from ferrymq.launcher.console import Answer, ConsoleClient, console_of
from tests.support.auth import ROOT

__all__ = ["ROOT", "Answer", "ConsoleClient", "browser", "console_of", "screenshot"]
CHROMIUM_PACKAGES = ["chromium", "chromium-driver"]
SCREENSHOTS_VARIABLE = "FERRYMQ_CONSOLE_SCREENSHOTS"
# What a cluster's node.toml gets for an auth-on cluster with the console on: the
# security section of tests/support/auth.py's AUTH_TOML (the plan supplies the cluster
# secret).
CONSOLE_SETTINGS = {
    "security": {
        "auth": True,
        "clock_skew_s": 120,
        "admin_access_key": ROOT.access_key,
        "admin_secret_key": ROOT.secret_key,
    },
    "console": {"enabled": True, "port": 0},
}


def chromium_present() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def browser():
    """A headless Chromium (installed from Debian when missing), or the test is failed
    with why it cannot have one."""
    if not chromium_present():
        why = debian_packages.install(CHROMIUM_PACKAGES, present=chromium_present)
        if why or not chromium_present():
            pytest.fail(f"no headless Chromium for the console's browser tests: {why}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
    ):
        options.add_argument(argument)
    service = Service(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    return driver


def screenshot(driver, page: str) -> None:
    """``console-<page>.png`` into ``$FERRYMQ_CONSOLE_SCREENSHOTS``, when it is set."""
    directory = os.environ.get(SCREENSHOTS_VARIABLE)
    if directory:
        os.makedirs(directory, exist_ok=True)
        driver.save_screenshot(os.path.join(directory, f"console-{page}.png"))
