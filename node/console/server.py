"""The console's door: the page and its assets, login, sessions, CSRF, and the JSON API.

Every request passes, in this order:

1. the ``Host`` header must name this console (an IP address, ``localhost``, the node's
   host or one of ``[console] hostnames``): a page of another site whose name was made to
   resolve to this address (DNS rebinding) is refused with 421;
2. a state-changing request (POST, PUT, DELETE) must carry an ``Origin`` equal to this
   console's own (``http[s]://<Host>``): 403 otherwise, login included;
3. an API request needs a session (the signed cookie, ``sessions.py``): 401 without one;
   the login is the one exception;
4. a state-changing API request needs the session's CSRF token in ``X-CSRF-Token``: 403;
5. the service decides (``api.py``): its refusal is answered with its reason.

Every answer carries a strict Content-Security-Policy (scripts and styles from this
origin's files only: no inline script, no eval, nothing from elsewhere), ``nosniff`` and
no framing; API answers are never cached.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import importlib.resources
import inspect
import ipaddress
import json
import logging
import mimetypes
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from node.authentication import Verification
from node.config import ConsoleOptions
from node.console.api import ApiCall, ApiError, ConsoleApi, json_body, refusal
from node.console.http import HttpServer, Request, Response
from node.console.sessions import Session, SessionKeys, fingerprint
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.admin import AdminRefused, refused
from node.services.caller import Caller, Door
from routing.acl import User
from routing.metadata import TopicError

log = logging.getLogger("ferrymq.console")
COOKIE_PREFIX = "ferrymq_console_"
CSRF_HEADER = "x-csrf-token"
STATE_CHANGING = frozenset({"POST", "PUT", "DELETE"})
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
ASSET_NAME = re.compile(r"^[a-z0-9_-]+\.(html|css|js|svg|png)$")
# Failed logins one address may make in a window before it waits (guessing secrets).
LOGIN_FAILURES_MAX = 10
LOGIN_WINDOW_S = 60.0
LOGIN_ADDRESSES_TRACKED = 4096


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str


def load_assets() -> dict[str, Asset]:
    """The page's files, read once from the package (an installed wheel carries them:
    ``pyproject.toml``, package data): served from memory, never from a path a request
    names."""
    assets = {}
    folder = importlib.resources.files("node.console") / "assets"
    for entry in folder.iterdir():
        if ASSET_NAME.match(entry.name):
            kind = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind == "application/javascript":
                kind += "; charset=utf-8"
            assets[entry.name] = Asset(entry.read_bytes(), kind)
    return assets


def json_response(status: int, value: object, headers: tuple = ()) -> Response:
    body = json.dumps(value, separators=(",", ":")).encode()
    return Response(status, body, "application/json", (("Cache-Control", "no-store"), *headers))


def error_response(error: ApiError) -> Response:
    return json_response(error.status, {"error": error.message})


class LoginThrottle:
    """Failed logins per address over the last ``LOGIN_WINDOW_S``: bounded in addresses."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._failures: dict[str, list[float]] = {}

    def allowed(self, address: str) -> bool:
        now = self.clock()
        recent = [t for t in self._failures.get(address, ()) if now - t < LOGIN_WINDOW_S]
        if recent:
            self._failures[address] = recent
        else:
            self._failures.pop(address, None)
        return len(recent) < LOGIN_FAILURES_MAX

    def failed(self, address: str) -> None:
        if len(self._failures) >= LOGIN_ADDRESSES_TRACKED and address not in self._failures:
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(address, []).append(self.clock())


class ConsoleServer:
    """The web console of one node (``[console]``, docs/console.md)."""

    def __init__(
        self,
        options: ConsoleOptions,
        api: ConsoleApi,
        verification: Verification | None,
        user_of: Callable[[str], User | None],
        cluster_secret: str,
        node_host: str,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``verification`` None: authentication is off (``security.auth``), the console
        is loopback-only (``node/config.py``) and its session names no user."""
        self.options = options
        self.api = api
        self.verification = verification
        self.user_of = user_of
        self.sessions = SessionKeys(cluster_secret, options.session_ttl_s)
        self.hostnames = {"localhost", node_host, options.host, *options.hostnames}
        self.http = HttpServer(self.handle, ssl_context)
        self.tls = ssl_context is not None
        self.assets = load_assets()
        self.throttle = LoginThrottle()
        self.port = 0

    @property
    def cookie_name(self) -> str:
        # Browsers share cookies between the ports of one host: each console its own.
        return f"{COOKIE_PREFIX}{self.port}"

    async def start(self) -> int:
        self.port = await self.http.start(self.options.host, self.options.port)
        return self.port

    async def close(self) -> None:
        await self.http.close()
        await self.api.masters.close()

    # ---- every request -------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        response = await self._route(request)
        return Response(
            response.status,
            response.body,
            response.content_type,
            (*SECURITY_HEADERS, *response.headers),
        )

    async def _route(self, request: Request) -> Response:
        host = request.header("host")
        if not self._known_host(host):
            return Response(421, b"this console answers to its own address only\n")
        if request.method in STATE_CHANGING and not self._same_origin(request, host):
            return error_response(
                ApiError(403, "cross-origin request refused: Origin must be this console's")
            )
        path = request.path
        if not path.startswith("/api/"):
            return self._asset(request)
        try:
            if path == "/api/login" and request.method == "POST":
                return self._login(request)
            session, user = self._session(request)
            if request.method in STATE_CHANGING and not self.sessions.csrf_matches(
                session, request.header(CSRF_HEADER)
            ):
                raise ApiError(403, "missing or wrong CSRF token (X-CSRF-Token)")
            caller = Caller(
                Door.CONSOLE, f"console:{request.method} {path}", user, request.peer_host
            )
            return await self._api(request, session, caller)
        except ApiError as error:
            return error_response(error)
        except (AccessDenied, AdminRefused, InvalidRequest) as error:
            return error_response(refusal(error))
        except TopicError as error:  # a name the routing state refuses, as the services do
            return error_response(refusal(refused(error)))

    def _known_host(self, host: str) -> bool:
        name = host
        if host.startswith("["):  # [::1]:8090
            name = host[1 : host.find("]")] if "]" in host else ""
        elif host.count(":") == 1:
            name = host.partition(":")[0]
        if not name:
            return False
        if name in self.hostnames:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def _same_origin(self, request: Request, host: str) -> bool:
        scheme = "https" if self.tls else "http"
        return request.header("origin") == f"{scheme}://{host}"

    def _asset(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"GET only\n")
        asset = None
        if request.path == "/":
            asset = self.assets.get("index.html")
        elif request.path.startswith("/assets/"):
            asset = self.assets.get(request.path.removeprefix("/assets/"))
        if asset is None:
            return Response(404, b"no such page\n")
        return Response(200, asset.body, asset.content_type, (("Cache-Control", "no-cache"),))

    # ---- sessions ------------------------------------------------------------------------
    def _cookie(self, request: Request) -> str:
        for part in request.header("cookie").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie_name:
                return value
        return ""

    def _session(self, request: Request) -> tuple[Session, User | None]:
        session = self.sessions.verify(self._cookie(request))
        if session is None:
            raise ApiError(401, "no session: log in")
        if self.verification is None:
            return session, None
        user = self.user_of(session.access_key)
        if user is None or fingerprint(user) != session.fingerprint:
            raise ApiError(401, "the session's user was deleted or its secret key changed")
        return session, user

    def _set_cookie(self, value: str, max_age_s: int) -> tuple[str, str]:
        secure = "; Secure" if self.tls else ""
        return (
            "Set-Cookie",
            f"{self.cookie_name}={value}; Path=/; Max-Age={max_age_s}; HttpOnly; "
            f"SameSite=Strict{secure}",
        )

    def _session_json(self, session: Session, user: User | None) -> dict:
        return {
            "user": session.access_key,
            "admin": user.admin if user is not None else self.verification is None,
            "auth": self.verification is not None,
            "csrf": self.sessions.csrf_token(session),
            "expires_s": session.expires_s,
        }

    def _login(self, request: Request) -> Response:
        if not self.throttle.allowed(request.peer_host):
            raise ApiError(429, "too many failed logins from this address: wait a minute")
        body = json_body(request.body)
        access_key, secret_key = body.get("access_key", ""), body.get("secret_key", "")
        user = None
        if self.verification is not None:
            if not isinstance(access_key, str) or not isinstance(secret_key, str):
                raise ApiError(400, "access_key and secret_key must be strings")
            try:
                user = self.verification.of_secret("console:login", access_key, secret_key)
            except AccessDenied as denied:
                self.throttle.failed(request.peer_host)
                raise ApiError(401, str(denied)) from None
        cookie, session = self.sessions.issue(user)
        return json_response(
            200,
            self._session_json(session, user),
            (self._set_cookie(cookie, self.options.session_ttl_s),),
        )

    # ---- the API -------------------------------------------------------------------------
    async def _api(self, request: Request, session: Session, caller: Caller) -> Response:
        method, path = request.method, request.path
        if path == "/api/session" and method == "GET":
            return json_response(200, self._session_json(session, caller.user))
        if path == "/api/logout" and method == "POST":
            self.sessions.revoke(session)
            return json_response(200, {"logged_out": True}, (self._set_cookie("", 0),))
        for route in self.api.routes:
            found = route.pattern.fullmatch(path) if route.method == method else None
            if found is not None:
                call = ApiCall(request.query, request.body, found.groups())
                answer = route.handler(caller, call)
                if inspect.isawaitable(answer):
                    answer = await answer
                return json_response(200, answer)
        raise ApiError(404, f"no API {method} {path}")
