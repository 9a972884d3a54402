"""A topic page's test message (``POST /api/topics/<name>/messages``, ``node/console/sends.py``)
on a real node with auth on and a 1 KiB body limit: sent as the console's user through the
send service a client's send goes through, found afterwards through the SDK where the
answer says it is; and each refusal (no session, no CSRF token or Origin, no PUBLISH on
the topic, an unknown topic, an empty or oversized body, a FIFO topic without a message
group, a LITE topic without a lite topic, a DELAY topic without a delivery time, a
TRANSACTION topic, a field of the wrong shape) precise and storing nothing. The hand-over
to a master from a slave's console is in ``tests/console/test_console_browser.py``, on a
cluster."""

from __future__ import annotations

import pytest

from ferrymq.client import Admin
from ferrymq.client.admin import AclRule
from tests.support.auth import APP, AUTH_TOML, ROOT
from tests.support.console import ConsoleClient
from tests.support.nodes import start_node

BODY_LIMIT = 1024
# Right after the tests' [store] table: the node's body limit, the send service's rule.
NODE_TOML = (
    f"max_message_body_bytes = {BODY_LIMIT}\n"
    + AUTH_TOML
    + ("\n[console]\nenabled = true\nport = 0\n")
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("console-send") / "node"), NODE_TOML)
    try:
        with Admin(started.address, security=ROOT) as admin:
            admin.create_topic("sent-orders", 4, message_type="NORMAL")
            admin.create_topic("sent-fifo", 4, message_type="FIFO")
            admin.create_topic("sent-lite", 2, message_type="LITE")
            admin.create_topic("sent-closed", 1, message_type="NORMAL")
            admin.create_topic("sent-delayed", 1, message_type="DELAY")
            admin.create_topic("sent-tx", 1, message_type="TRANSACTION")
            admin.create_user(APP.access_key, APP.secret_key)
            admin.grant(APP.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", "sent-orders"))
        yield started
    finally:
        started.stop()


@pytest.fixture
def root(node):
    client = ConsoleClient(node.console)
    assert client.login(ROOT).status == 200
    yield client
    client.close()


def stored(node, topic: str) -> int:
    with Admin(node.address, security=ROOT) as admin:
        _, queues = admin.describe_topic(topic)
    return sum(q.max_offset for q in queues)


def send(client: ConsoleClient, topic: str, **body):
    return client.request("POST", f"/api/topics/{topic}/messages", body)


def test_a_test_message_is_stored_where_the_answer_says_as_the_sdk_then_finds(node, root):
    answer = send(root, "sent-orders", body="hello <b>console</b>", tag="TagA", keys=["k1", "k2"])
    assert answer.status == 200, answer
    sent = answer.body
    assert (sent["topic"], sent["broker_group"]) == ("sent-orders", "group-1")
    assert 0 <= sent["queue_id"] < 4 and sent["queue_offset"] == 0
    with Admin(node.address, security=ROOT) as admin:
        (found,) = admin.query_by_id(sent["message_id"], "sent-orders")
        (by_key,) = admin.query_by_key("sent-orders", "k2")
    assert (found.queue_id, found.queue_offset) == (sent["queue_id"], sent["queue_offset"])
    assert found.body == b"hello <b>console</b>" and found.tag == "TagA"
    assert found.keys == ["k1", "k2"] and by_key.message_id == sent["message_id"]
    assert found.properties.get("__MSG_TYPE") == "1"  # NORMAL, stamped as a 5.x client's is
    # A FIFO topic's message goes to its message group's queue, every time the same one.
    fifo = [send(root, "sent-fifo", body=f"step {i}", message_group="order-7") for i in range(3)]
    assert [a.status for a in fifo] == [200, 200, 200]
    assert len({a.body["queue_id"] for a in fifo}) == 1
    assert [a.body["queue_offset"] for a in fifo] == [0, 1, 2]
    with Admin(node.address, security=ROOT) as admin:
        (found,) = admin.query_by_id(fifo[0].body["message_id"], "sent-fifo")
    assert found.properties["__SHARDINGKEY"] == "order-7"  # what FIFO consumers order by
    lite = send(root, "sent-lite", body="to one lite topic", lite_topic="room-1")
    assert lite.status == 200, lite
    with Admin(node.address, security=ROOT) as admin:
        (found,) = admin.query_by_id(lite.body["message_id"], "sent-lite")
    assert found.properties["__LITE_TOPIC"] == "room-1"


def test_a_user_needs_publish_on_the_topic_as_any_client_does(node):
    app = ConsoleClient(node.console)
    assert app.login(APP).status == 200
    allowed = send(app, "sent-orders", body="from app")
    assert allowed.status == 200, allowed
    before = stored(node, "sent-closed")
    refused = send(app, "sent-closed", body="from app")
    assert refused.status == 403
    assert refused.body == {
        "error": "FORBIDDEN: user app has no publish permission on topic sent-closed"
    }
    assert stored(node, "sent-closed") == before
    # The permission comes first: a topic that does not exist is not named to this user.
    unknown = send(app, "sent-nowhere", body="x")
    assert unknown.status == 403 and "sent-nowhere" in unknown.body["error"]
    app.close()


def test_without_a_session_token_or_origin_nothing_is_sent(node, root):
    before = stored(node, "sent-orders")
    assert (
        ConsoleClient(node.console)
        .request("POST", "/api/topics/sent-orders/messages", {"body": "x"})
        .status
        == 401
    )
    no_token = root.request("POST", "/api/topics/sent-orders/messages", {"body": "x"}, csrf="")
    assert no_token.status == 403
    assert no_token.body == {"error": "missing or wrong CSRF token (X-CSRF-Token)"}
    elsewhere = root.request(
        "POST", "/api/topics/sent-orders/messages", {"body": "x"}, origin="http://evil.example"
    )
    assert elsewhere.status == 403
    assert stored(node, "sent-orders") == before


@pytest.mark.parametrize(
    ("topic", "body", "status", "error"),
    [
        (
            "sent-nowhere",
            {"body": "x"},
            404,
            "TOPIC_NOT_FOUND: topic sent-nowhere does not exist on this node",
        ),
        ("sent-orders", {"body": ""}, 400, "MESSAGE_BODY_EMPTY: message body is empty"),
        (
            "sent-orders",
            {"body": "x" * (BODY_LIMIT + 1)},
            413,
            f"MESSAGE_BODY_TOO_LARGE: body is {BODY_LIMIT + 1} bytes, the limit is {BODY_LIMIT}",
        ),
        (
            "sent-orders",
            {"body": "é" * (BODY_LIMIT // 2 + 1)},  # 1 KiB of characters, 2 bytes each
            413,
            f"MESSAGE_BODY_TOO_LARGE: body is {BODY_LIMIT + 2} bytes, the limit is {BODY_LIMIT}",
        ),
        (
            "sent-fifo",
            {"body": "x"},
            400,
            "ILLEGAL_MESSAGE_GROUP: FIFO messages need a message_group",
        ),
        (
            "sent-lite",
            {"body": "x"},
            400,
            "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: topic sent-lite is a LITE topic: each "
            "message names its lite topic",
        ),
        (
            "sent-delayed",
            {"body": "x"},
            400,
            "ILLEGAL_DELIVERY_TIME: DELAY messages need a delivery time",
        ),
        (
            "sent-tx",
            {"body": "x"},
            400,
            "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: topic sent-tx takes TRANSACTION messages, "
            "not NORMAL",
        ),
        ("sent-orders", {"body": 7}, 400, "body must be a string of at most 262144 characters"),
        ("sent-orders", {"body": "x", "keys": "k1"}, 400, "keys must be a list of at most 32 keys"),
        (
            "sent-orders",
            {"body": "x", "keys": ["a b"]},
            400,
            "key 'a b' is not a string without spaces",
        ),
        (
            "sent-orders",
            {"body": "x", "tag": 5},
            400,
            "tag must be a string of at most 1024 characters",
        ),
    ],
    ids=[
        "unknown topic",
        "empty body",
        "oversized body",
        "oversized in bytes",
        "fifo without group",
        "lite without lite topic",
        "delay without a delivery time",
        "a transaction half",
        "body not text",
        "keys not a list",
        "key with a space",
        "tag not text",
    ],
)
def test_each_bad_input_is_refused_precisely_and_stores_nothing(
    node, root, topic, body, status, error
):
    names = ("sent-orders", "sent-fifo", "sent-lite", "sent-delayed", "sent-tx")
    before = {name: stored(node, name) for name in names}
    answer = send(root, topic, **body)
    assert (answer.status, answer.body) == (status, {"error": error})
    assert {name: stored(node, name) for name in before} == before
