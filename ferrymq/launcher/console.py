"""A node's web console from code: where a cluster's node serves it (the line its log has)
and a client of its JSON API that behaves as the console's page does (session cookie,
CSRF token, the console's own ``Origin``): the tests' and ``bench.console``'s."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass

from ferrymq.client.security import ClientSecurity
from ferrymq.launcher.cluster import ClusterPlan, NodePlan, log_path
from ferrymq.launcher.polling import until

CONSOLE_ON = " console on "


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

    def __init__(self, address: str, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: the console speaks HTTPS (the node has a certificate)."""
        self.address = address
        self.scheme = "https" if ssl_context is not None else "http"
        host, _, port = address.rpartition(":")
        if ssl_context is not None:
            self.connection = http.client.HTTPSConnection(
                host, int(port), timeout=30, context=ssl_context
            )
        else:
            self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.cookie = ""
        self.csrf = ""

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.address}"

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
