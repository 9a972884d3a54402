"""Saturation: ``python -m bench.saturation --json [--quick] [--nodes 3|1] [--busy N]
[--soak-minutes M] [--rates R1,R2,...] [--peer apache|kafka] [--client java|sdk]``.

Offers a cluster an open-loop load that grows step by step until it cannot keep up, the
way the OpenMessaging Benchmark's RocketMQ driver offers it: the official Java client
(rocketmq-client 5.1.4, its 4.x API over remoting: ``bench/java/LoadDriver.java``), one
producer sending 1 KiB messages asynchronously at a fixed rate paced by the clock, one
push consumer. A step's figures: messages sent, acknowledged, errors by kind (the
broker's response code, else the client's exception), publish latency (from the moment
the pacing allowed the send) and end-to-end latency (born timestamp to the listener)
p50 / p99 / max, and the consumer's backlog at the step's end. The nodes' liveness
under each step: the heartbeats' round trip and the lease's age when renewed (p99 and
max, from ``ferrymq_heartbeat_round_trip_seconds`` and
``ferrymq_lease_age_at_renewal_seconds``), heartbeats routing did not commit, and every
master election (``electing`` in the nodes' logs: with no fault injected, each one is a
spurious failover).

The **sustainable rate** is the highest step that kept up: at least 99 % of its sends
acknowledged, no error but documented back-pressure (``BACK_PRESSURE``), a publish p99
under ``PUBLISH_P99_LIMIT_MS`` and the consumer's backlog under one second of the rate.
Every run of the driver (the ramp, the soak) begins with a warm-up step at
``WARM_UP_RATE`` (``warm_up_step`` in the figures), counted in no other figure: the JVM's
first seconds (class loading, the JIT) refused or delayed sends of whatever step came
first, and the ramp then reported 0 for a cluster that kept up with the steps after it.

``--busy N`` keeps N processes spinning on the CPU beside the cluster for the whole run
(a loaded host), each in a session of its own (``--busy-beside-client``: in the
benchmark's, with the load's client). ``--soak-minutes M`` then offers 80 % of the
sustainable rate for M minutes, in one-minute steps, and samples every node's anonymous
resident memory (RssAnon, its routing host's included) every ``MEMORY_SAMPLE_S``: its
growth from the first minute (which begins with the warm-up step) to the last is the
figure (flat is the goal; each minute's average beside it), with every error of the soak.

``--peer apache`` offers the same warm-up and steps, judged by the same rule, to one Apache
RocketMQ 5.3.3 broker with its name server (``bench.peers.rocketmq_one``: ASYNC_MASTER,
ASYNC_FLUSH, no slave), the broker of issue 40's OpenMessaging Benchmark figure, so that
its sustainable rate and one ferrymq node's (``--nodes 1``) are measured through one
client on one host; it has no liveness figures (they are ferrymq's metrics) and no soak.
``--client sdk`` offers ferrymq's steps through its own SDK instead
(``bench.sdk_load_driver``: ``Producer.send_async`` paced by the clock, a ``PullConsumer``
in a process of its own), ferrymq's fastest client as Kafka's Java client is Kafka's.
``--peer kafka`` offers them to Apache Kafka 4.1 (``bench.peers.kafka_kraft``: ``--nodes 1``
one KRaft node alone, ``--nodes 3`` three with replication factor 3 and
min.insync.replicas 2) through Kafka's own Java client with its default settings
(``bench/java/KafkaLoadDriver.java``: the same steps, pacing and events as ``LoadDriver``,
from ``LoadSteps.java``), the same rule judging them.

Prints a human summary on stderr and one JSON object (last line of stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bench import load_driver
from bench.cpu import process_cpu_s
from bench.peers import jvm
from bench.peers.kafka_kraft import ARTIFACTS as KAFKA_ARTIFACTS
from bench.peers.kafka_kraft import KafkaKraft
from bench.peers.processes import ProcessRegistry
from bench.peers.rocketmq_apache import ARTIFACTS, VERSION
from bench.peers.rocketmq_one import start_one_broker
from ferrymq.client import Admin
from ferrymq.launcher.cluster import (
    ClusterPlan,
    cluster_down,
    cluster_up,
    is_running,
    log_path,
)
from ferrymq.launcher.processes import process_tree

# Answers a loaded broker may give that the client retries by design (docs/guarantees.md,
# "Under load"): SYSTEM_BUSY (2) and FLOW_CONTROL (215) from the broker, and the client's
# own refusal to queue more async sends (RemotingTooMuchRequestException); through the
# SDK, SYSTEM_BUSY's gRPC name once the SDK's own retries are spent.
BACK_PRESSURE = frozenset(
    {"broker:2", "broker:215", "RemotingTooMuchRequestException", "code:TOO_MANY_REQUESTS"}
)
PUBLISH_P99_LIMIT_MS = 1000.0
# ferrymq's SDK as the load's client (``--client sdk``).
SDK_DRIVER = (sys.executable, "-m", "bench.sdk_load_driver")
# The warm-up step each run of the driver begins with: low enough for any cluster here.
WARM_UP_RATE = 500
MEMORY_SAMPLE_S = 10.0
SIZE = 1024
QUEUES = 8
# What a stored message takes besides its body, at most (its record's header and
# properties, a consume-queue entry, an index slot), and each replica's segments made
# ahead of its writes: ``disk_needed_bytes``.
STORED_OVERHEAD_BYTES = 512
SEGMENTS_AHEAD_BYTES = 1 << 30
STORE = {
    "commitlog_segment_bytes": 256 << 20,
    "consume_queue_entries_per_file": 300_000,
}


@dataclass(frozen=True)
class Scale:
    rates: tuple[int, ...]
    step_s: float
    warm_up_s: float


SCALES = {
    "full": Scale((2_000, 5_000, 10_000, 15_000, 20_000, 25_000, 30_000, 40_000), 60.0, 20.0),
    "quick": Scale((500, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 25_000, 30_000), 20.0, 10.0),
    "smoke": Scale((1_000, 3_000), 5.0, 2.0),
}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- the nodes' liveness -------------------------------------------------------------
HISTOGRAMS = ("ferrymq_heartbeat_round_trip_seconds", "ferrymq_lease_age_at_renewal_seconds")
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+|NaN|\+Inf)$")


def scrape(metrics_address: str) -> dict[str, dict[str, float]]:
    """Bucket counts (by ``le``) of the liveness histograms, and the failed heartbeats."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found: dict[str, dict[str, float]] = {name: {} for name in HISTOGRAMS}
    found["failed"] = {"": 0.0}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        for histogram in HISTOGRAMS:
            if name == f"{histogram}_bucket":
                le = re.search(r'le="([^"]+)"', labels).group(1)
                found[histogram][le] = float(value)
        if name == "ferrymq_heartbeats_failed_total":
            found["failed"][""] = float(value)
    return found


def quantile_of(before: dict[str, float], after: dict[str, float], q: float) -> float | None:
    """The bucket bound holding quantile ``q`` of what was observed between two scrapes
    (None: nothing observed); ``inf`` when it lies past the last bound."""
    bounds = sorted(after, key=lambda le: float(le))
    total = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)
    if total <= 0:
        return None
    for le in bounds:
        if after[le] - before.get(le, 0.0) >= q * total:
            return float(le)
    return float("inf")


@dataclass
class Liveness:
    """The liveness figures of every node over one stretch of time."""

    round_trip_p99_s: dict[str, float | None] = field(default_factory=dict)
    round_trip_max_bucket_s: dict[str, float | None] = field(default_factory=dict)
    lease_age_p99_s: dict[str, float | None] = field(default_factory=dict)
    lease_age_max_bucket_s: dict[str, float | None] = field(default_factory=dict)
    failed_heartbeats: dict[str, int] = field(default_factory=dict)


def liveness_between(plan: ClusterPlan, before: dict, after: dict) -> Liveness:
    figures = Liveness()
    for node in plan.nodes:
        b, a = before.get(node.id), after.get(node.id)
        if b is None or a is None:
            continue
        trip, age = HISTOGRAMS
        figures.round_trip_p99_s[node.id] = quantile_of(b[trip], a[trip], 0.99)
        figures.round_trip_max_bucket_s[node.id] = quantile_of(b[trip], a[trip], 1.0)
        figures.lease_age_p99_s[node.id] = quantile_of(b[age], a[age], 0.99)
        figures.lease_age_max_bucket_s[node.id] = quantile_of(b[age], a[age], 1.0)
        figures.failed_heartbeats[node.id] = int(a["failed"][""] - b["failed"][""])
    return figures


def scrape_all(plan: ClusterPlan) -> dict[str, dict]:
    found = {}
    for node in plan.nodes:
        with contextlib.suppress(OSError):
            found[node.id] = scrape(node.metrics)
    return found


def elections(plan: ClusterPlan) -> list[str]:
    """Every election the controllers logged."""
    found = []
    for node in plan.nodes:
        with contextlib.suppress(OSError), open(log_path(plan, node), errors="replace") as text:
            found += [line.strip() for line in text if "electing " in line]
    return found


# ---- the host ------------------------------------------------------------------------
def busy_processes(count: int, beside_client: bool = False) -> list[subprocess.Popen]:
    """``count`` processes spinning on the CPU (a loaded host), each in a session of its
    own, as independent programs are; ``beside_client``: in the benchmark's session, which
    the load's client shares, so that they share its scheduling group (Linux autogroups):
    the client starves and sends in bursts."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], start_new_session=not beside_client
        )
        for _ in range(count)
    ]


def anonymous_bytes(pid: int) -> int:
    """The process's own resident memory (``RssAnon``: heap, buffers), without the pages
    of files it maps: the CommitLog's mapped segments count in VmRSS as they are written,
    so VmRSS grows with the log, not with what the node holds."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def node_anonymous_bytes(pid: int) -> int:
    """A node's own memory: its process's and its routing host's (its child)."""
    total = 0
    for each in process_tree(pid):
        with contextlib.suppress(OSError):
            total += anonymous_bytes(each)
    return total


class MemorySampler:
    """Every node's anonymous resident memory every ``MEMORY_SAMPLE_S`` (a thread)."""

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = {}
            for node in self.plan.nodes:
                with contextlib.suppress(OSError):
                    sample[node.id] = node_anonymous_bytes(node.pid)
            self.samples.append((time.monotonic(), sample))
            self._stop.wait(MEMORY_SAMPLE_S)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# ---- the CPU each side spends -----------------------------------------------------------
class CpuMeter:
    """The CPU seconds a changing set of processes spends between two readings: each
    process's use since the last reading (a new one's since it started). A process gone
    since the last reading takes its last interval's use with it."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self._last = self._read()

    def _read(self) -> dict[int, float]:
        found = {}
        for pid in self._pids():
            with contextlib.suppress(OSError, ValueError):
                found[pid] = process_cpu_s(pid)
        return found

    def spent_s(self) -> float:
        now = self._read()
        spent = sum(cpu - self._last.get(pid, 0.0) for pid, cpu in now.items())
        self._last = now
        return spent


def tree_of(pids: list[int]) -> list[int]:
    """The processes ``pids`` and their descendants (a node's routing host, a driver's
    consumer)."""
    return [each for pid in pids for each in process_tree(pid)]


def cpu_figures(server_s: float, client_s: float, sent: int, seconds: float) -> dict:
    """A step's CPU: microseconds per message sent and cores, of the brokers' processes
    and of the load's client."""
    return {
        "cpu_us_per_msg": {
            "server": round(server_s / max(sent, 1) * 1e6, 1),
            "client": round(client_s / max(sent, 1) * 1e6, 1),
        },
        "cpu_cores": {
            "server": round(server_s / max(seconds, 1e-9), 2),
            "client": round(client_s / max(seconds, 1e-9), 2),
        },
    }


# ---- the load ------------------------------------------------------------------------
@dataclass
class Offered:
    """What one run of the load driver measured: its warm-up step apart (None when the
    driver ended before it), then one figure dict per step asked for."""

    warm_up: dict | None
    steps: list[dict]


def offer(
    plan: ClusterPlan,
    argv: tuple[str, ...],
    steps: list[tuple[float, float]],
    topic: str,
    warm_up_s: float,
    namesrv: str = "",
    servers: Callable[[], list[int]] | None = None,
) -> Offered:
    """Run the load driver through a warm-up step (``WARM_UP_RATE`` for ``warm_up_s``),
    then ``steps`` ((rate, seconds) each); scrape the nodes' liveness at every step's
    start and end, and count the CPU of the brokers' processes (``servers``, else the
    nodes of ``plan`` with their children) and of the driver's. The driver is given
    ``namesrv``, else every node of ``plan``."""
    arguments = [
        namesrv or plan.namesrv_addr,
        topic,
        f"{topic}-load",
        str(SIZE),
        "15",  # seconds for the consumer to drain after the last step
        ",".join(f"{rate}:{seconds}" for rate, seconds in [(WARM_UP_RATE, warm_up_s), *steps]),
    ]
    home = tempfile.mkdtemp(prefix="ferrymq-load-")
    env = {**os.environ, "ROCKETMQ_HOME": home, "HOME": home}
    process = subprocess.Popen(
        [*argv, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    figures: list[dict] = []
    before = scrape_all(plan)
    elections_before = len(elections(plan))
    server_cpu = CpuMeter(servers or (lambda: tree_of([node.pid for node in plan.nodes])))
    client_cpu = CpuMeter(lambda: process_tree(process.pid))
    step_began = time.monotonic()
    try:
        for line in process.stdout:
            event = json.loads(line)
            if event.get("event") == "step":
                now = time.monotonic()
                cpu = cpu_figures(
                    server_cpu.spent_s(), client_cpu.spent_s(), event["sent"], now - step_began
                )
                event.update(cpu)
                step_began = now
                after = scrape_all(plan)
                event["liveness"] = liveness_between(plan, before, after).__dict__
                now_elections = elections(plan)
                event["elections"] = now_elections[elections_before:]
                elections_before = len(now_elections)
                before = after
                figures.append(event)
                log(("warm-up: " if len(figures) == 1 else "") + summary_of(event))
            elif event.get("event") in ("drained", "step_failed"):
                log(json.dumps(event))
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(60)
        if process.poll() is None:
            process.kill()
        shutil.rmtree(home, ignore_errors=True)
    return Offered(figures[0] if figures else None, figures[1:])


def other_errors(step: dict) -> dict[str, int]:
    return {k: v for k, v in step["errors"].items() if k not in BACK_PRESSURE}


def kept_up(step: dict) -> bool:
    return (
        step["acked"] >= 0.99 * step["sent"]
        and not other_errors(step)
        and step["publish_ms"]["p99"] < PUBLISH_P99_LIMIT_MS
        and step["backlog"] < step["rate"]
    )


def summary_of(step: dict) -> str:
    live = step["liveness"]
    worst_age = max((v or 0.0 for v in live["lease_age_max_bucket_s"].values()), default=0.0)
    return (
        f"{step['rate']:>8,.0f} msgs/s offered: acked {step['acked']:,} of {step['sent']:,}, "
        f"errors {step['errors']}, publish p50/p99 {step['publish_ms']['p50']}/"
        f"{step['publish_ms']['p99']} ms, e2e p50/p99 {step['end_to_end_ms']['p50']}/"
        f"{step['end_to_end_ms']['p99']} ms, backlog {step['backlog']:,}, lease age max "
        f"<= {worst_age} s, elections {len(step['elections'])}, CPU µs/msg server/client "
        f"{step['cpu_us_per_msg']['server']}/{step['cpu_us_per_msg']['client']}"
        f"{'' if kept_up(step) else '  (did not keep up)'}"
    )


# ---- a run ---------------------------------------------------------------------------
def start_cluster(directory: str, nodes: int) -> ClusterPlan:
    settings = {"replication": {"mode": "SYNC"}, "store": dict(STORE)}
    return cluster_up(directory, nodes=nodes, auto_ports=True, settings=settings, timeout_s=120)


def stop_cluster(directory: str, plan: ClusterPlan) -> None:
    try:
        cluster_down(directory, timeout_s=20)
    except Exception as error:  # the kill below is the fallback
        log(f"cluster_down failed ({error}); killing the nodes")
    for node in plan.nodes:
        if is_running(node, plan):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)


def sustainable_rate(steps: list[dict]) -> float:
    """The highest rate of the steps kept up with, each step below it kept up with too."""
    sustainable = 0.0
    for step in steps:
        if not kept_up(step):
            break
        sustainable = step["rate"]
    return sustainable


def ramp(
    plan: ClusterPlan,
    argv: tuple[str, ...],
    scale: Scale,
    namesrv: str = "",
    servers: Callable[[], list[int]] | None = None,
) -> dict:
    steps = [(rate, scale.step_s) for rate in scale.rates]
    offered = offer(plan, argv, steps, "saturation", scale.warm_up_s, namesrv, servers)
    return {
        "warm_up_step": offered.warm_up,
        "steps": offered.steps,
        "sustainable_msgs_per_s": sustainable_rate(offered.steps),
    }


def soak(
    plan: ClusterPlan,
    argv: tuple[str, ...],
    rate: float,
    minutes: int,
    warm_up_s: float,
    address: str = "",
) -> dict:
    with MemorySampler(plan) as memory:
        offered = offer(plan, argv, [(rate, 60.0)] * minutes, "soak", warm_up_s, address)
    steps = offered.steps
    per_node: dict[str, list[int]] = {}
    for _, sample in memory.samples:
        for node, rss in sample.items():
            per_node.setdefault(node, []).append(rss)
    per_minute = max(1, int(60 / MEMORY_SAMPLE_S))
    growth = {
        node: (
            sum(values[-per_minute:]) // len(values[-per_minute:])
            - sum(values[:per_minute]) // len(values[:per_minute])
        )
        for node, values in per_node.items()
        if values
    }
    errors: dict[str, int] = {}
    for step in steps:
        for kind, count in step["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    return {
        "soak_rate_msgs_per_s": rate,
        "soak_warm_up_step": offered.warm_up,
        "soak_minutes": minutes,
        "soak_steps": steps,
        "soak_errors": errors,
        "soak_sent": sum(s["sent"] for s in steps),
        "soak_acked": sum(s["acked"] for s in steps),
        "soak_elections": [e for s in steps for e in s["elections"]],
        "soak_anon_first_minute_bytes": {
            n: sum(v[:per_minute]) // len(v[:per_minute]) for n, v in per_node.items() if v
        },
        "soak_anon_growth_bytes": growth,
        "soak_anon_max_bytes": {n: max(v) for n, v in per_node.items() if v},
        # Each minute's average: growth that levels off (caches filling) is told from a leak.
        "soak_anon_per_minute_bytes": {
            n: [
                sum(v[i : i + per_minute]) // len(v[i : i + per_minute])
                for i in range(0, len(v), per_minute)
            ]
            for n, v in per_node.items()
            if v
        },
    }


def run(
    mode: str,
    nodes: int,
    busy: int,
    soak_minutes: int,
    soak_rate: float | None,
    logs_to: str | None = None,
    busy_beside_client: bool = False,
    rates: tuple[int, ...] = (),
    client: str = "java",
) -> dict:
    """The ramp (and the soak) against ferrymq nodes, through the official Java client
    (``client`` "java") or ferrymq's SDK ("sdk": ``bench.sdk_load_driver``)."""
    scale = scale_of(mode, rates)
    soak_rate_bound = soak_rate or 0.8 * max(scale.rates, default=0)
    check_free_disk(disk_needed_bytes(scale, nodes, soak_rate_bound * soak_minutes * 60))
    argv = tuple(load_driver.argv()) if client == "java" else SDK_DRIVER
    root = tempfile.mkdtemp(prefix="ferrymq-bench-saturation-")
    directory = os.path.join(root, "cluster")
    spinners = busy_processes(busy, busy_beside_client)
    started = time.monotonic()
    figures = {"peer": "ferrymq", "nodes": nodes, "client": client}
    figures.update(load_figures(mode, busy, busy_beside_client))
    plan = None
    try:
        plan = start_cluster(directory, nodes)
        with Admin(plan.nodes[0].grpc) as admin:
            for topic in ("saturation", "soak"):
                admin.create_topic(topic, QUEUES)
        # The SDK is given the nodes' gRPC addresses; the Java client, their name server.
        address = ",".join(node.grpc for node in plan.nodes) if client == "sdk" else ""
        if soak_rate is None:
            figures.update(ramp(plan, argv, scale, address))
        if soak_minutes:
            rate = soak_rate or 0.8 * figures["sustainable_msgs_per_s"]
            if rate > 0:
                figures.update(soak(plan, argv, rate, soak_minutes, scale.warm_up_s, address))
    finally:
        for spinner in spinners:
            spinner.kill()
        if plan is not None:
            stop_cluster(directory, plan)
        if logs_to:  # the nodes' logs, for a post-mortem of what a step did to them
            os.makedirs(logs_to, exist_ok=True)
            for name in os.listdir(directory):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(directory, name), logs_to)
        shutil.rmtree(root, ignore_errors=True)
    return {**figures, **host_figures(started)}


# (the registry its processes go in, the run's figures to add to) -> (the load driver's
# command, the address it is given).
PeerStart = Callable[[ProcessRegistry, dict], tuple[tuple[str, ...], str]]


def run_apache(
    mode: str,
    busy: int,
    busy_beside_client: bool = False,
    rates: tuple[int, ...] = (),
    send_queue_wait_ms: int | None = None,
) -> dict:
    """The ramp against one Apache RocketMQ broker with its name server
    (``bench.peers.rocketmq_one``): the same driver, steps and rule, the peer of issue 40's
    figure. ``send_queue_wait_ms``: the broker's ``waitTimeMillsInSendQueue`` (how long a
    send may wait in its queue before it is refused as busy), else ``rocketmq_one``'s."""

    def start(registry: ProcessRegistry, figures: dict) -> tuple[tuple[str, ...], str]:
        lib = jvm.resolve("rocketmq", ARTIFACTS)  # bench.peers' jars (mqadmin among them)
        settings = {}
        if send_queue_wait_ms is not None:
            settings["waitTimeMillsInSendQueue"] = str(send_queue_wait_ms)
            figures["apache_send_queue_wait_ms"] = send_queue_wait_ms
        root = registry.make_dir("rocketmq-one")
        broker = start_one_broker(registry, jvm.find_java(), lib, root, settings)
        broker.create_topic("saturation", QUEUES)
        figures["apache_version"] = VERSION
        return tuple(load_driver.argv()), broker.namesrv

    return run_peer("apache", 1, mode, busy, busy_beside_client, rates, start)


def run_kafka(
    mode: str,
    nodes: int,
    busy: int,
    busy_beside_client: bool = False,
    rates: tuple[int, ...] = (),
) -> dict:
    """The ramp against Apache Kafka (``bench.peers.kafka_kraft``: KRaft nodes, each broker
    and controller; ``nodes`` 1 is one alone, 3 a group with replication factor 3 and
    min.insync.replicas 2) through Kafka's own Java client (``KafkaLoadDriver``: the same
    steps, pacing and events, the client's default settings), judged by the same rule."""

    def start(registry: ProcessRegistry, figures: dict) -> tuple[tuple[str, ...], str]:
        kafka = KafkaKraft(nodes)
        kafka.start(registry)
        kafka.create_topic("saturation", QUEUES)
        figures["kafka_version"] = KAFKA_ARTIFACTS[0].version
        figures["kafka_client"] = load_driver.KAFKA_CLIENT.coordinate
        return tuple(load_driver.kafka_argv()), kafka.bootstrap

    return run_peer("kafka", nodes, mode, busy, busy_beside_client, rates, start)


def run_peer(
    peer: str,
    nodes: int,
    mode: str,
    busy: int,
    busy_beside_client: bool,
    rates: tuple[int, ...],
    start: PeerStart,
) -> dict:
    """The ramp against a peer ``start`` runs in a process registry (gone with the run). No
    liveness figures (they are ferrymq's metrics) and no soak."""
    scale = scale_of(mode, rates)
    check_free_disk(disk_needed_bytes(scale, nodes))
    spinners = busy_processes(busy, busy_beside_client)
    started = time.monotonic()
    figures = {"peer": peer, "nodes": nodes, **load_figures(mode, busy, busy_beside_client)}
    try:
        with ProcessRegistry("saturation") as registry:
            argv, address = start(registry, figures)
            no_nodes = ClusterPlan(registry.make_dir("plan"), "", (), {})
            servers = [started.pid for started in registry.started]
            figures.update(ramp(no_nodes, argv, scale, address, lambda: tree_of(servers)))
    finally:
        for spinner in spinners:
            spinner.kill()
    return {**figures, **host_figures(started)}


def disk_needed_bytes(scale: Scale, replicas: int, soak_messages: float = 0) -> int:
    """At most what a run writes: every message it offers (the warm-up, each step, the
    soak) stored on each of ``replicas``, with each replica's segments made ahead."""
    offered = WARM_UP_RATE * scale.warm_up_s + sum(rate * scale.step_s for rate in scale.rates)
    offered += soak_messages
    stored = offered * (SIZE + STORED_OVERHEAD_BYTES) * replicas
    return int(stored) + replicas * SEGMENTS_AHEAD_BYTES


def check_free_disk(needed: int, directory: str | None = None, free: int | None = None) -> None:
    """Refuse a run that may fill the disk under ``directory`` (the temporary one): its
    brokers would answer DISK_FULL, and the steps after that measure a full disk. (An
    80,000 msgs/s step did, on a disk filled by earlier runs' leftovers.)"""
    directory = directory or tempfile.gettempdir()
    free = shutil.disk_usage(directory).free if free is None else free
    if free < needed:
        raise SystemExit(
            f"bench.saturation: this run may write {needed / 2**30:.1f} GiB under {directory}, "
            f"which has {free / 2**30:.1f} GiB free: free space there, or offer fewer or "
            "lower steps (--rates)"
        )


def scale_of(mode: str, rates: tuple[int, ...]) -> Scale:
    scale = SCALES[mode]
    return replace(scale, rates=rates) if rates else scale


def load_figures(mode: str, busy: int, busy_beside_client: bool) -> dict:
    figures: dict = {"mode": mode, "busy_processes": busy}
    if busy:
        figures["busy_sessions"] = "the client's" if busy_beside_client else "their own"
    return figures


def host_figures(started: float) -> dict:
    return {
        "seconds": round(time.monotonic() - started, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="20 s steps up to 30,000 msgs/s")
    size.add_argument("--smoke", action="store_true", help="two 5 s steps")
    parser.add_argument("--nodes", type=int, default=3, choices=(1, 3))
    parser.add_argument(
        "--peer",
        default="ferrymq",
        choices=("ferrymq", "apache", "kafka"),
        help="apache: one Apache RocketMQ broker and its name server instead of ferrymq "
        "nodes; kafka: --nodes Kafka KRaft nodes, through Kafka's Java client (--logs and "
        "the soak are ferrymq's)",
    )
    parser.add_argument(
        "--apache-send-queue-wait-ms",
        type=int,
        default=None,
        help="--peer apache: the broker's waitTimeMillsInSendQueue (200 as shipped; 3000 "
        "by default here, as bench.peers runs it)",
    )
    parser.add_argument(
        "--client",
        default="java",
        choices=("java", "sdk"),
        help="ferrymq's load through the official Java 4.x client (as the Apache broker's) "
        "or ferrymq's SDK (its fastest, as Kafka's is its Java client)",
    )
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside it")
    parser.add_argument(
        "--busy-beside-client",
        action="store_true",
        help="the spinning processes share the client's session (scheduling group)",
    )
    parser.add_argument("--soak-minutes", type=int, default=0)
    parser.add_argument(
        "--soak-rate", type=float, default=None, help="skip the ramp; soak at this rate"
    )
    parser.add_argument("--logs", default=None, help="copy the nodes' logs to this directory")
    parser.add_argument(
        "--rates",
        default="",
        help="offered msgs/s of each step, comma-separated, in place of the mode's "
        "(its step length kept): finer steps near the sustainable rate",
    )
    args = parser.parse_args()
    rates = tuple(int(rate) for rate in args.rates.split(",") if rate.strip())

    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, through the cleanup
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    if args.peer != "ferrymq" and (args.soak_minutes or args.soak_rate is not None):
        parser.error(f"--peer {args.peer} runs the ramp only (no soak)")
    if args.peer != "ferrymq" and args.client != "java":
        parser.error(f"--peer {args.peer} is offered the load through its Java client")
    if args.peer == "apache":
        figures = run_apache(
            mode, args.busy, args.busy_beside_client, rates, args.apache_send_queue_wait_ms
        )
    elif args.peer == "kafka":
        figures = run_kafka(mode, args.nodes, args.busy, args.busy_beside_client, rates)
    else:
        figures = run(
            mode,
            args.nodes,
            args.busy,
            args.soak_minutes,
            args.soak_rate,
            args.logs,
            args.busy_beside_client,
            rates,
            args.client,
        )
    if "sustainable_msgs_per_s" in figures:
        log(f"sustainable: {figures['sustainable_msgs_per_s']:,.0f} msgs/s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
