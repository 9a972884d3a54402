"""One chaos run: start a 3-node cluster in the mode asked for, run the workload, inject
faults in rotation with quiet periods between them, heal, drain every replica, check, and
write report.json, summary.txt and timeline.png into the run's directory.

``ferrymq chaos run --mode sync-async-flush --faults kill,pause --duration 5m``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time

from chaos import checker, nemesis, report, workload
from chaos import network as chaos_network
from chaos import overload as chaos_overload
from chaos.elections import elections_in_logs, judged
from chaos.history import History
from ferrymq.client import Admin, FerryError
from ferrymq.launcher.cluster import ClusterError, cluster_down, cluster_up, is_running, wait_ready
from store import sync_ledger

MODES = ("sync-sync-flush", "sync-async-flush", "async-sync-flush", "async-async-flush")
# Small files: every node reserves its segments on the one shared disk.
SMALL_STORE = {
    "commitlog_segment_bytes": 8 << 20,
    "index_slot_count": 10_007,
    "index_entry_count": 40_000,
    "consume_queue_entries_per_file": 10_000,
    # A run's log holds ~100 MB: with a window this small, its readers (consumers, a slave
    # catching up after a partition) read ranges the page cache dropped, throughout.
    "commitlog_cache_bytes": 8 << 20,
}
RECOVERY_TIMEOUT_S = 30.0
# After the writers stop, the consumers must consume it all: a group that made no progress
# for CATCH_UP_STALL_S is stuck (invisible times are 1-2 s); one still moving is waited for,
# up to ``catch_up_limit_s`` (after a power loss of every node the groups restart from cold).
CATCH_UP_STALL_S = 20.0
CATCH_UP_MIN_LIMIT_S = 300.0


def catch_up_limit_s(duration_s: float) -> float:
    """The longest wait for groups still moving: 300 s, or half the run if that is longer.
    On a 2-core host the POP groups can fall behind the writers for a whole run (30 minutes
    of async-sync-flush, 2026-11-30: first deliveries up to 620 s after their send, 947
    messages still moving when 300 s ran out), so what is left grows with the run's length.
    A stuck group still ends the wait after ``CATCH_UP_STALL_S``."""
    return max(CATCH_UP_MIN_LIMIT_S, duration_s / 2)


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h`` -> seconds."""
    text = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:])
    return float(text[:-1]) * scale if scale else float(text)


def settings_for(mode: str) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    replication, flush = mode.split("-", 1)
    return {
        "store": {
            **SMALL_STORE,
            "flush_mode": "SYNC_FLUSH" if flush == "sync-flush" else "ASYNC_FLUSH",
        },
        "replication": {"mode": replication.upper(), "ack_timeout_ms": 1000},
    }


def run(
    mode: str,
    faults: list[str],
    duration_s: float,
    directory: str,
    writers: int = 2,
    fifo_writers: int = 1,
    quiet_s: float = 3.0,
    seed: int = 0,
    keep_data: bool = False,
    rounds: int = 1,
) -> dict:
    """Run, check and report; the report as a dict (``report["valid"]`` is the verdict).
    Faults go on past ``duration_s`` until each named fault ran ``rounds`` times."""
    kinds = nemesis.expand(faults)
    settings = settings_for(mode)
    os.makedirs(directory, exist_ok=True)
    with (
        partitionable_network(kinds) as network,
        sync_ledger_if_needed(kinds),
        overloads_if_needed(kinds) as overloads,
    ):
        cluster_dir = os.path.join(directory, "cluster")
        scratch = os.path.join(directory, "scratch")
        os.makedirs(scratch, exist_ok=True)
        placements = network.placements if network is not None else None
        plan = cluster_up(
            cluster_dir, nodes=3, auto_ports=True, settings=settings, placements=placements
        )
        history = History(mode)
        stop_writers, stop = threading.Event(), threading.Event()
        writing: list[threading.Thread] = []
        threads: list[threading.Thread] = []
        fury = None
        heal_error = ""
        try:
            access = ",".join(n.grpc for n in plan.nodes)
            with Admin(plan.nodes[0].grpc) as admin:
                workload.create_topics(admin)
            store_settings = {k: v for k, v in plan.settings["store"].items() if k != "flush_mode"}
            t0 = time.monotonic()
            history.started_wall = time.time()

            fury = nemesis.Nemesis(
                plan,
                history,
                t0,
                logs=workload.LogCopies(scratch, store_settings),
                seed=seed,
                network=network,
                overloads=overloads,
            )
            writing, reading, resender = workload.start(
                history, access, t0, writers, fifo_writers, stop_writers, stop
            )
            threads = writing + reading
            turn = 0
            # Each fault asked for `rounds` times, however slow the recoveries were.
            while time.monotonic() - t0 + quiet_s < duration_s or turn < len(faults) * rounds:
                time.sleep(quiet_s)  # quiet period between faults: load without a fault
                fault = fury.inject(nemesis.kind_for(faults, turn))
                turn += 1
                try:
                    wait_ready(fury.plan, RECOVERY_TIMEOUT_S)
                    fault.ready_s = fury.now()
                except ClusterError as error:  # recorded; the run goes on
                    fault.note = f"not recovered within {RECOVERY_TIMEOUT_S:.0f} s: {error}"
                fury.settle()  # the logs it copied, read now that the cluster is back
            remaining = duration_s - (time.monotonic() - t0)
            if remaining > 0:
                time.sleep(remaining)
            fury.heal()
            try:
                wait_ready(fury.plan, RECOVERY_TIMEOUT_S * 2)
            except ClusterError as error:  # a finding, not a crash: drain and report anyway
                heal_error = (
                    f"cluster not healed {RECOVERY_TIMEOUT_S * 2:.0f} s after the faults: {error}"
                )
            time.sleep(1.0)  # a little load on the healed cluster before the writers stop
            stop_writers.set()
            for thread in writing:
                thread.join(30)
            history.catch_up = workload.wait_caught_up(
                [n.grpc for n in fury.plan.nodes],
                history.consumers,
                CATCH_UP_STALL_S,
                catch_up_limit_s(duration_s),
                resender.backlog,
            )
        except BaseException:
            stop_writers.set()
            stop.set()
            cluster_down(cluster_dir)  # never leave node processes behind
            raise
        finally:
            stop_writers.set()
            stop.set()
            for thread in threads:
                thread.join(30)
            if fury is not None:
                plan = fury.plan
        history.duration_s = time.monotonic() - t0
        wait_same_end(plan)
        try:
            history.served = workload.read_served(access)
        except FerryError as error:  # a finding: the healed cluster would not serve its log
            history.client_error(time.monotonic() - t0, f"reading every queue back: {error}")
        roles = node_roles(plan)
        cluster_down(cluster_dir)
        logs = os.path.join(directory, "logs")  # kept: small, and the first thing to read
        os.makedirs(logs, exist_ok=True)
        for node in plan.nodes:
            shutil.copy(os.path.join(cluster_dir, f"{node.id}.log"), logs)
        history.node_errors = errors_in_logs(logs)
        history.elections = judged(
            elections_in_logs(logs, history.started_wall), history.faults, nemesis.LEASE_S
        )
        history.replicas, unreadable = workload.drain(
            [(n.id, roles.get(n.id, "?"), n.data) for n in plan.nodes], store_settings
        )
        history.node_errors += unreadable
        history.rolled_back, unreadable = workload.rolled_back([n.data for n in plan.nodes])
        history.node_errors += unreadable
        from ha.epochs import EpochHistory

        master_id = next((n for n, r in roles.items() if r == "MASTER"), plan.nodes[0].id)
        master_data = next(n.data for n in plan.nodes if n.id == master_id)
        history.epochs = [(e.epoch, e.start_offset) for e in EpochHistory(master_data).entries]
        findings = checker.check(history)
        if heal_error:
            findings.violations.append(heal_error)
        for fault, row in zip(history.faults, findings.unavailability, strict=True):
            row["note"] = fault.note
        result = report.write(directory, history, findings)
        if not keep_data:
            shutil.rmtree(cluster_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        return result


@contextlib.contextmanager
def sync_ledger_if_needed(kinds: list[str]):
    """Nodes started meanwhile record what each fsync made durable, when a power loss is
    asked for (``store.sync_ledger``); the environment is restored afterwards."""
    if not any(kind in nemesis.POWER_LOSSES for kind in kinds):
        yield
        return
    previous = os.environ.get(sync_ledger.ENVIRONMENT)
    os.environ[sync_ledger.ENVIRONMENT] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[sync_ledger.ENVIRONMENT]
        else:
            os.environ[sync_ledger.ENVIRONMENT] = previous


@contextlib.contextmanager
def overloads_if_needed(kinds: list[str]):
    """The run's overloads when one is asked for (None otherwise), cleared whatever
    happens."""
    if not any(kind in nemesis.OVERLOADS for kind in kinds):
        yield None
        return
    why_not = chaos_overload.available()
    if why_not:
        raise ValueError(why_not)
    overloads = chaos_overload.Overloads()
    try:
        yield overloads
    finally:
        overloads.clear()


@contextlib.contextmanager
def partitionable_network(kinds: list[str]):
    """Nodes in network namespaces when a partition is asked for (None otherwise); the
    namespaces are removed whatever happens."""
    if not any(kind in nemesis.PARTITIONS for kind in kinds):
        yield None
        return
    why_not = chaos_network.available()
    if why_not:
        raise ValueError(why_not)
    network = chaos_network.NodeNetwork(3).create()
    try:
        yield network
    finally:
        network.destroy()


# Logged by gRPC when a client left before its answer was sent (a paused node's clients
# time out): not an error of the node.
HARMLESS_EXCEPTIONS = ("grpc._cython.cygrpc.ExecuteBatchError",)


def errors_in_logs(directory: str) -> list[str]:
    """``<log>: <exception>`` for every traceback in the nodes' logs (each a bug to look
    at: a crash, or an exception a loop logged and survived)."""
    found = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            if line != "Traceback (most recent call last):":
                continue
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j] and not lines[j].startswith((" ", "Traceback"))
                ),
                len(lines),
            )
            ending = lines[end] if end < len(lines) else ""
            if ending.startswith(HARMLESS_EXCEPTIONS):
                continue
            # Enough to start from when only the report is left (a CI run): what was
            # logged with it, and the innermost frame.
            frames = [x.strip() for x in lines[i + 1 : end] if x.startswith('  File "')]
            where = f" (innermost: {frames[-1][:200]})" if frames else ""
            logged = f" after {lines[i - 1][:200]!r}" if i > 0 else ""
            found.append(f"{name}: {ending[:300]}{where}{logged}")
    return found


def node_roles(plan) -> dict[str, str]:
    for node in plan.nodes:
        try:
            with Admin(node.grpc, timeout_s=2) as admin:
                return {n.id: n.role for n in admin.cluster_status().nodes}
        except FerryError:
            continue
    return {}


def wait_same_end(plan, timeout_s: float = 30.0) -> None:
    """Until every node reports the same CommitLog end (replication caught up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in plan.nodes:
            if not is_running(node, plan):
                continue
            try:
                with Admin(node.grpc, timeout_s=2) as admin:
                    status = admin.cluster_status()
            except FerryError:
                continue
            ends = {n.max_offset for n in status.nodes if n.alive}
            if len(ends) == 1 and len(status.nodes) == len(plan.nodes):
                return
            break
        time.sleep(0.2)
