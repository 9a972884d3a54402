"""The rolling upgrade drill: a 3-node cluster of the previous release (``releases.toml``,
built by ``chaos/releases.py``) upgraded one node at a time to this checkout under a
producer's and a consumer's load, then downgraded back the same way; every acknowledged
message must be read back, and each step's writes-unavailable time is reported.

    python -m chaos.upgrade_drill [--from 0.1.0] [--data DIR] [--json]   (make upgrade-drill)

A step (docs/upgrades.md): for a master, a planned failover first; then SIGTERM, wait for
the exit, start the same data directory and config on the other release, and wait until
the cluster shows the node alive, on its new version, back in its group's in-sync set.
Slaves go first, the master last. The upgrade is not finalized (the routing format stays
1), so the downgrade is possible; a last phase upgrades again and finalizes, and checks
that routing still commits and that a node restarted after it reads the format-2 log.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TypeVar

from chaos import releases
from ferrymq.client import (
    Admin,
    FerryError,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
)
from ferrymq.launcher.cluster import (
    ClusterPlan,
    NodePlan,
    NodeRuntime,
    cluster_down,
    is_running,
    on_first_answering,
    plan_cluster,
    save_plan,
    start_node,
    this_runtime,
    wait_ready,
)
from ferrymq.launcher.polling import until

TOPIC = "upgrade-drill"
GROUP = "upgrade-drill-readers"
QUEUES = 4
STEP_TIMEOUT_S = 90.0
SETTINGS = {"replication": {"mode": "SYNC"}}
T = TypeVar("T")


@dataclass
class Step:
    phase: str  # "upgrade", "downgrade", "upgrade-again", "after-finalize"
    node: str
    role: str  # what it was when the step began
    to_version: str
    seconds: float = 0.0
    writes_unavailable_ms: float = 0.0  # the longest gap between acknowledged sends


@dataclass
class Load:
    """A producer sending numbered messages one at a time, and a consumer reading them."""

    addresses: str
    acked: dict[str, float] = field(default_factory=dict)  # body -> when acknowledged
    failed: int = 0
    read: dict[str, int] = field(default_factory=dict)  # body -> times read
    stop: threading.Event = field(default_factory=threading.Event)

    def produce(self) -> None:
        number = 0
        with Producer(self.addresses, timeout_s=5) as producer:
            while not self.stop.is_set():
                body = f"m-{number:08d}"
                number += 1
                try:
                    producer.send(Message(TOPIC, body.encode()))
                except FerryError:
                    self.failed += 1  # not acknowledged: the drill does not count it
                    continue
                self.acked[body] = time.monotonic()

    def consume(self, until_drained: threading.Event) -> None:
        with PullConsumer(self.addresses, GROUP, start="beginning") as consumer:
            consumer.assign(TOPIC, list(range(QUEUES)))
            self.read_until_drained(consumer.poll, until_drained)

    def read_until_drained(
        self, poll: Callable[..., list[ReceivedMessage]], until_drained: threading.Event
    ) -> None:
        """Read until a poll that began after the writer stopped finds nothing. A poll that
        began before may wait on one queue while the last messages land on another, and
        find nothing: ending there would count those acknowledged messages as lost."""
        while True:
            drained = until_drained.is_set()  # before the poll: see the docstring
            try:
                batch = poll(wait_s=0.5)
            except FerryError:
                continue  # a node restarting: poll again
            for message in batch:
                body = message.body.decode()
                self.read[body] = self.read.get(body, 0) + 1
            if not batch and drained:
                return

    def longest_gap_ms(self, start: float, end: float) -> float:
        # list() copies in one step: the writer thread adds to ``acked`` meanwhile.
        times = sorted(t for t in list(self.acked.values()) if start <= t <= end)
        points = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(points)) * 1000


def cluster_view(plan: ClusterPlan):
    """ClusterStatus from the first node that answers (None: none does)."""
    try:
        return on_first_answering([n.grpc for n in plan.nodes], Admin.cluster_status, 2.0)
    except FerryError:
        return None


def rejoined(node: NodePlan, version: str) -> bool:
    """Asked of the node itself: a node of 0.1.0 shows no versions (its ClusterStatus has
    no such field), so an upgraded node is the one that can show its own."""
    try:
        with Admin(node.grpc, timeout_s=2) as admin:
            status = admin.cluster_status()
    except FerryError:
        return False
    member = next((n for n in status.nodes if n.id == node.id), None)
    group = next((g for g in status.broker_groups if g.name == node.group), None)
    shown = (member.software_version or "0.1.0") if member else ""  # 0.1.0 said none
    return (
        member is not None
        and member.alive
        and shown == version
        and group is not None
        and node.id in group.in_sync
        and bool(status.raft_leader)
    )


def master_of(plan: ClusterPlan, group: str) -> str | None:
    status = cluster_view(plan)
    found = status and next((g for g in status.broker_groups if g.name == group), None)
    return found.master if found else None


def step(
    plan: ClusterPlan, node: NodePlan, runtime: NodeRuntime, version: str, phase: str, load: Load
) -> tuple[ClusterPlan, Step]:
    started = time.monotonic()
    was_master = master_of(plan, node.group) == node.id
    record = Step(phase, node.id, "master" if was_master else "slave", version)
    if was_master:
        with Admin(node.grpc, timeout_s=30) as admin:
            while_routing_moves(lambda: admin.failover(node.group), f"{node.group} failed over")
    os.kill(node.pid, signal.SIGTERM)
    until(lambda: not is_running(node, plan), 30, f"{node.id} to stop")
    restarted = start_node(plan, node, runtime=runtime)
    plan = replace(plan, nodes=tuple(restarted if n.id == node.id else n for n in plan.nodes))
    save_plan(plan)
    until(lambda: rejoined(restarted, version), STEP_TIMEOUT_S, f"{node.id} on {version}")
    ended = time.monotonic()
    record.seconds = round(ended - started, 2)
    record.writes_unavailable_ms = round(load.longest_gap_ms(started, ended), 1)
    return plan, record


def order(plan: ClusterPlan) -> list[NodePlan]:
    """Slaves first, the master last."""
    master = master_of(plan, plan.nodes[0].group)
    return sorted(plan.nodes, key=lambda n: n.id == master)


def while_routing_moves(call: Callable[[], T], what: str) -> T:
    """``call()``, asked again while routing answers UNAVAILABLE (its leader changed under
    the call, as it may around a node's restart): an operator asks again, and so does the
    drill. Both calls it makes so may land twice harmlessly: a second failover moves the
    master once more before the node stops, a second finalize sets the same format."""

    def attempt() -> tuple[T] | None:
        try:
            return (call(),)
        except FerryError as error:
            if error.code_name != "UNAVAILABLE":
                raise
            return None

    return until(attempt, 30, what)[0]


def run(old_version: str, directory: str) -> dict:
    old = releases.build(old_version)
    new = this_runtime()
    new_version = _checkout_version()
    plan = plan_cluster(directory, 3, 1, 3, auto_ports=True, settings=SETTINGS)
    plan = replace(plan, nodes=tuple(start_node(plan, n, runtime=old) for n in plan.nodes))
    save_plan(plan)
    steps: list[Step] = []
    load = Load(",".join(n.grpc for n in plan.nodes))
    drained = threading.Event()
    try:
        wait_ready(plan, STEP_TIMEOUT_S)
        with Admin(plan.nodes[0].grpc) as admin:
            admin.create_topic(TOPIC, QUEUES)
            admin.create_group(GROUP)
        writer = threading.Thread(target=load.produce, daemon=True)
        reader = threading.Thread(target=load.consume, args=(drained,), daemon=True)
        writer.start()
        reader.start()
        until(lambda: len(load.acked) >= 200, 60, "the load under way")
        for phase, runtime, version in (
            ("upgrade", new, new_version),
            ("downgrade", old, old_version),
            ("upgrade-again", new, new_version),
        ):
            for node in order(plan):
                current = next(n for n in plan.nodes if n.id == node.id)
                plan, record = step(plan, current, runtime, version, phase, load)
                steps.append(record)
        with Admin(plan.nodes[0].grpc) as admin:
            before = admin.cluster_status().routing_format  # 1: nothing moved it on
            routing_format = while_routing_moves(admin.finalize_upgrade, "the upgrade finalized")
            admin.create_topic(TOPIC + "-after", 1)  # routing commits in format 2
        last = plan.nodes[-1]  # a node restarted after the switch reads the format-2 log
        plan, record = step(plan, last, new, new_version, "after-finalize", load)
        steps.append(record)
        load.stop.set()
        writer.join(30)
        drained.set()
        reader.join(120)
    finally:
        load.stop.set()
        drained.set()
        cluster_down(directory)
    lost = sorted(set(load.acked) - set(load.read))
    return {
        "from_version": old_version,
        "to_version": new_version,
        "acknowledged": len(load.acked),
        "unacknowledged_sends": load.failed,
        "read": len(load.read),
        "lost_acknowledged": len(lost),
        "lost_examples": lost[:10],
        "read_twice": sum(1 for count in load.read.values() if count > 1),
        "routing_format_before_finalize": before,
        "routing_format_after": routing_format,
        "steps": [asdict(s) for s in steps],
    }


def _checkout_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("ferrymq")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="old", default=releases.recorded()[-1].version)
    parser.add_argument("--data", help="cluster directory (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    directory = args.data or tempfile.mkdtemp(prefix="ferrymq-upgrade-")
    result = run(args.old, directory)
    kept = result["lost_acknowledged"] == 0 and result["routing_format_before_finalize"] == 1
    if args.data is None and kept:
        shutil.rmtree(directory, ignore_errors=True)  # a failed run's logs stay, named below
    if args.json:
        print(json.dumps(result))
    else:
        for s in result["steps"]:
            print(
                f"{s['phase']:>14} {s['node']} ({s['role']}) -> {s['to_version']}: "
                f"{s['seconds']} s, writes unavailable {s['writes_unavailable_ms']} ms"
            )
        print(
            f"acknowledged {result['acknowledged']}, read {result['read']}, lost "
            f"{result['lost_acknowledged']}, read twice {result['read_twice']}"
        )
        print(
            f"routing format {result['routing_format_before_finalize']} until finalized, "
            f"{result['routing_format_after']} after"
        )
    if not kept:
        print(f"the cluster's data and logs: {directory}", file=sys.stderr)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
