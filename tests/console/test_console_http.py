"""The console's HTTP server without a browser: its bounds against malformed and abusive
requests (the server itself, on a loop of the test's own), and every refusal of the door
against a real node with auth on (no session, a wrong or missing CSRF token, another
origin, another host name, a user without the rights), each checked to have changed
nothing through the SDK."""

from __future__ import annotations

import asyncio
import base64
import http.client as http_client
import json
import re
import ssl
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client import Admin, Message, Producer, SimpleConsumer
from ferrymq.client.admin import AclRule
from ferrymq.protocol.ferrymq import admin_pb2 as admin_api
from node.config import ConfigError, parse_node_config
from node.console import http
from node.console.http import (
    BadRequest,
    HttpServer,
    Request,
    Response,
    body_length,
    parse_head,
    split_target,
)
from node.console.server import LOGIN_FAILURES_MAX, LOGIN_WINDOW_S, LoginThrottle
from node.console.sessions import SessionKeys
from routing.acl import User
from tests.support.auth import APP, AUTH_TOML, ROOT, signed
from tests.support.console import ConsoleClient
from tests.support.nodes import start_node
from tests.support.rpc import stubs
from tests.support.tls_certs import make_pki

CONSOLE_TOML = "\n[console]\nenabled = true\nport = 0\n"


# ---- the HTTP server's bounds ---------------------------------------------------------------
async def echo(request: Request) -> Response:
    return Response(200, f"{request.method} {request.path} {len(request.body)}".encode())


def exchange(raw: bytes, **bounds) -> bytes:
    """What a server with ``bounds`` (module constants of node.console.http) answers to
    ``raw``, read until it closes the connection."""

    async def run() -> bytes:
        server = HttpServer(echo)
        port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return answer
        finally:
            await server.close()

    saved = {name: getattr(http, name) for name in bounds}
    for name, value in bounds.items():
        setattr(http, name, value)
    try:
        return asyncio.run(run())
    finally:
        for name, value in saved.items():
            setattr(http, name, value)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_keep_alive_answers_requests_one_after_the_other_and_close_ends():
    answer = exchange(
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        b"GET /never HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert b"GET /a 0" in answer and b"POST /b 3" in answer and b"GET /c 0" in answer
    assert b"/never" not in answer


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /" + b"a" * (20 * 1024) + b" HTTP/1.1\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 70 + b"\r\n", 431),
        (b"POST / HTTP/1.1\r\nContent-Length: 300000\r\n\r\n", 413),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: x\r\n\r\n", 411),
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", 400),
        (b"GET / HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Name: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET http://elsewhere/ HTTP/1.1\r\n\r\n", 400),
        (b"BREW / HTTP/1.1\r\n\r\n", 405),
    ],
)
def test_a_malformed_or_oversized_request_gets_a_precise_status_and_the_link_closes(raw, status):
    answer = exchange(raw + b"GET /after HTTP/1.1\r\n\r\n")
    assert status_of(answer) == status, answer[:200]
    assert b"Connection: close" in answer
    assert b"/after" not in answer


def test_a_silent_or_slow_client_is_let_go_without_an_answer():
    assert exchange(b"", HEAD_TIMEOUT_S=0.2) == b""
    assert exchange(b"GET / HTTP/1.1\r\nHost:", HEAD_TIMEOUT_S=0.2) == b""
    slow_body = b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"
    assert exchange(slow_body, BODY_TIMEOUT_S=0.2) == b""


def test_connections_past_the_limit_are_closed_at_once():
    async def run() -> list[bytes]:
        server = HttpServer(echo)
        port = await server.start("127.0.0.1", 0)
        try:
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            deadline = asyncio.get_running_loop().time() + 5
            while len(server.connections) < 2:  # the server took both: the third is one more
                assert asyncio.get_running_loop().time() < deadline, "connections not taken"
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            try:
                third = await asyncio.wait_for(reader.read(), 5)
            except ConnectionResetError:  # closed before the request was read
                third = b""
            answers = []
            for held_reader, held_writer in held:
                held_writer.write(b"GET /held HTTP/1.1\r\nConnection: close\r\n\r\n")
                answers.append(await asyncio.wait_for(held_reader.read(), 5))
            return [third, *answers]
        finally:
            await server.close()

    saved = http.MAX_CONNECTIONS
    http.MAX_CONNECTIONS = 2
    try:
        third, *held = asyncio.run(run())
    finally:
        http.MAX_CONNECTIONS = saved
    assert third == b""
    assert all(b"GET /held 0" in answer for answer in held)


# ---- sessions and logins, on their own -------------------------------------------------------
def test_a_session_ends_at_its_expiry_on_logout_and_when_altered():
    now = [1_000_000.0]
    keys = SessionKeys("a-cluster-secret", ttl_s=60, clock=lambda: now[0])
    user = User("app", b"\x01sealed", admin=False)
    cookie, session = keys.issue(user)
    assert keys.verify(cookie) == session
    payload, signature = cookie.split(".")
    assert keys.verify(payload[:-2] + "xx." + signature) is None
    assert keys.verify(cookie + "x") is None
    assert SessionKeys("another-secret", 60, clock=lambda: now[0]).verify(cookie) is None
    now[0] += 61
    assert keys.verify(cookie) is None
    now[0] -= 61
    keys.revoke(session)
    assert keys.verify(cookie) is None
    _, other = keys.issue(user)
    assert keys.csrf_matches(other, keys.csrf_token(other))
    assert not keys.csrf_matches(other, keys.csrf_token(session))


def test_failed_logins_from_one_address_wait_for_the_window():
    now = [0.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    for _ in range(LOGIN_FAILURES_MAX):
        assert throttle.allowed("10.0.0.1")
        throttle.failed("10.0.0.1")
    assert not throttle.allowed("10.0.0.1")
    assert throttle.allowed("10.0.0.2")
    now[0] += LOGIN_WINDOW_S
    assert throttle.allowed("10.0.0.1")


# ---- configuration -----------------------------------------------------------------------------
def test_console_config_defaults_checks_and_environment():
    config = parse_node_config("")
    assert not config.console.enabled and config.console.host == "127.0.0.1"
    with pytest.raises(ConfigError) as error:
        parse_node_config('[console]\nenabled = true\nhost = "0.0.0.0"\n')
    assert str(error.value) == (
        "console.host = '0.0.0.0' with security.auth = false: anyone who reaches the console "
        "would act as an admin; bind a loopback address (127.0.0.1, ::1 or localhost), or "
        "turn security.auth on"
    )
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        parse_node_config(f'[console]\nenabled = true\nhost = "{host}"\n')
    secured = AUTH_TOML + '[console]\nenabled = true\nhost = "0.0.0.0"\n'
    assert parse_node_config(secured).console.host == "0.0.0.0"
    environment = {
        "FERRYMQ_CONSOLE__ENABLED": "true",
        "FERRYMQ_CONSOLE__PORT": "9000",
        "FERRYMQ_CONSOLE__HOSTNAMES": '["console.example"]',
    }
    config = parse_node_config("", environment)
    assert config.console.enabled and config.console.port == 9000
    assert config.console.hostnames == ("console.example",)
    for bad, message in (
        ("port = 70000", "console.port must be an integer in 0..65535, got 70000"),
        ("session_ttl_s = 5", "console.session_ttl_s must be an integer in 60..604800, got 5"),
        ('hostnames = ["a:80"]', "console.hostnames must be a list of host names without"),
        ("enabled = 1", "console.enabled must be true or false"),
        ("colour = 1", "unknown option(s) in [console]: colour"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_node_config(f"[console]\n{bad}\n")


# ---- the door's refusals, on a real node -------------------------------------------------------
@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("console-http")
    node = start_node(str(directory / "node"), AUTH_TOML + CONSOLE_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_user(APP.access_key, APP.secret_key)
        yield node
    finally:
        node.stop()


@pytest.fixture
def root_client(secured):
    client = ConsoleClient(secured.console)
    assert client.login(ROOT).status == 200
    yield client
    client.close()


def topics_of(node) -> set[str]:
    with Admin(node.address, security=ROOT) as admin:
        return {t.name for t in admin.list_topics()}


def test_the_page_and_its_assets_come_with_a_strict_policy(secured):
    client = ConsoleClient(secured.console)
    page = client.request("GET", "/")
    assert page.status == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    html = page.body["text"]
    assert "<script src=" in html and "<script>" not in html and " on" not in html.lower()
    for asset in ("console.js", "console.css"):
        answer = client.request("GET", f"/assets/{asset}")
        assert answer.status == 200 and "content-security-policy" in answer.headers
    for missing in ("/assets/../server.py", "/assets/nothing.js", "/server.py", "/api"):
        assert client.request("GET", missing).status == 404


def test_without_a_session_every_api_call_is_refused_401(secured):
    client = ConsoleClient(secured.console)
    for method, path in (
        ("GET", "/api/session"),
        ("GET", "/api/cluster"),
        ("GET", "/api/topics"),
        ("POST", "/api/topics"),
        ("POST", "/api/failover"),
        ("DELETE", "/api/topics/x"),
    ):
        answer = client.request(method, path, {} if method == "POST" else None)
        assert answer.status == 401, (method, path, answer)
        assert answer.body == {"error": "no session: log in"}
    forged = "ferrymq_console_" + secured.console.rpartition(":")[2] + "=e30.AAAA"
    assert client.request("GET", "/api/cluster", cookie=forged).status == 401


def test_login_sets_a_strict_cookie_and_refuses_wrong_keys_alike(secured):
    client = ConsoleClient(secured.console)
    wrong = client.login(type(ROOT)(ROOT.access_key, "not-the-secret"))
    unknown = client.login(type(ROOT)("nobody", "whatever-secret"))
    assert wrong.status == unknown.status == 401
    assert wrong.body == unknown.body
    assert "wrong access key or secret key" in wrong.body["error"]
    answer = client.login(ROOT)
    assert answer.status == 200 and answer.body["admin"] and answer.body["user"] == "root"
    cookie = answer.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"):
        assert attribute in cookie
    assert "Secure" not in cookie  # plaintext here: Secure would stop the browser sending it
    assert client.request("GET", "/api/session").body["csrf"] == answer.body["csrf"]


def test_state_changes_need_the_origin_and_the_csrf_token(secured, root_client):
    body = {"name": "csrf-topic", "queue_count": 1}
    refusals = {
        "no origin": root_client.request("POST", "/api/topics", body, origin=""),
        "another origin": root_client.request(
            "POST", "/api/topics", body, origin="http://evil.example"
        ),
        "no token": root_client.request("POST", "/api/topics", body, csrf=""),
        "a wrong token": root_client.request("POST", "/api/topics", body, csrf="x" * 43),
    }
    other = ConsoleClient(secured.console)
    other.login(ROOT)
    refusals["another session's token"] = root_client.request(
        "POST", "/api/topics", body, csrf=other.csrf
    )
    for why, answer in refusals.items():
        assert answer.status == 403, why
    assert "Origin" in refusals["no origin"].body["error"]
    assert refusals["no token"].body["error"] == "missing or wrong CSRF token (X-CSRF-Token)"
    assert "csrf-topic" not in topics_of(secured)
    assert root_client.request("POST", "/api/topics", body).status == 200
    assert "csrf-topic" in topics_of(secured)
    assert root_client.request("DELETE", "/api/topics/csrf-topic", csrf="").status == 403
    assert "csrf-topic" in topics_of(secured)


def test_another_host_name_is_refused_421(secured, root_client):
    answer = root_client.request("GET", "/api/cluster", headers={"Host": "rebound.example"})
    assert answer.status == 421
    assert root_client.request("GET", "/", headers={"Host": "localhost:1"}).status == 200


def test_a_user_without_admin_rights_gets_the_services_refusal(secured):
    client = ConsoleClient(secured.console)
    assert client.login(APP).status == 200
    assert client.request("GET", "/api/cluster").status == 200  # valid credentials suffice
    for method, path, body in (
        ("GET", "/api/topics", None),
        ("POST", "/api/topics", {"name": "app-topic", "queue_count": 1}),
        ("POST", "/api/failover", {"broker_group": "group-1"}),
        ("GET", "/api/users", None),
        ("POST", "/api/users", {"access_key": "sneaky", "secret_key": "sneaky-secret"}),
        ("GET", "/api/groups", None),
    ):
        answer = client.request(method, path, body)
        assert answer.status == 403, (path, answer)
        assert answer.body["error"].startswith("FORBIDDEN: user app: console:")
        assert "needs admin rights" in answer.body["error"]
    assert "app-topic" not in topics_of(secured)


def test_logout_and_a_deleted_user_end_the_session(secured):
    client = ConsoleClient(secured.console)
    client.login(ROOT)
    cookie = client.cookie
    assert client.request("POST", "/api/logout", {}).status == 200
    assert client.request("GET", "/api/cluster", cookie=cookie).status == 401
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_user("leaving", "leaving-secret")
    leaving = ConsoleClient(secured.console)
    assert leaving.login(type(ROOT)("leaving", "leaving-secret")).status == 200
    assert leaving.request("GET", "/api/cluster").status == 200
    with Admin(secured.address, security=ROOT) as admin:
        admin.delete_user("leaving")
    answer = leaving.request("GET", "/api/cluster")
    assert answer.status == 401 and "deleted" in answer.body["error"]


def test_bad_api_input_gets_a_precise_400(root_client):
    answer = root_client.request("POST", "/api/topics", {"name": "t", "queue_count": 0})
    assert answer.status == 400 and answer.body == {
        "error": "queue_count must be an integer in 1..1024"
    }
    root_client.connection.request(
        "POST",
        "/api/topics",
        body=b"[1",
        headers={
            "Cookie": root_client.cookie,
            "Origin": root_client.origin,
            "X-CSRF-Token": root_client.csrf,
        },
    )
    response = root_client.connection.getresponse()
    assert response.status == 400
    assert json.loads(response.read()) == {"error": "the body must be a JSON object"}
    assert root_client.request("GET", "/api/topics/no-such-topic").status == 404
    assert root_client.request("GET", "/api/topics?limit=100000").status == 400
    fifo = root_client.request("POST", "/api/groups", {"name": "g", "fifo": "yes"})
    assert fifo.status == 400 and fifo.body == {"error": "fifo must be true or false"}


def test_without_auth_the_console_opens_a_session_without_keys_but_still_wants_csrf(tmp_path):
    node = start_node(str(tmp_path / "open"), CONSOLE_TOML)
    try:
        client = ConsoleClient(node.console)
        answer = client.login(type(ROOT)("", ""))
        assert answer.status == 200 and answer.body["auth"] is False and answer.body["admin"]
        body = {"name": "open-topic", "queue_count": 1}
        assert client.request("POST", "/api/topics", body, csrf="").status == 403
        assert client.request("POST", "/api/topics", body).status == 200
        with Admin(node.address) as admin:
            assert "open-topic" in {t.name for t in admin.list_topics()}
    finally:
        node.stop()


def test_message_lookups_follow_the_users_subscribe_permission(secured, root_client):
    """The console is one more door of the query service: a user sees the messages of a
    topic it may subscribe to, and gets the service's refusal for another."""
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_topic("console-open", 1)
        admin.create_topic("console-closed", 1)
        admin.grant(APP.access_key, AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "console-open"))
    began_ms = int(time.time() * 1000) - 1
    with Producer(secured.address, security=ROOT) as producer:
        sent = [
            producer.send(Message(topic, f"{topic} {i}".encode(), keys=["k"]))
            for topic in ("console-open", "console-closed")
            for i in range(3)
        ]
    ended_ms = int(time.time() * 1000) + 1
    app = ConsoleClient(secured.console)
    app.login(APP)
    answer = app.request("GET", f"/api/messages?topic=console-open&begin={began_ms}&end={ended_ms}")
    assert answer.status == 200
    assert [m["message_id"] for m in answer.body["messages"]] == [r.message_id for r in sent[:3]]
    assert base64.b64decode(answer.body["messages"][0]["body_base64"]) == b"console-open 0"
    refused = app.request("GET", "/api/messages?topic=console-closed&key=k")
    assert refused.status == 403
    assert refused.body["error"] == (
        "FORBIDDEN: user app has no subscribe permission on topic console-closed"
    )
    later = root_client.request(
        "GET", f"/api/messages?topic=console-open&begin={ended_ms + 60_000}"
    )
    assert later.status == 200 and later.body["messages"] == []
    by_key = root_client.request("GET", "/api/messages?topic=console-closed&key=k")
    assert len(by_key.body["messages"]) == 3
    stored = by_key.body["messages"][0]["stored"]
    assert stored["broker_group"] == "group-1" and stored["commitlog_offset"] >= 0
    # An offset id alone is decided on the topic of the record found there.
    offset_id = by_key.body["messages"][0]["offset_message_id"]
    refused = app.request("GET", f"/api/messages?id={offset_id}")
    assert refused.status == 403 and "on topic console-closed" in refused.body["error"]
    found = root_client.request("GET", f"/api/messages?id={offset_id}")
    assert [m["offset_message_id"] for m in found.body["messages"]] == [offset_id]
    assert root_client.request("GET", "/api/messages?topic=console-open").status == 400


def test_a_message_history_follows_the_users_subscribe_permission_at_every_door(
    secured, root_client
):
    """A message's delivery history is the history service's, whichever door asks: the
    console (401 without a session, the service's 403, precise 400 and 404), the Admin
    door and the SDK, each refused the same way for a topic the user may not read."""
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_topic("console-history", 1)
        admin.create_topic("console-history-closed", 1)
        admin.create_group("console-historians")
        admin.grant(APP.access_key, AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "console-history"))
    with Producer(secured.address, security=ROOT) as producer:
        for topic in ("console-history", "console-history", "console-history-closed"):
            producer.send(Message(topic, b"traced"))
    with SimpleConsumer(
        secured.address, "console-historians", "console-history", security=ROOT
    ) as consumer:
        first, second = consumer.receive(2, invisible_s=300, wait_s=1)
        consumer.ack(first)
    path = "/api/messages/history?broker_group=group-1&topic={}&queue=0&offset={}"

    answer = root_client.request("GET", path.format("console-history", first.queue_offset))
    assert answer.status == 200, answer
    (group,) = answer.body["groups"]
    assert group["group"] == "console-historians" and group["model"] == "pop"
    assert (group["state"], group["state_text"]) == ("consumed", "consumed: acked at attempt 1")
    assert [e["kind"] for e in group["events"]] == ["delivered", "acked"]
    assert answer.body["truncated"] is False and answer.body["note"] == ""
    assert answer.body["node"] == "node-1" and answer.body["broker_group"] == "group-1"
    in_flight = root_client.request("GET", path.format("console-history", second.queue_offset))
    assert in_flight.body["groups"][0]["state"] == "in flight"
    assert in_flight.body["groups"][0]["state_text"].startswith("in flight: attempt 1,")

    assert (
        ConsoleClient(secured.console).request("GET", path.format("console-history", 0)).status
        == 401
    )
    app = ConsoleClient(secured.console)
    app.login(APP)
    assert app.request("GET", path.format("console-history", 0)).body == answer.body
    refused = app.request("GET", path.format("console-history-closed", 0))
    assert refused.status == 403
    reason = "FORBIDDEN: user app has no subscribe permission on topic console-history-closed"
    assert refused.body["error"] == reason
    missing = root_client.request("GET", path.format("console-history", 99))
    assert missing.status == 404
    assert missing.body["error"] == "no message at console-history queue 0 offset 99"
    for bad, error in (
        ("/api/messages/history?topic=console-history&queue=0&offset=0", "needs its topic and"),
        (path.format("console-history", -1), "offset must be an integer"),
        (path.replace("queue=0", "queue=x").format("console-history", 0), "queue must be"),
    ):
        answer = root_client.request("GET", bad)
        assert answer.status == 400 and error in answer.body["error"], (bad, answer)
    unknown = root_client.request("GET", path.replace("group-1", "group-9").format("x", 0))
    assert unknown.status == 404 and unknown.body["error"] == "no broker group group-9"

    channel, _, admin_stub = stubs(secured.address)
    request = admin_api.MessageHistoryRequest(topic="console-history-closed", queue_id=0, offset=0)
    with pytest.raises(grpc.RpcError) as denied:
        admin_stub.MessageHistory(request, metadata=signed(APP, "history-app"))
    assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert denied.value.details() == reason
    channel.close()
    with Admin(secured.address, security=APP) as admin:
        history = admin.message_history("console-history", 0, first.queue_offset)
        assert [(g.group, g.state) for g in history.groups] == [("console-historians", "consumed")]
        with pytest.raises(Exception, match="no subscribe permission on topic"):
            admin.message_history("console-history-closed", 0, 0)


# ---- anything a browser or an attacker may send ------------------------------------------------
HEAD_PARTS = st.sampled_from(
    [
        b"GET / HTTP/1.1\r\n",
        b"POST /api/x HTTP/1.1\r\n",
        b"Content-Length: 5\r\n",
        b"Content-Length: 99999999999999\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"Host: x\r\n",
        b" folded\r\n",
        b"Cookie: a=b\r\n",
        b"\r\n",
        b":\r\n",
        b"\x00\xff\r\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(HEAD_PARTS, st.binary(max_size=40)), max_size=12))
def test_any_head_is_parsed_or_refused_precisely(parts):
    head = b"".join(parts) + b"\r\n\r\n"
    try:
        method, target, _, headers = parse_head(head)
        body_length(method, headers)
        split_target(target)
    except BadRequest as bad:
        assert 400 <= bad.status < 600 and bad.message


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(HEAD_PARTS, st.binary(max_size=60)), min_size=1, max_size=10))
def test_the_server_answers_any_bytes_with_a_status_or_closes(parts):
    answer = exchange(b"".join(parts), HEAD_TIMEOUT_S=0.1, BODY_TIMEOUT_S=0.1)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 ")
    for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer):
        assert int(status) in http.REASONS


def test_group_progress_of_every_topic_is_for_admins_through_the_admin_door(secured):
    """What the console asks a master (GroupProgress without a topic) is the service's
    admin-only call at every door that serves it."""
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_topic("console-progress", 2)
        admin.create_group("console-progressing")
    with Producer(secured.address, security=ROOT) as producer:
        for _ in range(3):
            producer.send(Message("console-progress", b"x"))
    with SimpleConsumer(
        secured.address, "console-progressing", "console-progress", security=ROOT
    ) as consumer:
        held = len(consumer.receive(2, invisible_s=300, wait_s=1))
    channel, _, admin_stub = stubs(secured.address)
    request = admin_api.GroupProgressRequest(group="console-progressing")
    answer = admin_stub.GroupProgress(request, metadata=signed(ROOT, "progress-root"))
    assert answer.status.code == 0
    assert {q.topic for q in answer.queues} == {"console-progress"}
    assert sum(q.lag for q in answer.queues) == 3
    assert sum(q.in_flight for q in answer.queues) == held > 0
    with pytest.raises(grpc.RpcError) as refused:
        admin_stub.GroupProgress(request, metadata=signed(APP, "progress-app"))
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "needs admin rights" in refused.value.details()
    channel.close()


def group_config(node, name: str) -> tuple[int, bool, bool]:
    with Admin(node.address, security=ROOT) as admin:
        group = next(g for g in admin.list_groups() if g.name == name)
    return group.max_delivery_attempts, group.fifo, group.lite_exclusive


def test_a_group_is_edited_in_place_through_the_admin_service(secured, root_client):
    """PUT /api/groups/<name> (the group page's Edit form): what it names changes, the rest
    stays; no session, a missing CSRF token or Origin, a user without admin rights, an
    unknown group and each bad value are refused precisely and change nothing."""
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_group("console-edited", max_delivery_attempts=16)
    path = "/api/groups/console-edited"
    edited = root_client.request("PUT", path, {"max_delivery_attempts": 4, "fifo": True})
    assert edited.status == 200 and edited.body == {
        "name": "console-edited",
        "max_delivery_attempts": 4,
        "fifo": True,
        "lite_exclusive": False,
    }
    assert group_config(secured, "console-edited") == (4, True, False)
    kept = root_client.request("PUT", path, {"lite_exclusive": True, "fifo": None})
    assert kept.status == 200 and (kept.body["max_delivery_attempts"], kept.body["fifo"]) == (
        4,
        True,
    )
    assert group_config(secured, "console-edited") == (4, True, True)
    change = {"max_delivery_attempts": 9, "fifo": False, "lite_exclusive": False}
    nobody = ConsoleClient(secured.console)
    assert nobody.request("PUT", path, change).status == 401
    assert root_client.request("PUT", path, change, csrf="").status == 403
    assert root_client.request("PUT", path, change, origin="http://evil.example").status == 403
    app = ConsoleClient(secured.console)
    assert app.login(APP).status == 200
    forbidden = app.request("PUT", path, change)
    assert forbidden.status == 403
    assert forbidden.body["error"].startswith("FORBIDDEN: user app: console:PUT /api/groups/")
    assert forbidden.body["error"].endswith("needs admin rights")
    missing = root_client.request("PUT", "/api/groups/console-nobody", change)
    assert missing.status == 404
    assert missing.body == {
        "error": "CONSUMER_GROUP_NOT_FOUND: group console-nobody does not exist"
    }
    for body, error in (
        (
            {"max_delivery_attempts": 0},
            "ILLEGAL_CONSUMER_GROUP: max delivery attempts must be 1..1000",
        ),
        (
            {"max_delivery_attempts": 1001},
            "ILLEGAL_CONSUMER_GROUP: max delivery attempts must be 1..1000",
        ),
        (
            {"max_delivery_attempts": "9"},
            "max_delivery_attempts must be an integer or null (unchanged)",
        ),
        (
            {"max_delivery_attempts": True},
            "max_delivery_attempts must be an integer or null (unchanged)",
        ),
        ({"fifo": "yes"}, "fifo must be true or false"),
        ({"lite_exclusive": 1}, "lite_exclusive must be true or false"),
    ):
        answer = root_client.request("PUT", path, body)
        assert (answer.status, answer.body) == (400, {"error": error}), body
    assert group_config(secured, "console-edited") == (4, True, True)


def test_with_a_certificate_the_console_speaks_https_and_its_cookie_is_secure(tmp_path):
    pki = make_pki(tmp_path / "pki")
    tls = f'tls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
    node = start_node(str(tmp_path / "tls"), AUTH_TOML + tls + CONSOLE_TOML)
    try:
        context = ssl.create_default_context(cafile=pki.ca)
        client = ConsoleClient(node.console, context)
        answer = client.login(ROOT)
        assert answer.status == 200
        assert "; Secure" in answer.headers["set-cookie"]
        assert client.request("GET", "/api/cluster").status == 200
        body = {"name": "tls-topic", "queue_count": 1}
        answer = client.request("POST", "/api/topics", body, origin=f"http://{node.console}")
        assert answer.status == 403  # the console's origin is https://
        assert client.request("POST", "/api/topics", body).status == 200
        with pytest.raises((ConnectionError, http_client.HTTPException, OSError)):
            ConsoleClient(node.console).request("GET", "/")  # plaintext to a TLS port
    finally:
        node.stop()
