"""RocketMQ's own ``mqadmin resetOffsetByTime`` (rocketmq-tools 5.3.3) against a 3-node
cluster, with a running 4.x Java DefaultMQPushConsumer (rocketmq-client 4.9.x) of the
group: mqadmin sends INVOKE_BROKER_TO_RESET_OFFSET to the master, which resets the
committed offsets and tells the consumer (RESET_CONSUMER_CLIENT_OFFSET), which then
consumes again what was stored after the reset point instead of committing its cached
offsets over the reset. Then, with no consumer online, ``resetOffsetByTime`` again and
``resetOffsetByTimeOld`` (the path mqadmin falls back to when a broker answers
CONSUMER_NOT_ONLINE: GET_CONSUME_STATS, SEARCH_OFFSET_BY_TIMESTAMP and
UPDATE_CONSUMER_OFFSET per queue)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.launcher.cluster import cluster_up
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.cluster import SMALL_STORE, master_of, stop_all

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)
TOPIC, GROUP = "rewind", "rewinders"
BEFORE = [f"before-{i}" for i in range(6)]
AFTER = [f"after-{i}" for i in range(6)]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RunningDriver:
    """A Java driver run in the background: its JSON events as they come."""

    def __init__(self, driver: clients.Driver, spec: dict, home) -> None:
        home.mkdir(parents=True, exist_ok=True)
        argv = list(driver.argv)
        argv.insert(1, f"-Duser.home={home}")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=home,
            env={**driver.env, "HOME": str(home), "PATH": "/usr/bin:/bin"},
        )
        self.process.stdin.write(json.dumps(spec))
        self.process.stdin.close()
        self.events: list[dict] = []
        self.other: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                self.events.append(json.loads(line))
            except json.JSONDecodeError:
                self.other.append(line)

    def consumed(self) -> Counter:
        return Counter(e["body"] for e in list(self.events) if e.get("event") == "consumed")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)

    def explain(self) -> str:
        return "\n".join([*map(json.dumps, self.events[-40:]), *self.other[-40:]])


def positions(address: str) -> dict[int, int]:
    with Admin(address) as admin:
        return {q.queue_id: q.consumer_offset for q in admin.group_progress(GROUP, TOPIC)}


def table_rows(output: str) -> dict[int, int]:
    """mqadmin's ``#brokerName #queueId #offset`` rows: queue -> offset."""
    rows = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "group-1" and words[1].isdigit():
            rows[int(words[1])] = int(words[2])
    return rows


def test_mqadmin_resets_by_time_with_a_4x_push_consumer_online_and_with_none(tmp_path):
    mqadmin = clients.required("mqadmin")
    java = clients.required("java-remoting")
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=SMALL_STORE)
    consumer = None
    try:
        master = master_of(plan)
        with Admin(master.grpc) as admin:
            admin.create_topic(TOPIC, queue_count=2)
            admin.create_group(GROUP)
        with Producer(master.grpc) as producer:
            for body in BEFORE:
                producer.send(Message(TOPIC, body.encode()))
            point_ms = now_ms() + 1  # every message above was stored before it
            until(lambda: now_ms() > point_ms, 1, "the clock past the reset point")
            for body in AFTER:
                producer.send(Message(TOPIC, body.encode()))
        with Admin(master.grpc) as admin:
            ends = {q.queue_id: q.max_offset for q in admin.describe_topic(TOPIC)[1]}
            at_point = {q: admin.offset_by_time(TOPIC, q, point_ms) for q in ends}
        namesrv = ";".join(node.remoting for node in plan.nodes)
        push = {
            "do": "push",
            "group": GROUP,
            "topic": TOPIC,
            "expect": ["never-sent"],  # runs until stopped
            "deadline_s": 120,
        }
        consumer = RunningDriver(
            java,
            {
                "namesrv": namesrv,
                # The consumer takes the reset back 10 s after the notice, and pulls again
                # at its next rebalance: every second here, not every 20 s.
                "system_properties": {"rocketmq.client.rebalance.waitInterval": "1000"},
                "steps": [push],
            },
            tmp_path / "push",
        )
        until(
            lambda: set(consumer.consumed()) == set(BEFORE + AFTER),
            60,
            "the push consumer to consume everything",
        )

        run = clients.run(
            mqadmin,
            {
                "namesrv": namesrv,
                "commands": [["resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(point_ms)]],
            },
            tmp_path / "mq",
            120,
        )
        (online,) = run.of("command")
        assert not online["error"], online["output"]
        assert table_rows(online["output"]) == at_point, online["output"]
        until(
            lambda: all(consumer.consumed()[body] >= 2 for body in AFTER),
            60,
            "the push consumer to consume again what was stored after the reset point",
        )
        assert all(consumer.consumed()[body] == 1 for body in BEFORE), consumer.explain()
        until(lambda: positions(master.grpc) == ends, 20, "its offsets committed to the end")
        consumer.stop()

        # Nobody online: the reset is the node's own (as a RocketMQ 5 broker's), and the
        # old path (what mqadmin falls back to on CONSUMER_NOT_ONLINE) works too.
        until(lambda: not admin_members(master.grpc), 30, "the consumer gone from the group")
        # One queue to an offset (-b/-q/-o): UPDATE_CONSUMER_OFFSET, then 222 naming it.
        one_queue = ["resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "0", "-b"]
        one_queue += [master.remoting, "-q", "1", "-o", "1"]
        run = clients.run(
            mqadmin,
            {
                "namesrv": namesrv,
                "commands": [
                    ["resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(point_ms)],
                    ["consumerProgress", "-g", GROUP],
                    ["resetOffsetByTimeOld", "-g", GROUP, "-t", TOPIC, "-s", "0"],
                    one_queue,
                ],
            },
            tmp_path / "mq",
            120,
        )
        offline, progress, old, single = run.of("command")
        assert not any(e["error"] for e in run.of("command")), run.explain()
        assert table_rows(offline["output"]) == at_point, offline["output"]
        assert "Consume Diff Total: 6" in progress["output"], progress["output"]
        # The old path's table: broker, queue, broker offset, consumer offset, offset at
        # the time, the offset reset to.
        rows = [line.split() for line in old["output"].splitlines() if line.startswith("group-1")]
        assert sorted(rows) == [
            ["group-1", str(q), str(ends[q]), str(at_point[q]), "0", "0"] for q in (0, 1)
        ], old["output"]
        assert "reset consumer offset to 1" in single["output"], single["output"]
        assert positions(master.grpc) == {0: 0, 1: 1}
    finally:
        if consumer is not None:
            consumer.stop()
        stop_all(plan)


def admin_members(address: str) -> list[str]:
    with Admin(address) as admin:
        return admin.group_members(GROUP)
