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
- every SYNC figure above is the SDK on the remoting port (its default); the same
  measured with ``transport="grpc"`` is beside it as ``grpc_sync_single_send_p50_us``,
  ``grpc_sync_batch_send_msgs_per_s``, ``grpc_end_to_end_p50_us`` (and their p99s);
- ``replication_lag_bytes_p99`` (and ``_max``): the master's
  ``rocketmq_broker_commitlog_diff{slave=...}``, scraped from its metrics port every
  ``LAG_SAMPLE_INTERVAL_S`` during the SYNC batch phase, one sample per slave and scrape
  (``async_replication_lag_bytes_p99`` the same for the ASYNC phase);
- ``failover_unavailable_ms_p50`` / ``_p99`` / ``_max`` and ``failover_unavailable_ms``
  (every drill): on the SYNC group, a producer sends in a loop through all three
  addresses; the master is killed with SIGKILL; the figure is the time from the kill to
  the first acknowledged send that the dead master cannot have answered. The killed node
  is restarted and the next drill waits until all three are in sync again.
  ``failover_killed_raft_leader`` says for each drill whether the master killed was also
  the routing Raft leader (then routing must elect a leader before it can elect a master);
- ``{sync,async}_cpu_us_per_msg_{master,slaves,client,others}`` and ``_machine_busy_
  fraction``: CPU seconds (``/proc``) spent during each batch phase per message sent, by
  the master, the two slaves together, this client and everything else on the machine
  (other users), and how busy the machine's cores were: where the time went.

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

from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.launcher.cluster import (
    ClusterPlan,
    NodePlan,
    cluster_down,
    cluster_up,
    is_running,
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
STAMP = struct.Struct(">q")  # the body's first 8 bytes: monotonic_ns() at the send
QUEUES = 8
PER_REQUEST = 128
IN_FLIGHT = 16
LAG_SAMPLE_INTERVAL_S = 0.1
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


SCALES = {
    "full": Scale(batch_s=20.0, singles=5000, drills=10, drill_acks_after=500),
    "quick": Scale(batch_s=6.0, singles=1500, drills=3, drill_acks_after=200),
    "smoke": Scale(batch_s=2.0, singles=200, drills=1, drill_acks_after=50),
}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# ---- cluster -------------------------------------------------------------------------
def start_cluster(directory: str, mode: str) -> ClusterPlan:
    settings = {"replication": {"mode": mode}, "store": dict(STORE)}
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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all threads, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / CLOCK_TICKS, sum(ticks) / CLOCK_TICKS


class CpuMeter:
    """CPU spent by the master, the slaves and this client (the benchmark) between enter
    and exit, and how busy the whole machine was (other users' work included)."""

    def __init__(self, plan: ClusterPlan, master: NodePlan) -> None:
        self.pids = {"master": [master.pid], "slaves": [n.pid for n in plan.nodes if n != master]}
        self.pids["client"] = [os.getpid()]
        self.spent: dict[str, float] = {}

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


# ---- replication lag ------------------------------------------------------------------
def scrape_lag(metrics_address: str) -> list[int]:
    """Every ``rocketmq_broker_commitlog_diff`` sample of one scrape (one per slave)."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=2) as answer:
        text = answer.read().decode()
    lags = []
    for line in text.splitlines():
        if line.startswith("rocketmq_broker_commitlog_diff{"):
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
    with LagSampler(master.metrics) as sampler, CpuMeter(plan, master) as cpu:
        sent, took = asyncio.run(batch_phase(access, seconds, transport))
    figures = {"msgs_per_s": round(sent / took), "messages": sent}
    # Where the cores went: CPU µs per message sent, by process (the slaves summed).
    for role in ("master", "slaves", "client", "others"):
        figures[f"cpu_us_per_msg_{role}"] = round(cpu.spent[role] / sent * 1e6, 1)
    figures["machine_busy_fraction"] = round(cpu.spent["machine_busy_fraction"], 2)
    if sampler.samples:
        figures["lag_p99"] = round(percentile(sampler.samples, 0.99))
        figures["lag_max"] = max(sampler.samples)
        figures["lag_samples"] = len(sampler.samples)
    else:
        figures["lag_p99"] = figures["lag_max"] = figures["lag_samples"] = 0
    return figures


def measure_single(
    plan: ClusterPlan, count: int, transport: str = "remoting"
) -> tuple[float, float]:
    access = ",".join(n.grpc for n in plan.nodes)
    took = []
    with Producer(access, transport=transport) as producer:
        for _ in range(50):  # warm up
            producer.send(Message(TOPIC, BODY))
        for _ in range(count):
            message = Message(TOPIC, BODY)
            started = time.perf_counter()
            producer.send(message)
            took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6, percentile(took, 0.99) * 1e6


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
    os.kill(master.pid, signal.SIGKILL)
    killed_at = time.monotonic()
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


# ---- the run --------------------------------------------------------------------------
def measure_end_to_end(plan: ClusterPlan, count: int, transport: str) -> tuple[float, float]:
    """Send one stamped message at a time; a long-polling consumer thread reports its age
    on arrival. (p50, p99) in µs."""
    access = ",".join(n.grpc for n in plan.nodes)
    arrived: list[float] = []
    got = threading.Condition()
    stop = threading.Event()
    ready = threading.Event()
    failures: list[BaseException] = []

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
                        with got:
                            arrived.append(age)
                            got.notify()
        except BaseException as error:
            failures.append(error)
            with got:
                got.notify()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    warmup = 50
    try:
        if not ready.wait(30):
            raise RuntimeError(f"the end-to-end consumer did not start: {failures}")
        with Producer(access, transport=transport) as producer:
            for i in range(warmup + count):
                body = STAMP.pack(time.monotonic_ns()) + BODY[STAMP.size :]
                producer.send(Message(E2E_TOPIC, body))
                with got:
                    if not got.wait_for(lambda i=i: len(arrived) > i or failures, 10):
                        raise RuntimeError("the end-to-end consumer timed out")
                if failures:
                    raise RuntimeError(f"end-to-end consumer: {failures[0]}")
    finally:
        stop.set()
        consumer.join(10)
    took = arrived[warmup:]
    return statistics.median(took) * 1e6, percentile(took, 0.99) * 1e6


def create_topic(plan: ClusterPlan) -> None:
    with Admin(plan.nodes[0].grpc) as admin:
        admin.create_topic(TOPIC, QUEUES)
        admin.create_topic(E2E_TOPIC, 1)
        admin.create_group(E2E_GROUP)


def run_sync(directory: str, scale: Scale, drills: int) -> dict:
    plan = start_cluster(directory, "SYNC")
    create_topic(plan)
    log(f"SYNC group up ({', '.join(n.grpc for n in plan.nodes)}); batch phase")
    batch = measure_batch(plan, scale.batch_s)
    log("batch phase on gRPC")
    grpc_batch = measure_batch(plan, scale.batch_s, "grpc")
    log("single sends, remoting then gRPC")
    p50, p99 = measure_single(plan, scale.singles)
    grpc_p50, grpc_p99 = measure_single(plan, scale.singles, "grpc")
    log("end to end, remoting then gRPC")
    e2e_p50, e2e_p99 = measure_end_to_end(plan, scale.singles // 3, "remoting")
    grpc_e2e_p50, grpc_e2e_p99 = measure_end_to_end(plan, scale.singles // 3, "grpc")
    log(f"{drills} failover drills")
    done = failover_drills(directory, drills, scale.drill_acks_after)
    unavailable = [d.unavailable_ms for d in done]
    return {
        "sync_batch_send_msgs_per_s": batch["msgs_per_s"],
        "sync_batch_messages": batch["messages"],
        "sync_single_send_p50_us": round(p50),
        "sync_single_send_p99_us": round(p99),
        "end_to_end_p50_us": round(e2e_p50),
        "end_to_end_p99_us": round(e2e_p99),
        "grpc_sync_batch_send_msgs_per_s": grpc_batch["msgs_per_s"],
        "grpc_sync_single_send_p50_us": round(grpc_p50),
        "grpc_sync_single_send_p99_us": round(grpc_p99),
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
    p50, p99 = measure_single(plan, scale.singles)
    return {
        "async_single_send_p50_us": round(p50),
        "async_single_send_p99_us": round(p99),
        "async_batch_send_msgs_per_s": batch["msgs_per_s"],
        "async_batch_messages": batch["messages"],
        "async_replication_lag_bytes_p99": batch["lag_p99"],
        "async_replication_lag_bytes_max": batch["lag_max"],
        **{f"async_{k}": v for k, v in batch.items() if k.startswith(("cpu_", "machine_"))},
    }


def run(mode: str, drills: int | None) -> dict:
    scale = SCALES[mode]
    drills = scale.drills if drills is None else drills
    root = tempfile.mkdtemp(prefix="ferrymq-bench-cluster-")
    started = time.monotonic()
    figures: dict = {}
    try:
        for name, phase in (
            ("sync", lambda d: run_sync(d, scale, drills)),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="no per-figure table on stderr")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="shorter phases, 3 drills (~90 s)")
    size.add_argument("--smoke", action="store_true", help="a few seconds a phase, 1 drill")
    parser.add_argument("--drills", type=int, default=None, help="failover drills (10)")
    args = parser.parse_args()
    if args.drills is not None and args.drills < 1:
        parser.error("--drills must be at least 1")

    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, through the cleanup
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    figures = run(mode, args.drills)
    if not args.json:
        for name, value in figures.items():
            log(f"{name:36} {value}")
    log(
        f"sync batch {figures['sync_batch_send_msgs_per_s']:,} msgs/s, async batch "
        f"{figures['async_batch_send_msgs_per_s']:,} msgs/s, sync single p50 "
        f"{figures['sync_single_send_p50_us']} us / p99 "
        f"{figures['sync_single_send_p99_us']} us (gRPC "
        f"{figures['grpc_sync_single_send_p50_us']} us), end to end p50 "
        f"{figures['end_to_end_p50_us']} us (gRPC {figures['grpc_end_to_end_p50_us']} us), "
        f"lag p99 "
        f"{figures['replication_lag_bytes_p99']:,} B, failover p50 "
        f"{figures['failover_unavailable_ms_p50']} ms / p99 "
        f"{figures['failover_unavailable_ms_p99']} ms ({figures['failover_drills']} drills)"
    )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
