"""Resending a group's dead letters (``node/services/dead_letter_resend.py``) on a 3-node
cluster with auth on, asked of a slave (handed to the master through ``PeerAdmin`` as the
caller's user): through the SDK's Admin and the CLI, by a user who may consume as the group
(no admin rights). The resent messages reach the group's POP consumer (the SDK's
SimpleConsumer) with their message ids and a fresh attempt count, and its 4.x consumers'
retry topic, and no other group of the topic; a second resend skips them; after kill -9 of
the master the new master, replaying the log, knows what was resent."""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.cli.main import main
from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.client.admin import AclRule
from ferrymq.client.simple_consumer import SimpleConsumer
from ferrymq.launcher.cluster import cluster_up
from ferrymq.launcher.polling import until
from tests.support.auth import APP, ROOT
from tests.support.cluster import SMALL_STORE, kill, master_of, stop_all
from tests.support.console import ConsoleClient, console_of
from tests.support.official_client import run_official_at

TOPIC = "payments"
GROUP = "settlers"  # dead-letters every message: one attempt each
OTHER = "auditors"  # another group of the topic: consumes each message once
AUTH = {
    "security": {
        "auth": True,
        "clock_skew_s": 120,
        "admin_access_key": ROOT.access_key,
        "admin_secret_key": ROOT.secret_key,
    },
    "console": {"enabled": True, "port": 0},
}
BODIES = [f"payment-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three messages, each dead-lettered by GROUP and consumed by OTHER; APP may consume
    as any group and read the dead-letter topics, without admin rights."""
    plan = cluster_up(
        str(tmp_path_factory.mktemp("resend") / "cluster"),
        nodes=3,
        auto_ports=True,
        settings={**SMALL_STORE, **AUTH},
    )
    try:
        master = master_of(plan)
        slave = next(n for n in plan.nodes if n.id != master.id)
        with Admin(master.grpc, security=ROOT) as admin:
            admin.create_topic(TOPIC, queue_count=2)
            admin.create_group(GROUP, max_delivery_attempts=1)
            admin.create_group(OTHER)
            admin.create_user(APP.access_key, APP.secret_key)
            for rule in (
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", TOPIC),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "%DLQ%*"),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "*"),
            ):
                admin.grant(APP.access_key, rule)
        with Producer(master.grpc, security=ROOT) as producer:
            ids = {body: producer.send(Message(TOPIC, body.encode())).message_id for body in BODIES}
        assert sorted(m.body.decode() for m in receive(master.grpc, OTHER, 3, ack=True)) == BODIES
        assert len(receive(master.grpc, GROUP, 3, ack=False, invisible_s=1)) == 3
        # Their one attempt over, the next receive dead-letters them.
        until(
            lambda: (
                not receive(master.grpc, GROUP, 1, ack=False, wait_s=0.2, deadline_s=0.2)
                and len(dead_letters(slave.grpc).entries) == 3
            ),
            20,
            "three dead letters",
        )
        yield {"plan": plan, "master": master, "slave": slave, "ids": ids}
    finally:
        stop_all(plan)


def receive(
    address: str,
    group: str,
    count: int,
    ack: bool,
    invisible_s: float = 30,
    wait_s: float = 1,
    deadline_s: float = 20,
) -> list:
    """What a SimpleConsumer of ``group`` receives (and acks), up to ``count`` messages
    or until ``deadline_s``."""
    got = []
    with SimpleConsumer(address, group, TOPIC, security=APP) as consumer:
        deadline = time.monotonic() + deadline_s
        while len(got) < count and time.monotonic() < deadline:
            got.extend(consumer.receive(max_messages=16, invisible_s=invisible_s, wait_s=wait_s))
        for message in got if ack else ():
            consumer.ack(message)
    return got


def dead_letters(address: str):
    with Admin(address, security=APP) as admin:
        return admin.dead_letters(GROUP)


def test_a_slave_resends_a_selection_to_the_group_alone(cluster):
    master, slave, ids = cluster["master"], cluster["slave"], cluster["ids"]
    page = dead_letters(slave.grpc)
    by_body = {}
    for entry in page.entries:
        assert entry.origin_topic == TOPIC and not entry.resent
        by_body[next(b for b, i in ids.items() if i == entry.message_id)] = entry.offset
    chosen = sorted(by_body[b] for b in BODIES[:2])
    with Admin(slave.grpc, security=APP) as admin:
        outcome = admin.resend_dead_letters(GROUP, chosen)
    assert outcome.resent == tuple(chosen) and outcome.already_resent == ()
    assert outcome.broker_group == "group-1"
    # The group's POP consumer: the messages as sent, ids kept, a fresh count.
    again = receive(master.grpc, GROUP, 2, ack=True)
    assert sorted(m.body.decode() for m in again) == BODIES[:2]
    assert {m.message_id for m in again} == {ids[b] for b in BODIES[:2]}
    assert {m.delivery_attempt for m in again} == {1} and {m.topic for m in again} == {TOPIC}
    assert all(m.resent_dead_letter for m in again)  # from the DLQ's queue, at its offsets
    assert sorted(m.queue_offset for m in again) == sorted(chosen)
    # Its 4.x push consumers read %RETRY%<group>: the copies are there, for the topic.
    with PullConsumer(master.grpc, GROUP, security=APP, start="beginning") as retries:
        retries.assign(f"%RETRY%{GROUP}", [0])
        copies = until(lambda: retries.poll(wait_s=0.5) or None, 20, "the retry copies")
    assert sorted(c.body.decode() for c in copies) == BODIES[:2]
    assert {c.properties["RETRY_TOPIC"] for c in copies} == {TOPIC}
    assert {c.message_id for c in copies} == {ids[b] for b in BODIES[:2]}
    # No other group of the topic gets anything again.
    assert receive(master.grpc, OTHER, 1, ack=False, deadline_s=2) == []
    marks = {e.offset: e.resent for e in dead_letters(slave.grpc).entries}
    assert marks == {offset: offset in chosen for offset in by_body.values()}


def test_the_cli_resends_the_rest_and_skips_what_was_resent(cluster, capsys, monkeypatch):
    """Whatever was resent before (after the first test: two of the three) is skipped."""
    slave, ids = cluster["slave"], cluster["ids"]
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", APP.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", APP.secret_key)
    page = dead_letters(slave.grpc)
    first, last = page.min_offset, page.max_offset - 1
    argv = ["group", "resend-dlq", GROUP, "--server", slave.grpc]
    code = main([*argv, "--from", str(first), "--to", str(last), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = json.loads(out)
    previously = [e.offset for e in page.entries if e.resent]
    rest = [e for e in page.entries if not e.resent]
    assert answer["already_resent"] == previously
    assert answer["resent"] == [e.offset for e in rest] != []
    bodies = sorted(b for b, i in ids.items() if i in {e.message_id for e in rest})
    got = receive(slave.grpc, GROUP, len(rest), ack=True)
    assert sorted(m.body.decode() for m in got) == bodies
    code = main([*argv, "--offsets", str(first)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.split()[-3:] == ["group-1", "0", "1"]  # resent 0, skipped 1
    code = main([*argv, "--offsets", str(last + 5)])
    out, err = capsys.readouterr()
    assert code != 0 and "ILLEGAL_OFFSET" in err


def test_a_slaves_console_lists_and_resends_at_the_master(cluster):
    """A new dead letter resent through a slave's console as the group's consumer (no
    admin rights): the slave's own POP state is not current, so what the page shows and
    does is the master's (after the first two tests, the three before it were resent)."""
    plan, master, slave = cluster["plan"], cluster["master"], cluster["slave"]
    marks = {e.offset: e.resent for e in dead_letters(slave.grpc).entries}
    with Producer(master.grpc, security=ROOT) as producer:
        late = producer.send(Message(TOPIC, b"payment-late")).message_id
    assert len(receive(master.grpc, GROUP, 1, ack=False, invisible_s=1)) == 1
    until(
        lambda: (
            not receive(master.grpc, GROUP, 1, ack=False, wait_s=0.2, deadline_s=0.2)
            and len(dead_letters(slave.grpc).entries) == len(marks) + 1
        ),
        20,
        "the new dead letter",
    )
    console = ConsoleClient(console_of(plan, slave))
    assert console.login(APP).status == 200
    page = console.request("GET", f"/api/groups/{GROUP}/dead-letters")
    assert page.status == 200, page.body
    entries = page.body["entries"]
    assert [e["resent"] for e in entries] == [marks[e["offset"]] for e in entries[:-1]] + [False]
    assert entries[-1]["message_id"] == late
    path = f"/api/groups/{GROUP}/dead-letters/resend"
    answer = console.request("POST", path, {"offsets": [e["offset"] for e in entries]})
    assert answer.status == 200, answer.body
    assert answer.body["resent"] == [e["offset"] for e in entries if not e["resent"]]
    assert answer.body["already_resent"] == [e["offset"] for e in entries if e["resent"]]
    console.close()
    again = receive(master.grpc, GROUP, len(answer.body["resent"]), ack=True)
    (late_again,) = [m for m in again if m.message_id == late]
    assert late_again.delivery_attempt == 1


def test_the_groups_consuming_the_topic_are_read_at_the_master_through_a_slave(cluster):
    with Admin(cluster["slave"].grpc, security=APP) as admin:
        found = admin.topic_consumers(TOPIC)
    assert [(c.group, c.broker_group, c.popping) for c in found] == [
        (OTHER, "group-1", True),
        (GROUP, "group-1", True),
    ]


def test_a_user_who_may_not_consume_as_the_group_is_refused(cluster):
    slave = cluster["slave"]
    with Admin(slave.grpc, security=ROOT) as admin:
        admin.create_user("outsider", "outsider-secret")
        admin.grant("outsider", AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "%DLQ%*"))
    outsider = type(APP)("outsider", "outsider-secret")
    with Admin(slave.grpc, security=outsider) as admin, pytest.raises(FerryError) as refused:
        admin.resend_dead_letters(GROUP, [0])
    assert "no subscribe permission on group settlers" in str(refused.value)


def test_the_official_5x_client_receives_and_acks_a_resent_message(cluster, tmp_path):
    """The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2) as the
    group's consumer: it receives the resent message with its id, topic and attempt 1, and
    its ack ends it."""
    master, slave = cluster["master"], cluster["slave"]
    topic, officials = "official-payments", "officials"
    with Admin(master.grpc, security=ROOT) as admin:
        admin.create_topic(topic, queue_count=1)
        admin.create_group(officials, max_delivery_attempts=1)
    with Producer(master.grpc, security=ROOT) as producer:
        sent = producer.send(Message(topic, b"official-0")).message_id

    def official(step: dict, home: str) -> list[dict]:
        scenario = {
            "scenario": "simple",
            "topic": topic,
            "group": officials,
            "access_key": ROOT.access_key,
            "secret_key": ROOT.secret_key,
            "steps": [{"do": "receive_until", "count": 1, "deadline_s": 30, **step}],
        }
        events = run_official_at(master.grpc, tmp_path / home, scenario)
        return [e for e in events if e["event"] == "received"]

    (first,) = official({"invisible_s": 1}, "first")
    assert (first["id"], first["attempt"]) == (sent, 1)
    with (
        Admin(slave.grpc, security=APP) as admin,
        SimpleConsumer(master.grpc, officials, topic, security=ROOT) as consumer,
    ):
        dead = until(
            lambda: (
                not consumer.receive(1, invisible_s=1, wait_s=0.2)
                and admin.dead_letters(officials).entries
            ),
            20,
            "the official group's dead letter",
        )
        assert admin.resend_dead_letters(officials, [dead[0].offset]).resent == (dead[0].offset,)
    (again,) = official({"invisible_s": 30, "ack": True}, "second")
    assert (again["id"], again["topic"], again["body"], again["attempt"]) == (
        sent,
        topic,
        "official-0",
        1,
    )
    with SimpleConsumer(master.grpc, officials, topic, security=ROOT) as consumer:
        assert consumer.receive(1, invisible_s=30, wait_s=1) == []  # acked: nothing comes back


def test_the_new_master_after_kill_9_knows_what_was_resent(cluster):
    plan, master, slave = cluster["plan"], cluster["master"], cluster["slave"]
    # Every dead letter resent (after the tests above, all were already), then the kill.
    offsets = [e.offset for e in dead_letters(slave.grpc).entries]
    with Admin(slave.grpc, security=APP) as admin:
        admin.resend_dead_letters(GROUP, offsets)
    kill(plan, master)
    survivors = [n for n in plan.nodes if n.id != master.id]
    new_master = master_of(plan, survivors)

    def page():
        try:
            return dead_letters(slave.grpc)
        except FerryError:  # the election, or the new master's replay, under way
            return None

    entries = until(page, 30, "the dead letters at the new master").entries
    assert [e.offset for e in entries] == offsets
    assert all(e.resent for e in entries)
    with Admin(new_master.grpc, security=APP) as admin:
        again = admin.resend_dead_letters(GROUP, offsets)
    assert again.resent == () and again.already_resent == tuple(offsets)
