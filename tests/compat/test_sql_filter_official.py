"""SQL92 filters end to end: the official ``rocketmq-python-client`` subscribes with an SQL
``FilterExpression`` against a real node process and receives exactly the messages it
selects; the others are passed over without being delivered and do not hold the queue
up; a bad expression gets ILLEGAL_FILTER_EXPRESSION saying where."""

from __future__ import annotations

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.services.pop import SQL_SCAN_MAX
from tests.support.official_client import run_official_at
from tests.support.rpc import create_topic, message, receive

SELECTOR = "n >= 10 AND region = 'eu' OR TAGS = 'urgent'"


def send_all(messaging, topic: str, specs: list[dict]) -> None:
    for spec in specs:
        wire = message(topic, spec["id"].encode(), spec["id"], **spec.get("system", {}))
        wire.user_properties.update(spec.get("properties", {}))
        sent = messaging.SendMessage(rpc.SendMessageRequest(messages=[wire]))
        assert sent.status.code == pb.OK, sent.status


def test_the_official_consumer_receives_what_its_sql_filter_selects(
    module_node, client_home, grpc_stubs
):
    messaging, admin = grpc_stubs
    create_topic(admin, "sql-orders", queues=2)
    specs = []
    for i in range(40):
        properties = {"n": str(i), "region": "eu" if i % 2 else "us"}
        if i % 7 == 0:
            del properties["n"]  # missing: unknown, not delivered (unless urgent)
        if i % 11 == 0:
            properties["n"] = "many"  # not a number: not delivered (unless urgent)
        system = {"tag": "urgent"} if i in (4, 20, 22) else {"tag": "routine"}
        specs.append({"id": f"M{i:02d}", "properties": properties, "system": system})
    send_all(messaging, "sql-orders", specs)

    def selected(i: int) -> bool:
        if i == 22:  # urgent, but n = 'many' is no number: the evaluation fails, no delivery
            return False
        if i in (4, 20):
            return True
        return i >= 10 and i % 2 == 1 and i % 7 != 0 and i % 11 != 0

    wanted = sorted(f"M{i:02d}" for i in range(40) if selected(i))
    steps = [
        {"do": "receive_until", "count": len(wanted), "invisible_s": 30, "deadline_s": 30},
        {"do": "receive_once", "invisible_s": 30},  # nothing else is delivered
    ]
    events = run_official_at(
        module_node.address,
        client_home,
        {
            "scenario": "simple",
            "topic": "sql-orders",
            "group": "sql-group",  # created on first use
            "sql": SELECTOR,
            "await_s": 2,
            "steps": steps,
        },
    )
    received = [e for e in events if e["event"] == "received"]
    assert sorted(e["id"] for e in received) == wanted
    assert all(e["attempt"] == 1 for e in received)
    assert all(e["properties"]["region"] in ("eu", "us") for e in received)
    assert not [e for e in events if e["event"] == "receive_failed"]
    # What the filter passed over is consumed for the group, not left in flight.
    progress = admin.GroupProgress(api.GroupProgressRequest(group="sql-group", topic="sql-orders"))
    assert sum(q.in_flight for q in progress.queues) == len(wanted)  # never acked


def test_a_long_run_of_refused_messages_does_not_hold_the_queue(module_node, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "sql-run", queues=1)
    refused = [
        {"id": f"R{i:05d}", "properties": {"kind": "noise"}} for i in range(SQL_SCAN_MAX * 2 + 5)
    ]
    send_all(messaging, "sql-run", [*refused, {"id": "WANTED", "properties": {"kind": "signal"}}])
    status, messages, _ = receive(
        messaging,
        "sql-run",
        group="sql-run-group",
        tags="kind = 'signal'",
        filter_type=pb.SQL,
        wait_s=10,
    )
    assert status.code == pb.OK
    assert [m.system_properties.message_id for m in messages] == ["WANTED"]


def test_a_bad_expression_is_refused_precisely(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "sql-bad", queues=1)
    status, _, _ = receive(messaging, "sql-bad", tags="n >= 10 AND", filter_type=pb.SQL)
    assert status.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert status.message == (
        "SQL filter: expected a property or a value, found the end of the expression at the end"
    )
    steps = [{"do": "receive_once", "invisible_s": 30}]
    events = run_official_at(
        module_node.address,
        client_home,
        {
            "scenario": "simple",
            "topic": "sql-bad",
            "group": "sql-bad-group",
            "sql": "region = 'eu",
            "await_s": 1,
            "steps": steps,
        },
    )
    (failed,) = [e for e in events if e["event"] == "receive_failed"]
    assert "a text literal is not closed at character 10" in failed["message"]
