"""The web console in tests: where a node serves it, a logged-in HTTP client of its JSON
API, and a headless Chromium driven by selenium (Debian's ``chromium`` and
``chromium-driver``, installed here when missing, through ``deploy/debian_packages.py``).

``FERRYMQ_CONSOLE_SCREENSHOTS=<dir>`` makes the browser tests save each page's screenshot
there as ``console-<page>.png`` (``docs/img`` for the docs; ``make test`` leaves them)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
from dataclasses import dataclass

import pytest

from deploy import debian_packages
from ferrymq.client import ClientSecurity
from ferrymq.launcher.cluster import ClusterPlan, NodePlan, log_path
from ferrymq.launcher.polling import until

CONSOLE_ON = " console on "
CHROMIUM_PACKAGES = ["chromium", "chromium-driver"]
SCREENSHOTS_VARIABLE = "FERRYMQ_CONSOLE_SCREENSHOTS"
# What a cluster's node.toml gets for an auth-on cluster with the console on (the plan
# supplies the cluster secret).
ROOT = ClientSecurity("root", "root-secret-key")
CONSOLE_SETTINGS = {
    "security": {
        "auth": True,
        "clock_skew_s": 120,
        "admin_access_key": ROOT.access_key,
        "admin_secret_key": ROOT.secret_key,
    },
    "console": {"enabled": True, "port": 0},
}


def console_of(plan: ClusterPlan, node: NodePlan) -> str:
    """``host:port`` of ``node``'s console, from the line its log has once it serves."""

    def printed() -> str | None:
        try:
            with open(log_path(plan, node), encoding="utf-8", errors="replace") as f:
                lines = [line for line in f if CONSOLE_ON in line and f" {node.id} " in line]
        except FileNotFoundError:
            return None
        return lines[-1].rsplit(" ", 1)[1].strip() if lines else None

    return until(printed, 30, f"{node.id}'s console line")


@dataclass
class Answer:
    status: int
    body: dict
    headers: dict[str, str]


class ConsoleClient:
    """The console's JSON API as its page calls it: a session cookie, the CSRF token and
    the console's own ``Origin`` on every state-changing request."""

    def __init__(self, address: str) -> None:
        self.address = address
        host, _, port = address.rpartition(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.cookie = ""
        self.csrf = ""

    @property
    def origin(self) -> str:
        return f"http://{self.address}"

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        csrf: str | None = None,
        origin: str | None = None,
        cookie: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One request; ``csrf``, ``origin`` and ``cookie`` replace this client's own
        (``""``: none sent)."""
        sent = {"Accept": "application/json", **(headers or {})}
        cookie = self.cookie if cookie is None else cookie
        if cookie:
            sent["Cookie"] = cookie
        if method != "GET":
            origin = self.origin if origin is None else origin
            csrf = self.csrf if csrf is None else csrf
            if origin:
                sent["Origin"] = origin
            if csrf:
                sent["X-CSRF-Token"] = csrf
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            sent["Content-Type"] = "application/json"
        self.connection.request(method, path, body=data, headers=sent)
        response = self.connection.getresponse()
        raw = response.read()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"text": raw.decode("utf-8", "replace")}
        return Answer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})

    def login(self, security: ClientSecurity) -> Answer:
        answer = self.request(
            "POST",
            "/api/login",
            {"access_key": security.access_key, "secret_key": security.secret_key},
            csrf="",
        )
        if answer.status == 200:
            self.cookie = answer.headers["set-cookie"].split(";", 1)[0]
            self.csrf = answer.body["csrf"]
        return answer

    def close(self) -> None:
        self.connection.close()


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
