"""The console's endpoints of issue 42 on a real node with auth on: a group's dead letters
(``node/console/dead_letters.py``: a page of its dead-letter queue, the resend of a
selection or a range), refused without a session, without the CSRF token or the same
origin, and for a user who may not consume as the group, bad input refused with a precise
400, every outcome checked through the SDK; a topic's consuming groups; the online 4.x
producers per producer group (admins only)."""

from __future__ import annotations

import json

import pytest

from ferrymq.client import Admin, LiteConsumer, Message, Producer, SimpleConsumer
from ferrymq.client.admin import AclRule
from ferrymq.codec.remoting_codes import RequestCode
from ferrymq.launcher.polling import until
from tests.support.auth import APP, AUTH_TOML, ROOT
from tests.support.console import ConsoleClient
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient

CONSOLE_TOML = "\n[console]\nenabled = true\nport = 0\n"
TOPIC = "refunds"
GROUP = "refunders"  # one attempt: every message it does not ack is dead-lettered
BODIES = [f"refund-{i}" for i in range(3)]
PAGE = f"/api/groups/{GROUP}/dead-letters"
RESEND = PAGE + "/resend"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node whose GROUP dead-lettered BODIES; APP may read the topic and the dead-letter
    topics but not consume as GROUP."""
    process = start_node(
        str(tmp_path_factory.mktemp("console-dlq") / "node"), AUTH_TOML + CONSOLE_TOML
    )
    try:
        with Admin(process.address, security=ROOT) as admin:
            admin.create_topic(TOPIC, 1)
            admin.create_group(GROUP, max_delivery_attempts=1)
            admin.create_user(APP.access_key, APP.secret_key)
            for rule in (
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", TOPIC),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "%DLQ%*"),
            ):
                admin.grant(APP.access_key, rule)
        with Producer(process.address, security=ROOT) as producer:
            for body in BODIES:
                producer.send(Message(TOPIC, body.encode()))
        with SimpleConsumer(process.address, GROUP, TOPIC, security=ROOT) as consumer:
            got = []
            until(
                lambda: got.extend(consumer.receive(16, invisible_s=1, wait_s=1)) or len(got) == 3,
                20,
                "3 deliveries",
            )
            until(
                lambda: (
                    not consumer.receive(16, invisible_s=1, wait_s=0.2) and dead_count(process) == 3
                ),
                20,
                "3 dead letters",
            )
        yield process
    finally:
        process.stop()


def dead_count(process) -> int:
    with Admin(process.address, security=ROOT) as admin:
        return len(admin.dead_letters(GROUP).entries)


def resent_offsets(process) -> list[int]:
    with Admin(process.address, security=ROOT) as admin:
        return [e.offset for e in admin.dead_letters(GROUP).entries if e.resent]


@pytest.fixture
def root_client(node):
    client = ConsoleClient(node.console)
    assert client.login(ROOT).status == 200
    yield client
    client.close()


def test_without_a_session_or_its_token_nothing_is_listed_or_resent(node, root_client):
    anonymous = ConsoleClient(node.console)
    assert anonymous.request("GET", PAGE).status == 401
    assert anonymous.request("POST", RESEND, {"offsets": [0]}).status == 401
    no_token = root_client.request("POST", RESEND, {"offsets": [0]}, csrf="")
    assert no_token.status == 403
    assert no_token.body["error"] == "missing or wrong CSRF token (X-CSRF-Token)"
    elsewhere = root_client.request("POST", RESEND, {"offsets": [0]}, origin="http://evil.example")
    assert elsewhere.status == 403
    assert resent_offsets(node) == []


def test_a_user_who_may_not_consume_as_the_group_gets_the_services_refusal(node):
    client = ConsoleClient(node.console)
    assert client.login(APP).status == 200
    answer = client.request("POST", RESEND, {"offsets": [0]})
    assert answer.status == 403
    assert answer.body["error"] == (
        f"FORBIDDEN: user app has no subscribe permission on group {GROUP}"
    )
    assert client.request("GET", PAGE).status == 200  # reading %DLQ%* is granted
    assert resent_offsets(node) == []
    client.close()


def test_the_topic_page_names_the_groups_consuming_it(root_client):
    answer = root_client.request("GET", f"/api/topics/{TOPIC}")
    assert answer.status == 200
    assert answer.body["consumers"] == [
        {
            "group": GROUP,
            "broker_group": "group-1",
            "committed": False,
            "popping": True,
            "subscribed": False,
        }
    ]


def test_online_4x_producers_are_listed_per_group_for_admins_while_connected(node, root_client):
    """A 4.x client's heartbeat names its producer groups: listed with its connection while
    it is connected, gone when it closes; a user without admin rights is refused."""
    body = json.dumps(
        {
            "clientID": "127.0.0.1@refund-app",
            "producerDataSet": [{"groupName": "refund-producers"}],
            "consumerDataSet": [],
        }
    ).encode()
    with RemotingClient(node.remoting, security=ROOT) as client:
        assert client.call(RequestCode.HEART_BEAT, {}, body).code == 0
        listed = root_client.request("GET", "/api/producers")
        assert listed.status == 200
        (group,) = [g for g in listed.body["groups"] if g["group"] == "refund-producers"]
        (producer,) = group["clients"]
        assert producer["client_id"] == "127.0.0.1@refund-app"
        assert (producer["language"], producer["version"]) == ("JAVA", 407)
        assert producer["address"].startswith("127.0.0.1:")
        assert producer["broker_groups"] == ["group-1"]
        app = ConsoleClient(node.console)
        assert app.login(APP).status == 200
        refused = app.request("GET", "/api/producers")
        assert refused.status == 403 and "needs admin rights" in refused.body["error"]
        app.close()

    def listed_groups():
        return [g["group"] for g in root_client.request("GET", "/api/producers").body["groups"]]

    until(lambda: "refund-producers" not in listed_groups(), 10, "the producer gone")


def test_bad_input_gets_a_precise_400_or_404(root_client):
    for body, expected in (
        ({"offsets": "0"}, "offsets must be a list of at most 1000 offsets"),
        ({"offsets": ["x"]}, "offsets must be an integer in 0.."),
        ({"offsets": [0], "from_offset": 0, "to_offset": 1}, "ILLEGAL_SELECTION"),
        ({"from_offset": 2, "to_offset": 1}, "ILLEGAL_RANGE"),
        (
            {"offsets": [9]},
            "ILLEGAL_OFFSET: %DLQ%refunders on broker group group-1 holds offsets 0..2; 9",
        ),
    ):
        answer = root_client.request("POST", RESEND, body)
        assert answer.status == 400 and expected in answer.body["error"], (body, answer.body)
    assert root_client.request("GET", PAGE + "?limit=0").status == 400
    missing = root_client.request(
        "POST", "/api/groups/nobody/dead-letters/resend", {"offsets": [0]}
    )
    assert missing.status == 404 and "group nobody does not exist" in missing.body["error"]


def test_the_page_lists_and_resends_a_selection_then_the_rest_once(node, root_client):
    listed = root_client.request("GET", PAGE)
    assert listed.status == 200
    assert (listed.body["min_offset"], listed.body["max_offset"]) == (0, 3)
    assert [e["origin_topic"] for e in listed.body["entries"]] == [TOPIC] * 3
    first = root_client.request("POST", RESEND, {"offsets": [1]})
    assert first.status == 200 and first.body["resent"] == [1], first.body
    assert resent_offsets(node) == [1]
    rest = root_client.request("POST", RESEND, {"from_offset": 0, "to_offset": 2})
    assert rest.body["resent"] == [0, 2] and rest.body["already_resent"] == [1]
    assert [e["resent"] for e in root_client.request("GET", PAGE).body["entries"]] == [True] * 3
    with SimpleConsumer(node.address, GROUP, TOPIC, security=ROOT) as consumer:
        got = []
        until(
            lambda: got.extend(consumer.receive(16, invisible_s=30, wait_s=1)) or len(got) == 3,
            20,
            "the resent messages",
        )
        assert sorted(m.body.decode() for m in got) == BODIES
        assert {m.delivery_attempt for m in got} == {1}
    # The resent dead letters are no position of the group on its dead-letter topic.
    group = root_client.request("GET", f"/api/groups/{GROUP}").body
    assert [t["topic"] for t in group["topics"]] == [TOPIC]


def test_a_lite_topics_progress_is_shown_per_lite_topic(node, root_client):
    """A LITE topic on the group page: one row per lite topic, counted in messages, as
    ``Admin.group_progress`` reads it."""
    with Admin(node.address, security=ROOT) as admin:
        admin.create_topic("rooms", 1, message_type="LITE")
        admin.create_group("room-readers")
    with Producer(node.address, security=ROOT) as producer:
        for lite in ("room-1", "room-1", "room-2"):
            producer.send(Message("rooms", lite.encode(), lite_topic=lite))
    with LiteConsumer(node.address, "room-readers", "rooms", security=ROOT) as consumer:
        consumer.subscribe(["room-1"])
        got = []
        until(
            lambda: got.extend(consumer.receive(10, invisible_s=30, wait_s=1)) or len(got) == 2,
            20,
            "room-1",
        )
        consumer.ack(got[0])
    answer = root_client.request("GET", "/api/groups/room-readers")
    assert answer.status == 200
    (rooms,) = answer.body["topics"]
    assert rooms["topic"] == "rooms"
    rows = {
        q["lite_topic"]: (q["broker_offset"], q["consumer_offset"], q["lag"], q["in_flight"])
        for q in rooms["queues"]
    }
    assert rows == {"room-1": (2, 1, 1, 1), "room-2": (1, 0, 1, 0)}
