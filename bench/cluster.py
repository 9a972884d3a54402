"""Replicated-cluster benchmark: ``python -m bench.cluster --json [--quick | --smoke]``.

Starts its own 3-node broker groups on loopback (OS-chosen ports, a temporary directory):
first one with SYNC replication, then one with ASYNC, one at a time so that the two never
compete for the cores or the disk. The client is ferrymq's SDK in this process, on the same
cores as the three nodes. Prints a human summary on stderr and one JSON object (last line
of stdout):

- ``sync_batch_send_msgs_per_s`` / ``async_batch_send_msgs_per_s``: ``Producer.
  send_batch_async`` of 128 messages of 1 KiB, ``IN_FLIGHT`` requests outstanding, for a
  fixed duration;
- ``sync_single_send_p50_us`` / ``_p99_us``: ``Producer.send`` of one 1 KiB message, one
  at a time, on the SYNC group (``async_single_send_*`` the same on the ASYNC group: the
  difference is what waiting for the slaves costs);
- ``end_to_end_p50_us`` / ``_p99_us``: on the SYNC group, ``Producer.send`` of one
  message, one at a time, to a one-queue topic a ``PullConsumer`` long-polls in another
  thread: from just before the send to the message in the consumer's hands;
- ``end_to_end_by_channel_p50_us`` / ``_p99_us``: the same end to end asked as its floor
  is asked (``measure_end_to_end_by_channel``: the SDK's blocking channel sends requests
  serialized up front, a thread's channel long-polls FERRY_FETCH and decodes nothing), so
  ``end_to_end_by_channel_floor_ratio`` is the nodes' share of ``end_to_end_floor_ratio``
  and the rest is the SDK's ``Producer`` and ``PullConsumer``;
  ``end_to_end_by_channel_cpu_us_per_message_{master,slaves,client}`` their CPU a message
  in it (the master's is most of each message's time in this closed loop), beside
  ``floor_end_to_end_cpu_us_per_message_*``, the floor's relay's, slaves' and client's;
- ``floor_single_send_p50_us`` / ``_p99_us`` and ``floor_end_to_end_p50_us`` / ``_p99_us``:
  the floors of the two figures above, measured first in the same run
  (``measure_floors``: ``bench.grpc_ceiling``'s replicated no-op relay on uvloop, asked
  by the SDK's blocking channel), with ``floor_single_cpu_us_per_send_{master,slaves,
  client}`` (the relay's, its two slaves', the channel's); ``sync_single_send_floor_ratio``
  and ``end_to_end_floor_ratio`` are each figure over its floor (issue 40 asks ≤ 1.3);
  ``floor_native_single_send_p50_us`` / ``_p99_us`` and its CPU per send by process: the
  same single sends with the relay and its slaves in C (``bench/native_floor``), what is
  left with no Python on the server side; ``sync_single_send_native_floor_ratio`` the
  single send over it;
- ``sync_single_send_idle_readers_p50_us`` / ``_p99_us`` and
  ``sync_single_idle_readers_cpu_us_per_send_master``: the SYNC single sends again while
  ``IDLE_READERS`` ``PullConsumer``s long-poll queues of another topic that nobody writes
  (a consumer fleet between messages): what waiting readers cost a send on the master;
- every SYNC figure above is the SDK on the remoting port (its default); the same
  measured with ``transport="grpc"`` is beside it as ``grpc_sync_single_send_p50_us``,
  ``grpc_sync_batch_send_msgs_per_s``, ``grpc_end_to_end_p50_us`` (and their p99s);
- ``replication_lag_bytes_p99`` (and ``_max``): the master's
  ``rocketmq_broker_commitlog_diff{slave=...}``, scraped alone from its metrics port every
  ``LAG_SAMPLE_INTERVAL_S`` during the SYNC batch phase, one sample per slave and scrape
  (``async_replication_lag_bytes_p99`` the same for the ASYNC phase);
- ``failover_unavailable_ms_p50`` / ``_p99`` / ``_max`` and ``failover_unavailable_ms``
  (every drill): on the SYNC group, a producer sends in a loop through all three
  addresses; the master is killed with SIGKILL; the figure is the time from the kill to
  the first acknowledged send that the dead master cannot have answered. The killed node
  is restarted and the next drill waits until all three are in sync again.
  ``failover_killed_raft_leader`` says for each drill whether the master killed was also
  the routing Raft leader (then routing must elect a leader before it can elect a master);
- ``official_client_failover_unavailable_ms_p50`` / ``_p99`` / ``_max`` and
  ``official_client_failover_unavailable_ms`` (every drill): the same kill -9 of the SYNC
  group's master, under the official RocketMQ Python client (``bench.official_failover``,
  a process of its own): a producer sending one message at a time and a SimpleConsumer
  receiving and acking, connected as the client connects (to the first of the route's
  addresses in its sorted order, and stays on the node it reaches after a failover); every
  other drill first makes the node it is connected to the master by a planned switchover,
  so about half the drills kill the client's own node:
  ``official_client_failover_client_on_master`` says, per drill, read from its TCP
  connections). The figure is the time from the kill until both an acknowledged send the
  dead master cannot have answered and a received message; the client learns no new route
  meanwhile (it refreshes every 30 s), so this is failover through any node.
  ``official_client_failover_lost`` counts acknowledged sends never received (must be 0).
  ``official_client_slave_kill_unavailable_ms_p50`` / ``_p99`` / (every drill): as many
  kill -9 drills of a node that is *not* the master, always the Python client's own (the
  master moved away from it first when needed), after the master kills, same load.
  At least 10 such drills in every mode but ``--smoke``. ``_sends_ms`` / ``_receives_ms``
  split each drill's figure, ``_killed_raft_leader`` says whether routing had to elect a
  leader first. With ``--java-grpc-driver ARGV`` (a JSON list: the command line of
  ``tests/compat/java/grpc5``'s driver, which ``tests.support.clients`` builds), the
  official Java 5.x client's producer and SimpleConsumer run beside the Python client's,
  given every node as access point, and ``official_java_client_failover_unavailable_ms_
  p50`` / ``_p99`` are its figures;
- ``official_send_p50_us_direct`` / ``_via_slave`` (and ``_p99_us_``): the official
  client's ``send`` of one message at a time with every call pinned to the master, then
  to a slave that forwards it; ``official_send_extra_hop_us`` is the difference of the
  p50s: what a client connected to a slave pays;
- ``{sync,async}_cpu_us_per_msg_{master,slaves,client,others}`` and ``_machine_busy_
  fraction``: CPU seconds (``/proc``) spent during each batch phase per message sent, by
  the master, the two slaves together, this client and everything else on the machine
  (other users), and how busy the machine's cores were: where the time went;
  ``sync_single_cpu_us_per_send_{master,slaves,client,others}`` the same for the SYNC
  single sends.

``python -m bench.cluster --single-sends N`` runs only the SYNC single sends (N of them,
after ``SINGLE_WARM_UP``) on a fresh group and prints those figures: the quick probe of
what one send costs each process, for before-and-after comparisons.

The clusters are always stopped (``cluster_down``, then SIGKILL of any pid left) and the
directory removed, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, replace

from bench.cpu import process_cpu_s
from bench.official_failover import (
    OfficialLoad,
    check_nothing_lost,
    java_load,
    resumed_after,
    tcp_peer_ports,
    unavailable_ms,
)
from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.launcher.cluster import (
    ClusterPlan,
    NodePlan,
    cluster_down,
    cluster_up,
    is_running,
    kill_node,
    load_plan,
    log_path,
    save_plan,
    start_node,
    tail,
)
from ferrymq.launcher.polling import until

BODY = bytes(range(256)) * 4  # 1 KiB
TOPIC = "BenchTopic"
E2E_TOPIC = "BenchEndToEnd"  # one queue: the consumer's long poll is on the queue written
E2E_GROUP = "bench-e2e"
IDLE_TOPIC = "BenchIdle"  # nobody writes it: its readers wait
IDLE_GROUP = "bench-idle"
IDLE_READERS = 32
IDLE_WAIT_S = 1.0  # each idle reader's long poll; also how long stopping them takes
STAMP = struct.Struct(">q")  # the body's first 8 bytes: monotonic_ns() at the send
QUEUES = 8
PER_REQUEST = 128
IN_FLIGHT = 16
# A full scrape of a master costs it ~12 ms of CPU on its event loop (1,000 series, most
# of them the RPC latency buckets): every 0.1 s, that was ~1.3 µs of the master's CPU per
# message of the SYNC batch and a stall of its loop an eighth of the time. The sampler
# asks for the lag's series alone (``name[]``: the other collectors are not read) every
# 0.5 s, 12 samples in a quick phase (Prometheus scrapes every 15 s).
LAG_SAMPLE_INTERVAL_S = 0.5
LAG_SERIES = "rocketmq_broker_commitlog_diff"
# 128 MiB segments: the default 1 GiB would have every node write (warm) a GiB of zeros
# per segment, for nothing a benchmark of tens of seconds needs.
STORE = {"commitlog_segment_bytes": 128 << 20}
# A send acknowledged this soon after the kill may have been answered by the old master
# just before it died; a send that had to be retried (the only way to reach the new
# master) always spends at least the producer's first backoff (50 ms) first.
OLD_MASTER_WINDOW_S = 0.05


@dataclass(frozen=True)
class Scale:
    batch_s: float
    singles: int
    drills: int
    drill_acks_after: int  # sends acknowledged by the new master before the restart
    official_sends: int  # official-client sends timed per node (direct, via a slave)
    official_drills: int  # master kills under the official clients' load (p99 needs 10)


SCALES = {
    "full": Scale(
        20.0, 5000, drills=10, drill_acks_after=500, official_sends=2000, official_drills=10
    ),
    "quick": Scale(
        6.0, 1500, drills=3, drill_acks_after=200, official_sends=500, official_drills=10
    ),
    "smoke": Scale(2.0, 200, drills=1, drill_acks_after=50, official_sends=100, official_drills=1),
}
# ``--single-sends``: enough warm-up that the sends timed are past the client's and the
# nodes' first-use costs (routes, connections, the first segments' pages).
SINGLE_WARM_UP = 500
FLOOR_PRODUCE_CODE = 30001  # the no-op relay's FERRY_PRODUCE (bench.grpc_ceiling)
OFFICIAL_TOPIC = "OfficialTopic"
OFFICIAL_JAVA_TOPIC = "OfficialJavaTopic"  # each client's consumer reads its own producer's
# A pause between an official producer's sends, so that its consumer (one receive of up
# to 16, then an ack per message) keeps up on two shared cores and a drill's backlog is
# not mistaken for a loss.
OFFICIAL_SEND_PAUSE_S = 0.005
OFFICIAL_GROUP = "official-readers"
OFFICIAL_ACKS_AFTER = 20  # official sends acknowledged after a failover before the restart


# Sends of an end to end measure before the ones it times.
END_TO_END_WARM_UP = 50


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# ---- cluster -------------------------------------------------------------------------
def start_cluster(directory: str, mode: str, store: dict | None = None) -> ClusterPlan:
    """Three nodes replicating in ``mode``; ``store``: settings in place of ``STORE``."""
    settings = {"replication": {"mode": mode}, "store": dict(store or STORE)}
    return cluster_up(directory, nodes=3, auto_ports=True, settings=settings, timeout_s=120)


def stop_cluster(directory: str) -> None:
    """``cluster_down``, then SIGKILL whatever is still running; never raises."""
    plan = load_plan(directory)
    if plan is None:
        return
    try:
        cluster_down(directory, timeout_s=20)
    except Exception as error:  # the kill below is the fallback
        log(f"cluster_down failed ({error}); killing the nodes")
    for node in plan.nodes:
        if is_running(node, plan):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)


def status_of(node: NodePlan):
    try:
        with Admin(node.grpc, timeout_s=2) as admin:
            return admin.cluster_status()
    except FerryError:
        return None


def master_of(plan: ClusterPlan, among: list[NodePlan] | None = None) -> NodePlan:
    candidates = among or list(plan.nodes)
    ids = {n.id for n in candidates}

    def find():
        for node in candidates:
            status = status_of(node)
            if status is not None and status.broker_groups:
                master = status.broker_groups[0].master
                if master in ids:
                    return next(n for n in plan.nodes if n.id == master)
        return None

    return until(find, 30, "a master")


def all_in_sync(plan: ClusterPlan, asked: NodePlan) -> bool:
    status = status_of(asked)
    if status is None or not status.broker_groups:
        return False
    group = status.broker_groups[0]
    alive = {n.id for n in status.nodes if n.alive}
    everyone = {n.id for n in plan.nodes}
    return bool(group.master) and set(group.in_sync) == everyone and alive == everyone


# ---- CPU accounting -------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / CLOCK_TICKS, sum(ticks) / CLOCK_TICKS


class CpuMeter:
    """CPU spent by the master, the slaves and this client (the benchmark) between enter
    and exit, and how busy the whole machine was (other users' work included)."""

    ROLES = ("master", "slaves", "client", "others")

    def __init__(self, master: list[int], slaves: list[int]) -> None:
        self.pids = {"master": master, "slaves": slaves, "client": [os.getpid()]}
        self.spent: dict[str, float] = {}

    @classmethod
    def of_group(cls, plan: ClusterPlan, master: NodePlan) -> CpuMeter:
        return cls([master.pid], [n.pid for n in plan.nodes if n != master])

    def _read(self) -> dict[str, float]:
        return {role: sum(process_cpu_s(p) for p in pids) for role, pids in self.pids.items()}

    def __enter__(self) -> CpuMeter:
        self._before, self._machine_before = self._read(), machine_cpu_s()
        return self

    def __exit__(self, *exc) -> None:
        after, machine = self._read(), machine_cpu_s()
        self.spent = {role: after[role] - self._before[role] for role in after}
        busy = machine[0] - self._machine_before[0]
        total = machine[1] - self._machine_before[1]
        self.spent["machine_busy_fraction"] = busy / total if total else 0.0
        self.spent["others"] = busy - sum(after[r] - self._before[r] for r in after)

    def us_per_message(
        self, messages: int, roles: tuple[str, ...] = ("master", "slaves", "client")
    ) -> dict[str, float]:
        """CPU µs a message of each of ``roles`` over the measure (after ``__exit__``)."""
        return {role: round(self.spent[role] / messages * 1e6, 1) for role in roles}


# ---- replication lag ------------------------------------------------------------------
def scrape_lag(metrics_address: str) -> list[int]:
    """Every ``rocketmq_broker_commitlog_diff`` sample of one scrape (one per slave)."""
    url = f"http://{metrics_address}/metrics?name[]={LAG_SERIES}"
    with urllib.request.urlopen(url, timeout=2) as answer:
        text = answer.read().decode()
    lags = []
    for line in text.splitlines():
        if line.startswith(LAG_SERIES + "{"):
            lags.append(int(float(line.rsplit(" ", 1)[1])))
    return lags


class LagSampler:
    """A thread scraping the master's lag every ``LAG_SAMPLE_INTERVAL_S`` until stopped."""

    def __init__(self, metrics_address: str) -> None:
        self.address = metrics_address
        self.samples: list[int] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(LAG_SAMPLE_INTERVAL_S):
            try:
                self.samples.extend(scrape_lag(self.address))
            except OSError:
                self.errors += 1

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


# ---- phases ---------------------------------------------------------------------------
async def batch_phase(access: str, seconds: float, transport: str) -> tuple[int, float]:
    """``IN_FLIGHT`` workers sending batches until ``seconds`` have passed: (messages,
    seconds actually taken, to the last answer)."""
    sent = 0
    producer = Producer(access, timeout_s=30, transport=transport)
    try:
        await producer.send_batch_async([Message(TOPIC, BODY)])  # route and channel up
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal sent
            while time.perf_counter() < deadline:
                batch = [Message(TOPIC, BODY) for _ in range(PER_REQUEST)]
                receipts = await producer.send_batch_async(batch)
                assert len(receipts) == PER_REQUEST
                sent += PER_REQUEST

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return sent, time.perf_counter() - started
    finally:
        producer.close()


def measure_batch(plan: ClusterPlan, seconds: float, transport: str = "remoting") -> dict:
    access = ",".join(n.grpc for n in plan.nodes)
    master = master_of(plan)
    with LagSampler(master.metrics) as sampler, CpuMeter.of_group(plan, master) as cpu:
        sent, took = asyncio.run(batch_phase(access, seconds, transport))
    figures = {"msgs_per_s": round(sent / took), "messages": sent}
    # Where the cores went: CPU µs per message sent, by process (the slaves summed).
    for role, us in cpu.us_per_message(sent, CpuMeter.ROLES).items():
        figures[f"cpu_us_per_msg_{role}"] = us
    figures["machine_busy_fraction"] = round(cpu.spent["machine_busy_fraction"], 2)
    if sampler.samples:
        figures["lag_p99"] = round(percentile(sampler.samples, 0.99))
        figures["lag_max"] = max(sampler.samples)
        figures["lag_samples"] = len(sampler.samples)
    else:
        figures["lag_p99"] = figures["lag_max"] = figures["lag_samples"] = 0
    return figures


@dataclass(frozen=True)
class SingleSends:
    """``Producer.send`` of one message at a time: latency, and CPU per send by process."""

    p50_us: float
    p99_us: float
    cpu_us_per_send: dict[str, float]  # master, slaves (summed), client, others


def measure_single(
    plan: ClusterPlan, count: int, transport: str = "remoting", warm_up: int = 50
) -> SingleSends:
    access = ",".join(n.grpc for n in plan.nodes)
    took = []
    with Producer(access, transport=transport) as producer:
        for _ in range(warm_up):
            producer.send(Message(TOPIC, BODY))
        with CpuMeter.of_group(plan, master_of(plan)) as cpu:
            for _ in range(count):
                message = Message(TOPIC, BODY)
                started = time.perf_counter()
                producer.send(message)
                took.append(time.perf_counter() - started)
    spent = cpu.us_per_message(count, CpuMeter.ROLES)
    return SingleSends(statistics.median(took) * 1e6, percentile(took, 0.99) * 1e6, spent)


def measure_floors(count: int) -> dict:
    """The floors of the single send and of the end to end, measured in this run before
    any group starts, so that each target's ratio compares one hour on one host (the
    floors moved by up to ~2x within an evening here): ``bench.grpc_ceiling``'s
    ``noop_remoting_replicated_*``, a no-op relay on uvloop that copies each FERRY_PRODUCE
    body to two no-op slaves and answers once both acknowledged, asked one send at a time
    by the SDK's blocking channel (the end to end: a thread's channel long-polls the sends
    back), with each process's CPU per send, as ``measure_single`` reports the group's;
    and the same single sends with the relay and the slaves in C (``floor_native_*``:
    what is left with no Python on the server side)."""
    from bench import grpc_ceiling as floor

    with floor.native_floor_programs() as programs:
        with floor.replicated_relay("python", "python") as (port, pid, slave_pids):
            figures = single_floor(port, CpuMeter([pid], slave_pids), count, "floor")
            with CpuMeter([pid], slave_pids) as cpu:
                end_to_end = floor.sdk_remoting_end_to_end(f"127.0.0.1:{port}", count // 3)
        with floor.replicated_relay("native", "native", programs) as (port, pid, slaves):
            figures.update(single_floor(port, CpuMeter([pid], slaves), count, "floor_native"))
    p50, p99 = floor.p50_p99_us(end_to_end)
    for role, us in cpu.us_per_message(count // 3 + floor.WARM_UP_SENDS).items():
        figures[f"floor_end_to_end_cpu_us_per_message_{role}"] = us
    return {**figures, "floor_end_to_end_p50_us": p50, "floor_end_to_end_p99_us": p99}


def single_floor(port: int, cpu: CpuMeter, count: int, prefix: str) -> dict:
    """One floor's single sends from the SDK's blocking channel: ``<prefix>_single_send_*``
    and its CPU per send by process."""
    from bench import grpc_ceiling as floor

    with cpu:
        took = floor.sdk_remoting_one_at_a_time(f"127.0.0.1:{port}", FLOOR_PRODUCE_CODE, count)
    sent = count + floor.WARM_UP_SENDS
    p50, p99 = floor.p50_p99_us(took)
    return {
        f"{prefix}_single_send_p50_us": p50,
        f"{prefix}_single_send_p99_us": p99,
        **{
            f"{prefix}_single_cpu_us_per_send_{role}": us
            for role, us in cpu.us_per_message(sent).items()
        },
    }


def floor_ratios(figures: dict) -> dict:
    """Each measured figure over its floor of the same run (issue 40's targets: ≤ 1.3)."""
    ratios = {
        "sync_single_send_floor_ratio": ("sync_single_send_p50_us", "floor_single_send_p50_us"),
        "end_to_end_floor_ratio": ("end_to_end_p50_us", "floor_end_to_end_p50_us"),
        "end_to_end_by_channel_floor_ratio": (
            "end_to_end_by_channel_p50_us",
            "floor_end_to_end_p50_us",
        ),
        "sync_single_send_native_floor_ratio": (
            "sync_single_send_p50_us",
            "floor_native_single_send_p50_us",
        ),
    }
    return {
        name: round(figures[measured] / figures[floor], 2)
        for name, (measured, floor) in ratios.items()
        if measured in figures and figures.get(floor)
    }


def run_single_sends(directory: str, count: int) -> dict:
    """``--single-sends N``: only the SYNC group's single sends, after ``SINGLE_WARM_UP``:
    the per-send cost, by process, in well under a minute."""
    plan = start_cluster(directory, "SYNC")
    create_topic(plan)
    log(f"SYNC group up; {count} single sends after {SINGLE_WARM_UP} of warm-up")
    sends = measure_single(plan, count, warm_up=SINGLE_WARM_UP)
    return {
        "sync_single_send_p50_us": round(sends.p50_us),
        "sync_single_send_p99_us": round(sends.p99_us),
        "sync_single_sends": count,
        **{f"sync_single_cpu_us_per_send_{k}": v for k, v in sends.cpu_us_per_send.items()},
    }


class LoopProducer:
    """A thread sending one message at a time through every address, recording when each
    send started and when it was acknowledged (monotonic seconds)."""

    def __init__(self, access: str) -> None:
        self.access = access
        self.acknowledged: list[tuple[float, float]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Producer(self.access, timeout_s=3) as producer:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    producer.send(Message(TOPIC, BODY))
                    self.acknowledged.append((started, time.monotonic()))
                except FerryError as error:
                    self.failures.append(error.code_name)

    def first_ack_after(self, killed_at: float) -> float | None:
        """The first acknowledgement the killed master cannot have given: a send started
        after the kill, or one acknowledged later than ``OLD_MASTER_WINDOW_S`` after it."""
        later = [
            acked
            for started, acked in self.acknowledged[-2000:]
            if acked > killed_at
            and (started > killed_at or acked - killed_at > OLD_MASTER_WINDOW_S)
        ]
        return min(later) if later else None

    def __enter__(self) -> LoopProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


def raft_leader_id(plan: ClusterPlan) -> str:
    """The node id of the routing Raft leader, or "" when none is known."""
    for node in plan.nodes:
        status = status_of(node)
        if status is not None and status.raft_leader:
            return next((n.id for n in plan.nodes if n.raft == status.raft_leader), "")
    return ""


@dataclass(frozen=True)
class Drill:
    unavailable_ms: float
    killed_raft_leader: bool  # the master was also the routing Raft leader


def wait_all_in_sync(plan: ClusterPlan) -> None:
    """Until the group has a master and all three in sync; on timeout, what every node
    says and the end of its log (the directory is removed afterwards)."""
    try:
        until(lambda: all_in_sync(plan, plan.nodes[0]), 90, "all three in sync", 0.1)
    except TimeoutError:
        for node in plan.nodes:
            status = status_of(node)
            group = status.broker_groups[0] if status and status.broker_groups else None
            log(
                f"{node.id}: running={is_running(node, plan)} master="
                f"{group.master if group else '?'} in_sync={group.in_sync if group else '?'} "
                + " ".join(
                    f"{n.id}:{n.role}/{'up' if n.alive else 'down'}/{n.max_offset}"
                    for n in (status.nodes if status else ())
                )
            )
            log(tail(log_path(plan, node), 8))
        raise


def one_drill(directory: str, drill: int, load: LoopProducer, acks_after: int) -> Drill:
    """Kill the master under ``load``, time the first acknowledgement after it, restart
    the killed node."""
    plan = load_plan(directory)
    wait_all_in_sync(plan)
    master = master_of(plan)
    leader = raft_leader_id(plan)
    before = len(load.acknowledged)
    until(lambda: len(load.acknowledged) > before + 50, 30, "load before the kill")
    killed_at = time.monotonic()
    kill_node(plan, master)  # its ports held for its restart
    first = until(lambda: load.first_ack_after(killed_at), 30, "an acknowledged send", 0.01)
    unavailable_ms = (first - killed_at) * 1000
    new_master = master_of(plan, [n for n in plan.nodes if n.id != master.id])
    log(
        f"  drill {drill}: killed {master.id}"
        f"{' (also the Raft leader)' if leader == master.id else ''}, {new_master.id} took "
        f"over, writes unavailable for {unavailable_ms:.0f} ms"
    )
    # Some load on the new master alone before the old one returns and catches up.
    after = len(load.acknowledged)
    until(lambda: len(load.acknowledged) > after + acks_after, 30, "load after the failover")
    until(lambda: not is_running(master, plan), 10, f"{master.id} to die")
    restarted = start_node(plan, master)
    save_plan(replace(plan, nodes=tuple(restarted if n.id == master.id else n for n in plan.nodes)))
    return Drill(round(unavailable_ms, 1), leader == master.id)


def failover_drills(directory: str, drills: int, acks_after: int) -> list[Drill]:
    plan = load_plan(directory)
    with LoopProducer(",".join(n.grpc for n in plan.nodes)) as load:
        figures = [one_drill(directory, d, load, acks_after) for d in range(1, drills + 1)]
        wait_all_in_sync(load_plan(directory))
    if load.failures:
        log(f"  failed sends during the drills: {len(load.failures)} ({set(load.failures)})")
    return figures


# ---- the official client -------------------------------------------------------------
def official_hop(plan: ClusterPlan, count: int, home: str) -> dict:
    """The official client's single-send latency with every call pinned to the master,
    then to a slave (which forwards each call to the master)."""
    master = master_of(plan)
    slave = next(n for n in plan.nodes if n.id != master.id)
    figures = {}
    for name, node in (("direct", master), ("via_slave", slave)):
        client = OfficialLoad(
            {
                "scenario": "sends",
                "endpoint": node.grpc,
                "pin": node.grpc,
                "topic": OFFICIAL_TOPIC,
                "count": count,
            },
            home=home,
        )
        (timed,) = [e for e in client.stop(timeout_s=600) if e["event"] == "latencies"]
        took = timed["send_us"]
        figures[f"official_send_p50_us_{name}"] = round(statistics.median(took))
        figures[f"official_send_p99_us_{name}"] = round(percentile(took, 0.99))
    figures["official_send_extra_hop_us"] = (
        figures["official_send_p50_us_via_slave"] - figures["official_send_p50_us_direct"]
    )
    return figures


@dataclass(frozen=True)
class OfficialDrill:
    unavailable_ms: float  # the Python client's: sends and receives both resumed
    sends_ms: (
        float  # the Python client's first acknowledged send the dead node cannot have answered
    )
    receives_ms: float  # the Python client's first message received after the kill
    client_on_master: bool  # the Python client's connection was to the node killed
    killed_raft_leader: bool  # routing had to elect a leader before a master
    java_ms: float | None  # the Java client's (sends and receives), when it ran
    killed_at: float  # time.monotonic() of the kill


def _resumed_ms(load: OfficialLoad, killed_at: float) -> tuple[float, float, float]:
    took_ms = unavailable_ms(load, killed_at, 60)
    sent, received = resumed_after(load, killed_at)
    return took_ms, (sent - killed_at) * 1000, (received - killed_at) * 1000


def drill_victim(plan: ClusterPlan, drill: int, kind: str, python: OfficialLoad) -> NodePlan:
    """The node a drill kills. ``master``: the master, made the Python client's own node
    every other drill. ``slave``: a node that is not the master, always the Python
    client's own (the master moved away from it first if needed): a client whose node
    dies must find the others."""
    master = master_of(plan)
    ports = tcp_peer_ports(python.process.pid)
    own = [n for n in plan.nodes if int(n.grpc.rsplit(":", 1)[1]) in ports]
    if kind == "master":
        if drill % 2 == 0 and len(own) == 1:
            master = switch_master(plan, own[0])
        return master
    if len(own) != 1:  # not connected to exactly one node: any slave
        return next(n for n in plan.nodes if n.id != master.id)
    if own[0].id == master.id:
        switch_master(plan, next(n for n in plan.nodes if n.id != master.id))
    return own[0]


def official_drill(
    directory: str, drill: int, loads: dict[str, OfficialLoad], kind: str = "master"
) -> OfficialDrill:
    """Kill the master (``kind`` "master") or a node that is not the master ("slave")
    under the official clients' load, time until their sends and receives resume,
    restart the killed node."""
    plan = load_plan(directory)
    wait_all_in_sync(plan)
    master = drill_victim(plan, drill, kind, loads["python"])
    leader = raft_leader_id(plan)
    for load in loads.values():
        sent = len(load.of("sent"))
        load.until(lambda load=load, n=sent: len(load.of("sent")) > n + 20, 60, "load before")
    python = loads["python"]
    on_master = int(master.grpc.rsplit(":", 1)[1]) in tcp_peer_ports(python.process.pid)
    killed_at = time.monotonic()
    kill_node(plan, master)  # its ports held for its restart
    took_ms, sends_ms, receives_ms = _resumed_ms(python, killed_at)
    java_ms = unavailable_ms(loads["java"], killed_at, 60) if "java" in loads else None
    log(
        f"  official drill {drill}: killed {master.id} ({kind})"
        f"{' (also the Raft leader)' if leader == master.id else ''} (the Python client "
        f"{'was' if on_master else 'was not'} connected to it): sends resumed after "
        f"{sends_ms:.0f} ms, receives after {receives_ms:.0f} ms"
        + (f"; the Java client's after {java_ms:.0f} ms" if java_ms is not None else "")
    )
    for load in loads.values():
        sent = len(load.of("sent"))
        load.until(
            lambda load=load, n=sent: len(load.of("sent")) > n + OFFICIAL_ACKS_AFTER, 60, "after"
        )
    until(lambda: not is_running(master, plan), 10, f"{master.id} to die")
    restarted = start_node(plan, master)
    save_plan(replace(plan, nodes=tuple(restarted if n.id == master.id else n for n in plan.nodes)))
    return OfficialDrill(
        round(took_ms, 1),
        round(sends_ms, 1),
        round(receives_ms, 1),
        on_master,
        leader == master.id,
        None if java_ms is None else round(java_ms, 1),
        killed_at,
    )


def log_lost(client: str, events: list[dict], lost: set[str], kills: list[float]) -> None:
    """What is known of acknowledged sends never received: how many, when they were
    answered relative to the nearest kill, whether the consumer drained to its end."""
    answered = {e["body"]: e["t1"] for e in events if e["event"] == "sent"}
    offsets = sorted(
        min((answered[body] - k for k in kills), key=abs) for body in lost if body in answered
    )
    last_received = max((e["t"] for e in events if e["event"] == "received"), default=0)
    errors = [e for e in events if e["event"] in ("receive_failed", "ack_failed")]
    log(f"  {client}: {len(errors)} failed receives or acks, the last: {errors[-3:]}")
    log(
        f"  {client}: {len(lost)} acknowledged sends never received, e.g. {sorted(lost)[:5]}; "
        f"answered at {offsets[0]:+.2f} .. {offsets[-1]:+.2f} s from the nearest kill; "
        f"last receive at {last_received:.1f}, last answer at {max(answered.values()):.1f}"
    )


def switch_master(plan: ClusterPlan, target: NodePlan) -> NodePlan:
    """``target`` made master by a planned switchover (nothing lost), all in sync again."""
    master = master_of(plan)
    if master.id != target.id:
        with Admin(master.grpc, timeout_s=60) as admin:
            group = admin.cluster_status().broker_groups[0].name
            admin.failover(group, target.id)
        until(lambda: master_of(plan).id == target.id, 30, f"{target.id} as master")
        wait_all_in_sync(plan)
    return target


def official_failover_drills(
    directory: str, drills: int, home: str, java_argv: list[str] | None
) -> tuple[list, int]:
    """Kill -9 of the master ``drills`` times, then of a node that is not the master
    ``drills`` times, under the official producers and consumers (Python; Java too when
    its driver is given); the master kills, the other kills, and how many acknowledged
    sends were never received."""
    plan = load_plan(directory)
    wait_all_in_sync(plan)
    first = min(plan.nodes, key=lambda n: n.grpc)  # where the Python client connects
    stop_file = os.path.join(home, "stop-official-load")
    loads = {
        "python": OfficialLoad(
            {
                "scenario": "load",
                "endpoint": first.grpc,
                "topic": OFFICIAL_TOPIC,
                "group": OFFICIAL_GROUP,
                "pause_s": OFFICIAL_SEND_PAUSE_S,
            },
            home=home,
            stop_file=stop_file,
        )
    }
    if java_argv:
        java_home = os.path.join(home, "java")
        os.makedirs(java_home, exist_ok=True)
        access = ";".join(n.grpc for n in plan.nodes)
        loads["java"] = java_load(
            java_argv,
            access,
            OFFICIAL_JAVA_TOPIC,
            OFFICIAL_GROUP + "-java",  # created on first use
            java_home,
            stop_file,
            OFFICIAL_SEND_PAUSE_S,
        )
    lost = 0
    try:
        for load in loads.values():
            load.until(lambda load=load: len(load.of("received")) >= 20, 120, "official load")
        done = [official_drill(directory, d, loads) for d in range(1, drills + 1)]
        slave_kills = [official_drill(directory, d, loads, "slave") for d in range(1, drills + 1)]
        wait_all_in_sync(load_plan(directory))
        for name, load in loads.items():
            events = load.stop()
            sent, received = check_nothing_lost(events)
            lost += len(sent - received)
            if sent - received:
                kills = [d.killed_at for d in done + slave_kills]
                log_lost(name, events, sent - received, kills)
            failed = sum(1 for e in events if e["event"] == "send_failed")
            if failed:
                log(f"  {name} sends that failed (the client gave up) in the drills: {failed}")
    finally:
        for load in loads.values():
            load.kill()
    return done, slave_kills, lost


# ---- the run --------------------------------------------------------------------------
class Arrivals:
    """What an end-to-end measure's consumer thread reports (each message's arrival, or
    its failure) and what its producer waits on before the next send."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        self.failures: list[BaseException] = []
        self._got = threading.Condition()

    def add(self, value: float) -> None:
        with self._got:
            self.arrived.append(value)
            self._got.notify()

    def fail(self, error: BaseException) -> None:
        with self._got:
            self.failures.append(error)
            self._got.notify()

    def wait_for(self, index: int, timeout_s: float = 10) -> None:
        """Until message ``index`` has arrived; RuntimeError when the consumer failed or
        timed out."""
        with self._got:
            if not self._got.wait_for(
                lambda: len(self.arrived) > index or self.failures, timeout_s
            ):
                raise RuntimeError("the end-to-end consumer timed out")
        if self.failures:
            raise RuntimeError(f"end-to-end consumer: {self.failures[0]}")


def measure_end_to_end(plan: ClusterPlan, count: int, transport: str) -> tuple[float, float]:
    """Send one stamped message at a time; a long-polling consumer thread reports its age
    on arrival. (p50, p99) in µs."""
    access = ",".join(n.grpc for n in plan.nodes)
    arrivals = Arrivals()
    stop = threading.Event()
    ready = threading.Event()

    def consume() -> None:
        try:
            with PullConsumer(
                access, E2E_GROUP, start="end", timeout_s=10, transport=transport
            ) as reader:
                reader.assign(E2E_TOPIC, [0])
                ready.set()  # its position is the queue's end: sends start after this
                while not stop.is_set():
                    for message in reader.poll(wait_s=1.0):
                        age = (time.monotonic_ns() - STAMP.unpack_from(message.body)[0]) / 1e9
                        arrivals.add(age)
        except BaseException as error:
            arrivals.fail(error)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    warmup = END_TO_END_WARM_UP
    try:
        if not ready.wait(30):
            raise RuntimeError(f"the end-to-end consumer did not start: {arrivals.failures}")
        with Producer(access, transport=transport) as producer:
            for i in range(warmup + count):
                body = STAMP.pack(time.monotonic_ns()) + BODY[STAMP.size :]
                producer.send(Message(E2E_TOPIC, body))
                arrivals.wait_for(i)
    finally:
        stop.set()
        consumer.join(10)
    took = arrivals.arrived[warmup:]
    return statistics.median(took) * 1e6, percentile(took, 0.99) * 1e6


def measure_end_to_end_by_channel(
    plan: ClusterPlan, count: int
) -> tuple[float, float, dict[str, float]]:
    """``measure_end_to_end`` asked as ``bench.grpc_ceiling.sdk_remoting_end_to_end`` asks
    the floor: the master's remoting port, FERRY_PRODUCE and FERRY_FETCH bodies serialized
    up front (each fetch names the offset the send before it took), no decoding; each
    send's age taken when the fetch brings it, the next send waiting for that. (p50, p99)
    in µs, and the CPU µs a message of the master, the slaves and the client: in this
    closed loop the master's is most of each message's time (docs/native-lane.md, "The end
    to end split between the nodes and the SDK"). What it leaves out of
    ``measure_end_to_end`` is the SDK's share."""
    from bench.produce import sdk_message
    from ferrymq.client.produce_records import encode_record
    from ferrymq.client.remoting_channel import RemotingChannel, fetch_answer
    from ferrymq.codec.remoting_codes import FerryRequestCode
    from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
    from ferrymq.protocol.ferrymq import data_pb2 as data

    master = master_of(plan)
    address = master.remoting
    warmup = END_TO_END_WARM_UP
    sends = warmup + count
    with contextlib.closing(RemotingChannel(address, 10.0)) as channel:
        asked = data.FetchRequest(group=E2E_GROUP, topic=E2E_TOPIC, queue_id=0, max_messages=1)
        start = fetch_answer(channel.call(FerryRequestCode.FERRY_FETCH, asked.SerializeToString()))
    born_ms = time.time_ns() // 1_000_000
    produce = [
        data.ProduceRequest(
            topic=E2E_TOPIC,
            queue_id=0,
            count=1,
            records=encode_record(sdk_message(i), pb.NORMAL, born_ms),
            atomic=True,
        ).SerializeToString()
        for i in range(sends)
    ]
    fetch = [
        data.FetchRequest(
            group=E2E_GROUP,
            topic=E2E_TOPIC,
            queue_id=0,
            offset=start.max_offset + i,
            max_messages=1,
            wait_ms=1000,
        ).SerializeToString()
        for i in range(sends)
    ]
    arrivals = Arrivals()

    def consume() -> None:
        try:
            with contextlib.closing(RemotingChannel(address, 10.0)) as reader:
                index = 0
                while index < sends:
                    answer = reader.call(FerryRequestCode.FERRY_FETCH, fetch[index])
                    if len(answer.body) > len(BODY):  # its record (else its wait ended)
                        arrivals.add(time.perf_counter())
                        index += 1
        except BaseException as error:
            arrivals.fail(error)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    took = []
    cpu = CpuMeter.of_group(plan, master)
    with cpu, contextlib.closing(RemotingChannel(address, 10.0)) as producer:
        for index in range(sends):
            started = time.perf_counter()
            producer.call(FerryRequestCode.FERRY_PRODUCE, produce[index])
            arrivals.wait_for(index)
            if index >= warmup:
                took.append(arrivals.arrived[index] - started)
    consumer.join(10)
    spent = cpu.us_per_message(sends)
    return statistics.median(took) * 1e6, percentile(took, 0.99) * 1e6, spent


def create_topic(plan: ClusterPlan) -> None:
    with Admin(plan.nodes[0].grpc) as admin:
        admin.create_topic(TOPIC, QUEUES)
        admin.create_topic(E2E_TOPIC, 1)
        admin.create_group(E2E_GROUP)
        admin.create_topic(IDLE_TOPIC, IDLE_READERS)
        admin.create_group(IDLE_GROUP)


@contextlib.contextmanager
def idle_readers(plan: ClusterPlan, count: int):
    """``count`` threads, each a ``PullConsumer`` long-polling its own queue of
    ``IDLE_TOPIC`` (at its end, where nothing comes), until the block ends."""
    access = ",".join(n.grpc for n in plan.nodes)
    stop = threading.Event()
    waiting = threading.Semaphore(0)
    failures: list[BaseException] = []

    def read(queue_id: int) -> None:
        try:
            with PullConsumer(access, IDLE_GROUP, start="end") as reader:
                reader.assign(IDLE_TOPIC, [queue_id])
                waiting.release()
                while not stop.is_set():
                    reader.poll(wait_s=IDLE_WAIT_S)
        except BaseException as error:
            failures.append(error)
            waiting.release()

    threads = [threading.Thread(target=read, args=(q,), daemon=True) for q in range(count)]
    for thread in threads:
        thread.start()
    try:
        for _ in threads:
            if not waiting.acquire(timeout=30):
                raise RuntimeError("the idle readers did not start")
        if failures:
            raise RuntimeError(f"an idle reader failed: {failures[0]}")
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(IDLE_WAIT_S + 10)


def run_sync(directory: str, scale: Scale, drills: int, java_argv: list[str] | None) -> dict:
    plan = start_cluster(directory, "SYNC")
    create_topic(plan)
    with Admin(plan.nodes[0].grpc) as admin:
        admin.create_topic(OFFICIAL_TOPIC, QUEUES)
        admin.create_topic(OFFICIAL_JAVA_TOPIC, QUEUES)
        admin.create_group(OFFICIAL_GROUP)
    log(f"SYNC group up ({', '.join(n.grpc for n in plan.nodes)}); batch phase")
    batch = measure_batch(plan, scale.batch_s)
    log("batch phase on gRPC")
    grpc_batch = measure_batch(plan, scale.batch_s, "grpc")
    log("single sends, remoting then gRPC")
    single = measure_single(plan, scale.singles)
    grpc_single = measure_single(plan, scale.singles, "grpc")
    log(f"single sends beside {IDLE_READERS} idle readers")
    with idle_readers(plan, IDLE_READERS):
        beside_idle = measure_single(plan, scale.singles)
    log("end to end, remoting then gRPC")
    e2e_p50, e2e_p99 = measure_end_to_end(plan, scale.singles // 3, "remoting")
    channel_e2e_p50, channel_e2e_p99, channel_e2e_cpu = measure_end_to_end_by_channel(
        plan, scale.singles // 3
    )
    grpc_e2e_p50, grpc_e2e_p99 = measure_end_to_end(plan, scale.singles // 3, "grpc")
    log(f"{drills} failover drills")
    done = failover_drills(directory, drills, scale.drill_acks_after)
    unavailable = [d.unavailable_ms for d in done]
    home = os.path.join(directory, "official-client")
    os.makedirs(home, exist_ok=True)
    log("official client sends, direct to the master and through a slave")
    hop = official_hop(load_plan(directory), scale.official_sends, home)
    official_drills = max(drills, scale.official_drills)
    log(f"{official_drills} failover drills under the official clients")
    official, slave_kills, lost = official_failover_drills(
        directory, official_drills, home, java_argv
    )
    slave_ms = [d.unavailable_ms for d in slave_kills]
    slave_java_ms = [d.java_ms for d in slave_kills if d.java_ms is not None]
    official_ms = [d.unavailable_ms for d in official]
    java_ms = [d.java_ms for d in official if d.java_ms is not None]
    java = {}
    if java_ms:
        java = {
            "official_java_client_failover_unavailable_ms_p50": round(
                statistics.median(java_ms), 1
            ),
            "official_java_client_failover_unavailable_ms_p99": percentile(java_ms, 0.99),
            "official_java_client_failover_unavailable_ms": java_ms,
        }
    if slave_java_ms:
        java["official_java_client_slave_kill_unavailable_ms_p50"] = round(
            statistics.median(slave_java_ms), 1
        )
        java["official_java_client_slave_kill_unavailable_ms_p99"] = percentile(slave_java_ms, 0.99)
    return {
        **java,
        "official_client_slave_kill_unavailable_ms_p50": round(statistics.median(slave_ms), 1),
        "official_client_slave_kill_unavailable_ms_p99": percentile(slave_ms, 0.99),
        "official_client_slave_kill_unavailable_ms": slave_ms,
        "official_client_failover_sends_ms": [d.sends_ms for d in official],
        "official_client_failover_receives_ms": [d.receives_ms for d in official],
        "official_client_failover_killed_raft_leader": [d.killed_raft_leader for d in official],
        "official_client_failover_unavailable_ms_p50": round(statistics.median(official_ms), 1),
        "official_client_failover_unavailable_ms_p99": percentile(official_ms, 0.99),
        "official_client_failover_unavailable_ms_max": max(official_ms),
        "official_client_failover_unavailable_ms": official_ms,
        "official_client_failover_drills": len(official_ms),
        "official_client_failover_client_on_master": [d.client_on_master for d in official],
        "official_client_failover_lost": lost,
        **hop,
        "sync_batch_send_msgs_per_s": batch["msgs_per_s"],
        "sync_batch_messages": batch["messages"],
        "sync_single_send_p50_us": round(single.p50_us),
        "sync_single_send_p99_us": round(single.p99_us),
        **{f"sync_single_cpu_us_per_send_{k}": v for k, v in single.cpu_us_per_send.items()},
        "sync_single_send_idle_readers_p50_us": round(beside_idle.p50_us),
        "sync_single_send_idle_readers_p99_us": round(beside_idle.p99_us),
        "sync_single_idle_readers_cpu_us_per_send_master": beside_idle.cpu_us_per_send["master"],
        "end_to_end_p50_us": round(e2e_p50),
        "end_to_end_p99_us": round(e2e_p99),
        "end_to_end_by_channel_p50_us": round(channel_e2e_p50),
        "end_to_end_by_channel_p99_us": round(channel_e2e_p99),
        **{
            f"end_to_end_by_channel_cpu_us_per_message_{role}": us
            for role, us in channel_e2e_cpu.items()
        },
        "grpc_sync_batch_send_msgs_per_s": grpc_batch["msgs_per_s"],
        "grpc_sync_single_send_p50_us": round(grpc_single.p50_us),
        "grpc_sync_single_send_p99_us": round(grpc_single.p99_us),
        "grpc_end_to_end_p50_us": round(grpc_e2e_p50),
        "grpc_end_to_end_p99_us": round(grpc_e2e_p99),
        "replication_lag_bytes_p99": batch["lag_p99"],
        "replication_lag_bytes_max": batch["lag_max"],
        "replication_lag_samples": batch["lag_samples"],
        "failover_unavailable_ms_p50": round(statistics.median(unavailable), 1),
        "failover_unavailable_ms_p99": percentile(unavailable, 0.99),
        "failover_unavailable_ms_max": max(unavailable),
        "failover_unavailable_ms": unavailable,
        "failover_drills": len(unavailable),
        "failover_killed_raft_leader": [d.killed_raft_leader for d in done],
        **{f"sync_{k}": v for k, v in batch.items() if k.startswith(("cpu_", "machine_"))},
    }


def run_async(directory: str, scale: Scale) -> dict:
    plan = start_cluster(directory, "ASYNC")
    create_topic(plan)
    log("ASYNC group up; batch phase")
    batch = measure_batch(plan, scale.batch_s)
    log("single sends")
    single = measure_single(plan, scale.singles)
    return {
        "async_single_send_p50_us": round(single.p50_us),
        "async_single_send_p99_us": round(single.p99_us),
        "async_batch_send_msgs_per_s": batch["msgs_per_s"],
        "async_batch_messages": batch["messages"],
        "async_replication_lag_bytes_p99": batch["lag_p99"],
        "async_replication_lag_bytes_max": batch["lag_max"],
        **{f"async_{k}": v for k, v in batch.items() if k.startswith(("cpu_", "machine_"))},
    }


def run(mode: str, drills: int | None, java_argv: list[str] | None = None) -> dict:
    scale = SCALES[mode]
    drills = scale.drills if drills is None else drills
    root = tempfile.mkdtemp(prefix="ferrymq-bench-cluster-")
    started = time.monotonic()
    log(f"the floors: {scale.singles} no-op replicated single sends, end to end")
    figures: dict = measure_floors(scale.singles)
    try:
        for name, phase in (
            ("sync", lambda d: run_sync(d, scale, drills, java_argv)),
            ("async", lambda d: run_async(d, scale)),
        ):
            directory = os.path.join(root, name)
            try:
                figures.update(phase(directory))
            finally:
                stop_cluster(directory)
                shutil.rmtree(directory, ignore_errors=True)  # bounds the disk used
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures.update(floor_ratios(figures))
    figures["mode"] = mode
    figures["batch_phase_s"] = scale.batch_s
    figures["in_flight_requests"] = IN_FLIGHT
    figures["messages_per_request"] = PER_REQUEST
    figures["seconds"] = round(time.monotonic() - started, 1)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    figures["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    return figures


def single_sends_only(count: int) -> dict:
    root = tempfile.mkdtemp(prefix="ferrymq-bench-cluster-")
    directory = os.path.join(root, "sync")
    figures = measure_floors(count)
    try:
        figures.update(run_single_sends(directory, count))
    finally:
        stop_cluster(directory)
        shutil.rmtree(root, ignore_errors=True)
    figures.update(floor_ratios(figures))
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    log(
        f"sync single p50 {figures['sync_single_send_p50_us']} us "
        f"({figures['sync_single_send_floor_ratio']}x its floor); CPU per send: master "
        f"{figures['sync_single_cpu_us_per_send_master']} us, slaves "
        f"{figures['sync_single_cpu_us_per_send_slaves']} us, client "
        f"{figures['sync_single_cpu_us_per_send_client']} us"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="no per-figure table on stderr")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="shorter phases, 3 drills (~90 s)")
    size.add_argument("--smoke", action="store_true", help="a few seconds a phase, 1 drill")
    size.add_argument(
        "--single-sends",
        type=int,
        metavar="N",
        help="only N single sends on a SYNC group, with CPU per send by process (~30 s)",
    )
    parser.add_argument("--drills", type=int, default=None, help="failover drills (10)")
    parser.add_argument(
        "--java-grpc-driver",
        default=os.environ.get("FERRYMQ_JAVA_GRPC_DRIVER", ""),
        help="the official Java 5.x client's driver, a JSON list (its command line; "
        "tests/compat/README.md): its load runs beside the Python client's in the drills",
    )
    args = parser.parse_args()
    java_argv = json.loads(args.java_grpc_driver) if args.java_grpc_driver else None
    if args.drills is not None and args.drills < 1:
        parser.error("--drills must be at least 1")

    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, through the cleanup
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    if args.single_sends is not None:
        if args.single_sends < 1:
            parser.error("--single-sends must be at least 1")
        print(json.dumps(single_sends_only(args.single_sends)), flush=True)
        return
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    figures = run(mode, args.drills, java_argv)
    if not args.json:
        for name, value in figures.items():
            log(f"{name:36} {value}")
    log(
        f"sync batch {figures['sync_batch_send_msgs_per_s']:,} msgs/s, async batch "
        f"{figures['async_batch_send_msgs_per_s']:,} msgs/s, sync single p50 "
        f"{figures['sync_single_send_p50_us']} us / p99 "
        f"{figures['sync_single_send_p99_us']} us ({figures['sync_single_send_floor_ratio']}x "
        f"its floor; gRPC "
        f"{figures['grpc_sync_single_send_p50_us']} us), end to end p50 "
        f"{figures['end_to_end_p50_us']} us ({figures['end_to_end_floor_ratio']}x its floor; "
        f"asked as the floor is {figures['end_to_end_by_channel_p50_us']} us, "
        f"{figures['end_to_end_by_channel_floor_ratio']}x; "
        f"gRPC {figures['grpc_end_to_end_p50_us']} us), "
        f"lag p99 "
        f"{figures['replication_lag_bytes_p99']:,} B, failover p50 "
        f"{figures['failover_unavailable_ms_p50']} ms / p99 "
        f"{figures['failover_unavailable_ms_p99']} ms ({figures['failover_drills']} drills), "
        f"official client failover p50 {figures['official_client_failover_unavailable_ms_p50']} "
        f"ms / p99 {figures['official_client_failover_unavailable_ms_p99']} ms, official send "
        f"p50 {figures['official_send_p50_us_direct']} us direct / "
        f"{figures['official_send_p50_us_via_slave']} us through a slave"
    )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
