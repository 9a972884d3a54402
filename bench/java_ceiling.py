"""What the official Java 4.x client allows here, and where one broker stands under it:
``python -m bench.java_ceiling --json [--quick | --smoke] [--rounds N] [--only T1,T2,...]``.

Issue 40 compares brokers through the official Java 4.x client (rocketmq-client 5.1.4, the
OpenMessaging Benchmark's RocketMQ driver), where one Apache RocketMQ broker sustained a
rate one ferrymq node did not. This measures that comparison with its floor, in one run:
``bench/java/PeerWorkloads.java``'s windowed send (``COUNT`` messages of 1 KiB, ``WINDOW``
asynchronous sends outstanding, the client's default settings, a JVM of its own each
time) against, in turn (each target first given one uncounted run of as many),

- ``noop``: a no-op 4.x broker, ``bench.grpc_ceiling``'s REMOTING_SERVER on uvloop (the
  node's remoting transport, answering each SEND_MESSAGE_V2 SUCCESS at once and every
  route with itself): what a broker on Python's remoting transport can reach through this
  client before it does anything;
- ``noop_replicated``: the same server copying each body to two no-op slaves and
  answering once both acknowledged: the same for a SYNC group;
- ``one_node``: one ferrymq node;
- ``sync_group``: a 3-node SYNC ferrymq group, the client given every node;
- ``apache``: one Apache RocketMQ 5.3.3 broker (ASYNC_MASTER, ASYNC_FLUSH, no slave) with
  its name server, the broker of the issue's figure; its name
  server's CPU counts as the server's, as a ferrymq node is its own name server.

Figures per target and round: ``<target>_windowed_send_msgs_per_s`` (the JVM's own clock
over the timed sends), and ``<target>_cpu_us_per_msg_server`` (the broker's, the relay's
or the master's, each with its helper processes: a node's routing host, Apache's name
server), ``_slaves`` (both, where there are) and ``_client`` (the JVM's whole
run: its start, warm-up and JIT compiler included, so an upper bound), each over the
messages sent. Then each target's median over the rounds and the ratios
``one_node_noop_ratio``, ``sync_group_noop_replicated_ratio`` and ``one_node_apache_ratio``
(each of medians of one run). Targets run in turn, alone, never side by side.

Prints a summary on stderr and one JSON object (last line of stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from bench import grpc_ceiling, load_driver, saturation
from bench.cluster import log
from bench.cpu import process_cpu_s
from bench.peers import jvm
from bench.peers.processes import ProcessRegistry
from bench.peers.rocketmq_apache import ARTIFACTS
from bench.peers.rocketmq_one import start_one_broker
from ferrymq.client import Admin
from ferrymq.launcher.polling import until
from ferrymq.launcher.processes import process_tree

WINDOW = 256
WARM_UP = 50  # PeerWorkloads.WARMUP: sent one at a time before the timed ones
QUEUES = 8
CLIENT_HEAP_MB = 512
SCALES = {"full": 100_000, "quick": 30_000, "smoke": 2_000}
TARGETS = ("noop", "noop_replicated", "one_node", "sync_group", "apache")


@dataclass
class Target:
    """A broker the client is pointed at: its name server address and the pids whose CPU
    counts as the server's and as its slaves'."""

    namesrv: str
    server: list[int]
    slaves: list[int]


def windowed_send(target: Target, topic: str, count: int, home: str) -> dict:
    """One JVM's windowed send to ``target``: msgs/s and CPU µs per message by role."""
    argv = load_driver.program("PeerWorkloads", CLIENT_HEAP_MB)
    argv[1:1] = [f"-Duser.home={home}"]
    arguments = [target.namesrv, "windowed_send", topic, f"{topic}-group", str(count)]
    before = target_cpu_s(target)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        argv + arguments + [str(WINDOW)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HOME": home},
    )
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = {role: cpu_s - before[role] for role, cpu_s in target_cpu_s(target).items()}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"windowed send to {target.namesrv}: {done.stderr.strip()[-600:]}")
    seconds = json.loads(lines[-1])["seconds"]
    spent["client"] = (after_children.ru_utime - children.ru_utime) + (
        after_children.ru_stime - children.ru_stime
    )
    sent = count + WARM_UP
    return {
        "msgs_per_s": round(count / seconds),
        **{f"cpu_us_per_msg_{role}": round(s / sent * 1e6, 1) for role, s in spent.items()},
    }


def target_cpu_s(target: Target) -> dict[str, float]:
    """CPU seconds so far of the server's processes and of the slaves'."""
    return {
        role: sum(map(process_cpu_s, pids))
        for role, pids in (("server", target.server), ("slaves", target.slaves))
    }


# ---- the targets ----------------------------------------------------------------------
@contextlib.contextmanager
def noop(replicated: bool) -> Iterator[Target]:
    """The no-op 4.x broker, alone or relaying to two no-op slaves (all on uvloop)."""
    if not replicated:
        with grpc_ceiling.served(grpc_ceiling.REMOTING_SERVER, "uvloop") as (port, pid):
            yield Target(f"127.0.0.1:{port}", [pid], [])
        return
    with grpc_ceiling.replicated_relay("python", "python") as (port, pid, slaves):
        yield Target(f"127.0.0.1:{port}", [pid], slaves)


@contextlib.contextmanager
def ferrymq(nodes: int, topics: list[str]) -> Iterator[Target]:
    """``nodes`` ferrymq nodes (SYNC replication) with ``topics`` made: the client is given
    every node, as a user's ``namesrvAddr`` lists them; the master's CPU is the server's."""
    root = tempfile.mkdtemp(prefix="ferrymq-bench-java-ceiling-")
    directory = os.path.join(root, "cluster")
    plan = None
    try:
        plan = saturation.start_cluster(directory, nodes)  # its SYNC settings and store
        with Admin(plan.nodes[0].grpc) as admin:
            for topic in topics:
                admin.create_topic(topic, QUEUES)
            master = until(lambda: master_id(admin), 30, "a master")
        # A node's processes: the broker's and its routing host's (its child).
        server = [p for n in plan.nodes if n.id == master for p in process_tree(n.pid)]
        slaves = [p for n in plan.nodes if n.id != master for p in process_tree(n.pid)]
        yield Target(plan.namesrv_addr, server, slaves)
    finally:
        if plan is not None:
            saturation.stop_cluster(directory, plan)  # SIGKILL for what cluster_down left
        shutil.rmtree(root, ignore_errors=True)


def master_id(admin: Admin) -> str:
    groups = admin.cluster_status().broker_groups
    return groups[0].master if groups else ""


@contextlib.contextmanager
def apache(topics: list[str]) -> Iterator[Target]:
    """One Apache RocketMQ broker and its name server (``bench.peers.rocketmq_one``),
    ``topics`` made through mqadmin; the name server's CPU counts as the server's."""
    java = jvm.find_java()
    lib = jvm.resolve("rocketmq", ARTIFACTS)  # bench.peers' jars (mqadmin among them)
    with ProcessRegistry("java-ceiling") as registry:
        root = registry.make_dir("rocketmq-one")
        broker = start_one_broker(registry, java, lib, root, {})
        for topic in topics:
            broker.create_topic(topic, QUEUES)
        yield Target(broker.namesrv, broker.pids, [])


# ---- a run ----------------------------------------------------------------------------
def measure(count: int, rounds: int, targets: list[str]) -> dict:
    """Each of ``targets`` ``rounds`` times in turn, each round a fresh topic."""
    figures: dict = {"count": count, "window": WINDOW, "rounds": rounds, "runs": {}}
    runs: dict[str, list[dict]] = {t: [] for t in targets}
    home = tempfile.mkdtemp(prefix="ferrymq-bench-java-home-")
    try:
        for name in targets:
            topics = [f"Ceiling{name.title().replace('_', '')}{r}" for r in range(rounds)]
            warm_up_topic = f"Ceiling{name.title().replace('_', '')}WarmUp"
            with started(name, [*topics, warm_up_topic]) as target:
                # Uncounted: a JVM broker's JIT warms over its first sends (Apache
                # RocketMQ's first 100,000 ran at ~3/4 of its third here, after a warm-up
                # of 30,000); every target gets the same.
                windowed_send(target, warm_up_topic, count, home)
                for topic in topics:
                    run = windowed_send(target, topic, count, home)
                    log(f"{name:>16}: {run}")
                    runs[name].append(run)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    figures["runs"] = runs
    for name, measured in runs.items():
        for key in measured[0]:
            value = statistics.median(run[key] for run in measured)
            prefix = f"{name}_windowed_send" if key == "msgs_per_s" else name
            figures[f"{prefix}_{key}"] = round(value, 1)
    figures.update(ratios(figures))
    return figures


@contextlib.contextmanager
def started(name: str, topics: list[str]) -> Iterator[Target]:
    if name in ("noop", "noop_replicated"):
        with noop(replicated=name == "noop_replicated") as target:
            yield target
    elif name in ("one_node", "sync_group"):
        with ferrymq(1 if name == "one_node" else 3, topics) as target:
            yield target
    else:
        with apache(topics) as target:
            yield target


RATIOS = {
    "one_node_noop_ratio": ("one_node", "noop"),
    "sync_group_noop_replicated_ratio": ("sync_group", "noop_replicated"),
    "one_node_apache_ratio": ("one_node", "apache"),
}


def ratios(figures: dict) -> dict:
    """Each broker's windowed send over its floor's (or the peer's), medians of one run."""
    found = {}
    for name, (measured, base) in RATIOS.items():
        top = figures.get(f"{measured}_windowed_send_msgs_per_s")
        bottom = figures.get(f"{base}_windowed_send_msgs_per_s")
        if top and bottom:
            found[name] = round(top / bottom, 2)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.java_ceiling", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help=f"{SCALES['quick']:,} a run")
    scale.add_argument("--smoke", action="store_true", help=f"{SCALES['smoke']:,} a run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per target (default 3)")
    parser.add_argument(
        "--only",
        default=",".join(TARGETS),
        help=f"targets to run, comma-separated (default: all of {','.join(TARGETS)})",
    )
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    started_at = time.monotonic()
    targets = [name for name in TARGETS if name in args.only.split(",")]
    if not targets:
        parser.error(f"--only names none of {', '.join(TARGETS)}")
    figures = measure(SCALES[mode], args.rounds, targets)
    figures["mode"] = mode
    figures["seconds"] = round(time.monotonic() - started_at, 1)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    figures["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    for key, value in figures.items():
        if key != "runs":
            print(f"{key}: {value}", file=sys.stderr)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
