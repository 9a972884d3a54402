"""Spurious failovers: elections read from the nodes' logs, excused only by a fault that
may depose the master it hit (a kill, a pause, a partition of it, a restart or power
loss), and counted as a violation otherwise (an overload, or no fault at all)."""

from __future__ import annotations

import time

from chaos.checker import check
from chaos.elections import elections_in_logs, judged
from chaos.history import Election, Fault, History

STARTED = time.mktime(time.strptime("2026-11-28 22:00:00", "%Y-%m-%d %H:%M:%S"))


def log_line(seconds: float, elected: str, reason: str, epoch: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(STARTED + int(seconds)))
    millis = round((seconds - int(seconds)) * 1000)
    return (
        f"{stamp},{millis:03d} WARNING ferrymq.controller electing {elected} master of "
        f"group-1 (epoch {epoch - 1} -> {epoch}): {reason}\n"
    )


def test_elections_are_read_with_whom_they_deposed_and_judged_by_the_faults(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-2.log").write_text(
        "2026-11-28 22:00:01,000 INFO ferrymq.node serving\n"
        + log_line(10.2, "node-2", "master node-1 is down (missed its lease)", 2)
        + log_line(
            40.5,
            "node-3",
            "in-sync slaves ['node-1', 'node-3'] lost their link to node-2, which sent no "
            "heartbeat for 1.2 s",
            3,
        )
    )
    (logs / "node-3.log").write_text(
        log_line(70.0, "node-1", "master node-3 is down (missed its lease)", 4)
    )
    found = elections_in_logs(str(logs), STARTED)
    assert [(round(e.at_s, 1), e.elected, e.deposed, e.epoch) for e in found] == [
        (10.2, "node-2", "node-1", 2),
        (40.5, "node-3", "node-2", 3),
        (70.0, "node-1", "node-3", 4),
    ]
    faults = [
        Fault("pause", ["node-1"], "master", 6.0, 10.5),  # excuses the first
        Fault("cpu-starve-master", ["node-2"], "master", 35.0, 44.0),  # excuses nothing
        Fault("kill-slave", ["node-1"], "slave", 68.0, 70.0),  # not node-3's fault
    ]
    assert [e.spurious for e in judged(found, faults, margin_s=3.0)] == [False, True, True]


def test_a_restarted_master_may_be_replaced_until_the_cluster_is_ready_again():
    """A restart ends, for the checker, once the cluster was ready: a master deposed
    while it was still starting was not a live master. A pause does not restart the
    node: its window ends when the node runs again."""
    deposed_at = [Election(14.4, "node-2", "node-1", 53, "lost their link to node-1")]
    restart = Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 2.0, 10.0)
    assert [e.spurious for e in judged(deposed_at, [restart], margin_s=3.0)] == [True]
    restart.ready_s = 16.0
    assert [e.spurious for e in judged(deposed_at, [restart], margin_s=3.0)] == [False]
    pause = Fault("pause", ["node-1"], "master", 2.0, 10.0, ready_s=16.0)
    assert [e.spurious for e in judged(deposed_at, [pause], margin_s=3.0)] == [True]


def test_the_checker_counts_a_spurious_failover_as_a_violation(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-1.log").write_text(
        log_line(5.0, "node-2", "master node-1 is down (missed its lease)", 2)
    )
    history = History("sync-sync-flush")
    history.elections = judged(elections_in_logs(str(logs), STARTED), [], margin_s=3.0)
    findings = check(history)
    assert findings.elections == 1
    assert findings.spurious_failovers == [
        "5.0 s: node-2 for node-1 (epoch 2): master node-1 is down (missed its lease)"
    ]
    assert any("spurious failovers" in v for v in findings.violations)
