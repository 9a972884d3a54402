"""Resetting a consumer group's offsets by time, to the earliest or to the latest message
(``node/services/offset_reset.py``), through every door that serves it: the SDK's
``Admin.reset_offsets`` (the Admin door), ``ferrymq group reset-offsets`` and mqadmin's
INVOKE_BROKER_TO_RESET_OFFSET on the remoting port, with its RESET_CONSUMER_CLIENT_OFFSET
notice to a connected 4.x client. One 3-node cluster with auth on for the whole module:
its topic holds six messages stored before the reset point and six after."""

from __future__ import annotations

import datetime
import json
import time

import grpc
import pytest

from ferrymq.cli.main import main
from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.client.admin import AclRule
from ferrymq.client.simple_consumer import SimpleConsumer
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.cluster import cluster_up
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from tests.support.auth import APP, ROOT, signed
from tests.support.cluster import SMALL_STORE, master_of, stop_all
from tests.support.official_client import run_official_at
from tests.support.remoting_client import RemotingClient, heartbeat_body, pull_fields

TOPIC = "incident"
READERS = "replayers"  # consumes with offsets (pull, commit)
POPPERS = "poppers"  # consumes by POP (receive, ack)
IDLE = "idle"  # exists, never consumed anything
AUTH = {
    "security": {
        "auth": True,
        "clock_skew_s": 120,
        "admin_access_key": ROOT.access_key,
        "admin_secret_key": ROOT.secret_key,
    }
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The cluster, its master and a slave, the reset point, and the bodies on each side."""
    settings = {**SMALL_STORE, **AUTH}
    plan = cluster_up(
        str(tmp_path_factory.mktemp("reset") / "cluster"),
        nodes=3,
        auto_ports=True,
        settings=settings,
    )
    try:
        master = master_of(plan)
        slave = next(n for n in plan.nodes if n.id != master.id)
        with Admin(master.grpc, security=ROOT) as admin:
            admin.create_topic(TOPIC, queue_count=2)
            for group in (READERS, POPPERS, IDLE):
                admin.create_group(group)
            admin.create_user(APP.access_key, APP.secret_key)
            for rule in (  # everything a consumer needs, but no admin rights
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", TOPIC),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "*"),
            ):
                admin.grant(APP.access_key, rule)
        before = [f"before-{i}" for i in range(6)]
        after = [f"after-{i}" for i in range(6)]
        with Producer(master.grpc, security=ROOT) as producer:
            for body in before:
                producer.send(Message(TOPIC, body.encode(), keys=[body]))
            point_ms = now_ms() + 1  # every message above was stored before it
            until(lambda: now_ms() > point_ms, 1, "the clock past the reset point")
            for body in after:
                producer.send(Message(TOPIC, body.encode(), keys=[body]))
        assert read_all(master.grpc, READERS, 12) == sorted(before + after)  # committed
        assert len(receive_all(master.grpc, 12, ack=True)) == 12  # POPPERS acked everything
        yield {"plan": plan, "master": master, "slave": slave, "point_ms": point_ms}
    finally:
        stop_all(plan)


def read_all(address: str, group: str, count: int) -> list[str]:
    """What a pull consumer of ``group`` reads from its committed offsets, committed."""
    got: list[str] = []
    with PullConsumer(address, group, security=ROOT, start="committed-or-beginning") as consumer:
        consumer.assign(TOPIC, [0, 1])
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            got.extend(m.body.decode() for m in consumer.poll(wait_s=0.5))
        consumer.commit()
    return sorted(got)


def receive_all(address: str, count: int, ack: bool) -> list:
    """What a SimpleConsumer of POPPERS receives (and acks), up to ``count`` messages."""
    got = []
    with SimpleConsumer(address, POPPERS, TOPIC, security=ROOT) as consumer:
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            got.extend(consumer.receive(max_messages=16, invisible_s=60, wait_s=1))
        for message in got if ack else ():
            consumer.ack(message)
    return got


def bounds(address: str) -> dict[int, tuple[int, int, int]]:
    """Per queue: (min offset, max offset, offset at the reset point)."""
    with Admin(address, security=ROOT) as admin:
        _, queues = admin.describe_topic(TOPIC)
        return {q.queue_id: (q.min_offset, q.max_offset) for q in queues}


def at_the_end(address: str) -> None:
    """READERS at the end of every queue, whatever the tests before left."""
    with Admin(address, security=ROOT) as admin:
        admin.reset_offsets(READERS, TOPIC, "latest")


def positions(address: str, group: str) -> dict[int, int]:
    with Admin(address, security=ROOT) as admin:
        return {q.queue_id: q.consumer_offset for q in admin.group_progress(group, TOPIC)}


def test_sdk_resets_to_a_time_to_earliest_and_to_latest_from_a_slave(cluster):
    master, slave, point_ms = cluster["master"], cluster["slave"], cluster["point_ms"]
    at_the_end(master.grpc)
    ends = {q: high for q, (_, high) in bounds(master.grpc).items()}
    with Admin(slave.grpc, security=ROOT) as admin:  # a slave hands it to its master
        at_point = {q: admin.offset_by_time(TOPIC, q, point_ms) for q in ends}
        planned = admin.reset_offsets(READERS, TOPIC, point_ms, dry_run=True)
        assert positions(master.grpc, READERS) == ends  # a dry run changes nothing
        reset = admin.reset_offsets(READERS, TOPIC, point_ms)
    assert planned == reset
    assert [(q.broker_group, q.queue_id, q.old_offset, q.new_offset) for q in reset] == [
        ("group-1", q, ends[q], at_point[q]) for q in (0, 1)
    ]
    assert sum(ends[q] - at_point[q] for q in ends) == 6
    assert positions(master.grpc, READERS) == at_point
    assert read_all(slave.grpc, READERS, 6) == sorted(f"after-{i}" for i in range(6))

    with Admin(master.grpc, security=ROOT) as admin:
        earliest = admin.reset_offsets(READERS, TOPIC, "earliest")
        assert [q.new_offset for q in earliest] == [0, 0]
        assert [q.old_offset for q in earliest] == [ends[0], ends[1]]
        latest = admin.reset_offsets(READERS, TOPIC, "latest")
    assert [q.new_offset for q in latest] == [ends[0], ends[1]]
    assert positions(master.grpc, READERS) == ends


def test_pop_deliveries_in_flight_end_and_receives_restart_at_the_reset_point(cluster):
    master, point_ms = cluster["master"], cluster["point_ms"]
    with Admin(master.grpc, security=ROOT) as admin:
        admin.reset_offsets(POPPERS, TOPIC, "earliest")
    with SimpleConsumer(master.grpc, POPPERS, TOPIC, security=ROOT) as consumer:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 12 and time.monotonic() < deadline:
            got.extend(consumer.receive(max_messages=16, invisible_s=60, wait_s=1))
        assert len(got) == 12
        held = next(m for m in got if m.body == b"before-0")
        for message in got:
            if message is not held:
                consumer.ack(message)
        with Admin(master.grpc, security=ROOT) as admin:
            reset = admin.reset_offsets(POPPERS, TOPIC, point_ms)
        # The held delivery was where the group stood on its queue (consumed below it).
        assert held.queue_offset in {q.old_offset for q in reset}
        with pytest.raises(FerryError) as stale:
            consumer.ack(held)  # its delivery ended with the reset
        assert stale.value.code_name == "INVALID_RECEIPT_HANDLE", stale.value
        again = []
        deadline = time.monotonic() + 20
        while len(again) < 6 and time.monotonic() < deadline:
            again.extend(consumer.receive(max_messages=16, invisible_s=60, wait_s=1))
        assert sorted(m.body.decode() for m in again) == sorted(f"after-{i}" for i in range(6))
        for message in again:
            consumer.ack(message)


def test_an_official_5x_consumer_receives_again_what_was_stored_after_the_reset_point(
    cluster, tmp_path
):
    """The official Python client's SimpleConsumer (POP over gRPC), in processes of its own."""
    master, point_ms = cluster["master"], cluster["point_ms"]
    with Admin(master.grpc, security=ROOT) as admin:
        admin.create_group("official-readers")

    def receive_and_ack(count: int) -> list[str]:
        step = {"do": "receive_until", "count": count, "invisible_s": 30, "deadline_s": 30}
        events = run_official_at(
            master.grpc,
            tmp_path / "official",
            {
                "scenario": "simple",
                "topic": TOPIC,
                "group": "official-readers",
                "access_key": ROOT.access_key,
                "secret_key": ROOT.secret_key,
                "steps": [{**step, "ack": True}],
            },
        )
        return sorted(e["body"] for e in events if e["event"] == "received")

    assert len(receive_and_ack(12)) == 12
    with Admin(master.grpc, security=ROOT) as admin:
        admin.reset_offsets("official-readers", TOPIC, point_ms)
    assert receive_and_ack(6) == sorted(f"after-{i}" for i in range(6))


def test_running_offset_readers_go_on_from_the_reset_point_through_every_read_door(cluster):
    """A consumer that keeps its own positions is not told of a reset; its next read of a
    reset queue from elsewhere is answered "offset moved" to the reset offset, once, on
    every door: the SDK's PullConsumer (Data.Fetch) follows it, a 4.x pull is answered
    PULL_OFFSET_MOVED and the cached position its pull carries is not committed, a 5.x
    PullMessage is answered ILLEGAL_OFFSET with the offset to go on from."""
    master, point_ms = cluster["master"], cluster["point_ms"]
    at_the_end(master.grpc)
    ends = {q: high for q, (_, high) in bounds(master.grpc).items()}

    def reset() -> dict[int, int]:
        with Admin(master.grpc, security=ROOT) as admin:
            return {q.queue_id: q.new_offset for q in admin.reset_offsets(READERS, TOPIC, point_ms)}

    with PullConsumer(master.grpc, READERS, security=ROOT) as consumer:
        consumer.assign(TOPIC, [0, 1])
        assert consumer.poll(wait_s=0.2) == []  # at the end
        at_point = reset()
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            got.extend(m.body.decode() for m in consumer.poll(wait_s=0.5))
    assert sorted(got) == sorted(f"after-{i}" for i in range(6))

    at_the_end(master.grpc)
    reset()
    pull = pull_fields(READERS, TOPIC, 0, ends[0]) | {"sysFlag": "5", "commitOffset": str(ends[0])}
    with RemotingClient(master.remoting, security=ROOT) as client:
        moved = client.call(RequestCode.PULL_MESSAGE, pull)
        again = client.call(RequestCode.PULL_MESSAGE, pull | {"sysFlag": "4"})
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED, moved
    assert moved.ext_fields["nextBeginOffset"] == str(at_point[0])
    assert positions(master.grpc, READERS)[0] == at_point[0]  # its cached position not kept
    assert again.code == ResponseCode.PULL_NOT_FOUND, again  # told once

    reset()
    request = rpc.PullMessageRequest(
        group=pb.Resource(name=READERS),
        message_queue=pb.MessageQueue(
            topic=pb.Resource(name=TOPIC), id=1, broker=pb.Broker(name="group-1")
        ),
        offset=ends[1],
        batch_size=32,
    )
    with grpc.insecure_channel(master.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answers = list(stub.PullMessage(request, metadata=signed(ROOT, "reset-reader")))
    assert answers[0].status.code == pb.ILLEGAL_OFFSET, answers
    assert answers[-1].next_offset == at_point[1]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_resets_to_an_iso_time_and_to_earliest_and_refuses_what_is_not_a_time(
    cluster, capsys, monkeypatch
):
    master, slave, point_ms = cluster["master"], cluster["slave"], cluster["point_ms"]
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", ROOT.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", ROOT.secret_key)
    at_the_end(master.grpc)
    ends = {q: high for q, (_, high) in bounds(master.grpc).items()}
    moment = datetime.datetime.fromtimestamp(point_ms / 1000, datetime.UTC).isoformat()
    argv = ["group", "reset-offsets", READERS, "--topic", TOPIC, "--server", slave.grpc]
    code, out, err = run_cli(capsys, *argv, "--to", moment, "--json")
    assert code == 0, err
    rows = json.loads(out)
    with Admin(master.grpc, security=ROOT) as admin:
        at_point = {q: admin.offset_by_time(TOPIC, q, point_ms) for q in ends}
    assert rows == [
        {"broker_group": "group-1", "queue_id": q, "old_offset": ends[q], "new_offset": at_point[q]}
        for q in (0, 1)
    ]
    code, out, err = run_cli(capsys, *argv, "--to", "earliest")
    assert code == 0, err
    header = "broker group  queue  old offset  new offset"
    assert " ".join(out.splitlines()[0].split()) == " ".join(header.split())
    assert [line.split()[-1] for line in out.splitlines()[2:]] == ["0", "0"]
    code, out, err = run_cli(capsys, *argv, "--to", str(point_ms), "--dry-run")
    assert code == 0 and "dry run: nothing was changed" in out, err
    assert positions(master.grpc, READERS) == {0: 0, 1: 0}

    code, _, err = run_cli(capsys, *argv, "--to", "yesterday")
    assert code == 2 and "'yesterday' is not a time" in err
    code, _, err = run_cli(capsys, *argv, "--to", "99999999999999999")  # the year 3170000
    assert code == 1 and "ILLEGAL_TIMESTAMP" in err
    for group, topic, name in (("nobody", TOPIC, "nobody"), (READERS, "gone", "gone")):
        other = ["group", "reset-offsets", group, "--topic", topic, "--server", slave.grpc]
        code, _, err = run_cli(capsys, *other, "--to", "latest")
        assert code == 1 and "NOT_FOUND" in err and name in err
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", APP.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", APP.secret_key)
    code, _, err = run_cli(capsys, *argv, "--to", "latest")
    assert code == 1 and "PERMISSION_DENIED" in err
    assert positions(master.grpc, READERS) == {0: 0, 1: 0}  # nothing refused changed anything


def test_the_sdk_refuses_with_precise_errors_and_changes_nothing(cluster):
    master, slave = cluster["master"], cluster["slave"]
    before = positions(master.grpc, READERS)
    with Admin(master.grpc, security=ROOT) as admin:
        admin.create_topic("incident-lite", 1, message_type="LITE")
    cases = [
        (ROOT, "nobody", TOPIC, "latest", "NOT_FOUND", "nobody"),
        (ROOT, READERS, "no-such-topic", "latest", "NOT_FOUND", "no-such-topic"),
        (ROOT, READERS, TOPIC, -5, "INVALID_ARGUMENT", "ILLEGAL_TIMESTAMP"),
        (ROOT, IDLE, TOPIC, "earliest", "FAILED_PRECONDITION", "GROUP_NEVER_CONSUMED"),
        (APP, READERS, TOPIC, "earliest", "PERMISSION_DENIED", "admin"),
        (ROOT, READERS, "incident-lite", "latest", "FAILED_PRECONDITION", "LITE_TOPIC"),
    ]
    for security, group, topic, to, code_name, words in cases:
        with Admin(slave.grpc, security=security) as admin, pytest.raises(FerryError) as refused:
            admin.reset_offsets(group, topic, to)
        assert refused.value.code_name == code_name, (group, topic, to, refused.value)
        assert words in str(refused.value), refused.value
    with Admin(slave.grpc, security=ROOT) as admin, pytest.raises(ValueError, match="earliest"):
        admin.reset_offsets(READERS, TOPIC, "yesterday")
    assert positions(master.grpc, READERS) == before


def test_mqadmins_reset_code_resets_the_masters_queues_and_tells_connected_4x_clients(cluster):
    master, point_ms = cluster["master"], cluster["point_ms"]
    at_the_end(master.grpc)
    ends = {q: high for q, (_, high) in bounds(master.grpc).items()}
    fields = {"topic": TOPIC, "group": READERS, "timestamp": str(point_ms), "isForce": "true"}
    with (
        RemotingClient(master.remoting, security=ROOT) as member,
        RemotingClient(master.remoting, security=ROOT) as tool,
    ):
        beat = member.call(
            RequestCode.HEART_BEAT, body=heartbeat_body("127.0.0.1@reset-member", [READERS], TOPIC)
        )
        assert beat.code == ResponseCode.SUCCESS, beat
        answer = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        assert answer.code == ResponseCode.SUCCESS, answer
        told = member.node_request()
        while told.code != RequestCode.RESET_CONSUMER_CLIENT_OFFSET:  # ids-changed notices
            told = member.node_request()
    with Admin(master.grpc, security=ROOT) as admin:
        at_point = {q: admin.offset_by_time(TOPIC, q, point_ms) for q in ends}
    table = (
        '{"offsetTable":{'
        + ",".join(
            f'{{"brokerName": "group-1", "queueId": {q}, "topic": "{TOPIC}"}}:{at_point[q]}'
            for q in (0, 1)
        )
        + "}}"
    )
    assert answer.body.decode() == table
    assert told.body.decode() == table
    assert {k: told.ext_fields[k] for k in ("topic", "group", "isForce")} == {
        "topic": TOPIC,
        "group": READERS,
        "isForce": "true",
    }
    assert told.ext_fields["timestamp"].lstrip("-").isdigit()
    assert positions(master.grpc, READERS) == at_point

    def refused(security, **changed) -> tuple[int, str]:
        with RemotingClient(master.remoting, security=security) as client:
            answer = client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields | changed)
        return answer.code, answer.remark or ""

    code, remark = refused(APP, timestamp="-1")
    assert code == ResponseCode.NO_PERMISSION, remark
    code, remark = refused(ROOT, group="nobody")
    assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "nobody" in remark
    code, remark = refused(ROOT, topic="no-such-topic")
    assert code == ResponseCode.TOPIC_NOT_EXIST and "no-such-topic" in remark
    code, remark = refused(ROOT, group=IDLE)
    assert code == ResponseCode.SYSTEM_ERROR and "GROUP_NEVER_CONSUMED" in remark
    code, remark = refused(ROOT, timestamp="-7")
    assert code == ResponseCode.SYSTEM_ERROR and "ILLEGAL_TIMESTAMP" in remark
    code, remark = refused(ROOT, queueId="1", offset=str(ends[1] + 1))
    assert code == ResponseCode.SYSTEM_ERROR and "ILLEGAL_OFFSET" in remark
    code, remark = refused(ROOT, queueId="2", offset="0")
    assert code == ResponseCode.SYSTEM_ERROR and "ILLEGAL_QUEUE" in remark
    assert positions(master.grpc, READERS) == at_point

    # mqadmin's -b/-q/-o: one queue, to an offset.
    with RemotingClient(master.remoting, security=ROOT) as tool:
        one = tool.call(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            fields | {"timestamp": "0", "queueId": "1", "offset": "1"},
        )
    assert one.code == ResponseCode.SUCCESS, one
    assert one.body.decode() == (
        f'{{"offsetTable":{{{{"brokerName": "group-1", "queueId": 1, "topic": "{TOPIC}"}}:1}}}}'
    )
    assert positions(master.grpc, READERS) == {0: at_point[0], 1: 1}


def test_a_group_whose_4x_consumer_is_online_but_committed_nothing_yet_is_reset(cluster):
    """A 4.x push consumer commits every 5 s: online and subscribed, its group may have no
    position yet, and is not refused as never consumed (on any door)."""
    master, slave = cluster["master"], cluster["slave"]
    with Admin(master.grpc, security=ROOT) as admin:
        admin.create_group("starting")
    fields = {"topic": TOPIC, "group": "starting", "timestamp": "-1", "isForce": "true"}
    with RemotingClient(master.remoting, security=ROOT) as tool:
        refused = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        assert "GROUP_NEVER_CONSUMED" in (refused.remark or ""), refused
        with RemotingClient(master.remoting, security=ROOT) as member:
            body = heartbeat_body("127.0.0.1@starting-member", ["starting"], TOPIC)
            assert member.call(RequestCode.HEART_BEAT, body=body).code == ResponseCode.SUCCESS
            with Admin(slave.grpc, security=ROOT) as admin:
                # The group was committed through the master; the slave's routing replica
                # applies it a moment later (a busy host: seconds).
                until(
                    lambda: any(g.name == "starting" for g in admin.list_groups()),
                    what="the slave to know group starting",
                )
                planned = admin.reset_offsets("starting", TOPIC, "earliest", dry_run=True)
            assert [q.old_offset for q in planned] == [-1, -1]
            answer = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
            assert answer.code == ResponseCode.SUCCESS, answer


def test_a_reset_is_replicated_a_new_master_serves_from_it(cluster):
    """The reset's records (committed offsets, the POP cursor's end) are in the log the
    slaves replicate: after a planned failover the new master has the reset offsets and
    no POP position, and a receive there starts at the reset point. (Last of the module's
    tests on its cluster: the master changes.)"""
    plan, master, point_ms = cluster["plan"], cluster["master"], cluster["point_ms"]
    with Admin(master.grpc, security=ROOT) as admin:
        admin.reset_offsets(POPPERS, TOPIC, "earliest")  # whatever the tests before left
    held = receive_all(master.grpc, 4, ack=False)
    with Admin(master.grpc, security=ROOT) as admin:
        admin.reset_offsets(READERS, TOPIC, point_ms)
        admin.reset_offsets(POPPERS, TOPIC, "earliest")
        at_point = {q: admin.offset_by_time(TOPIC, q, point_ms) for q in (0, 1)}
        target = next(n for n in plan.nodes if n.id != master.id)
        new_master, _, _ = admin.failover("group-1", target.id)
    assert new_master == target.id
    assert positions(target.grpc, READERS) == at_point
    with Admin(target.grpc, security=ROOT) as admin:
        progress = admin.group_progress(POPPERS, TOPIC)
    assert [(q.consumer_offset, q.in_flight) for q in progress] == [(0, 0), (0, 0)]
    with SimpleConsumer(target.grpc, POPPERS, TOPIC, security=ROOT) as consumer:
        with pytest.raises(FerryError) as stale:
            consumer.ack(held[0])
        assert stale.value.code_name == "INVALID_RECEIPT_HANDLE", stale.value
    assert len(receive_all(target.grpc, 12, ack=True)) == 12


def test_a_reset_asked_of_a_node_of_one_broker_group_resets_the_other_groups_queues(tmp_path):
    """Two broker groups of one node each: the topic's queues on group-1 live on node-1
    only, and node-2 (group-2) is asked."""
    plan = cluster_up(
        str(tmp_path / "two-groups"), nodes=2, groups=2, auto_ports=True, settings=SMALL_STORE
    )
    try:
        first, second = plan.nodes
        with Admin(first.grpc) as admin:
            admin.create_topic("spread", queue_count=2)
            admin.create_group("spreaders")
        with Producer(first.grpc) as producer:
            for i in range(8):
                producer.send(Message("spread", f"m-{i}".encode()))
        got = []
        with PullConsumer(first.grpc, "spreaders", start="committed-or-beginning") as consumer:
            consumer.assign("spread", [0, 1])
            deadline = time.monotonic() + 20
            while len(got) < 8 and time.monotonic() < deadline:
                got.extend(consumer.poll(wait_s=0.5))
            consumer.commit()
        assert {m.broker_group for m in got} == {"group-1", "group-2"}
        with Admin(second.grpc) as admin:
            ends = {
                (q.broker_group, q.queue_id): q.max_offset
                for q in admin.describe_topic("spread")[1]
            }
            reset = admin.reset_offsets("spreaders", "spread", "earliest")
            progress = admin.group_progress("spreaders", "spread")
        assert [(q.broker_group, q.queue_id, q.old_offset, q.new_offset) for q in reset] == [
            (group, queue, ends[(group, queue)], 0) for group, queue in sorted(ends)
        ]
        assert {(q.broker_group, q.queue_id): q.consumer_offset for q in progress} == {
            key: 0 for key in ends
        }
    finally:
        stop_all(plan)
