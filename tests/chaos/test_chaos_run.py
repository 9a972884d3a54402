"""Short chaos runs against real 3-node clusters, one per mode, each with at least one
kill of the master, one partition (nodes in network namespaces) and one power loss (of the
master, or of every node), one overload (a starved CPU, a busy host or a slow disk: a
master deposed under it is a spurious failover, a violation) and one more fault, checked
against docs/guarantees.md; and
the self-test: a planted bug (a promoted master drops its last records) must be reported
as lost acknowledged writes under a SYNC run."""

from __future__ import annotations

import json
import os

import pytest

from chaos import runner, workload
from ferrymq.launcher import cluster
from tests.support import planted_bug_node

RUNS = {
    "sync-sync-flush": [
        "kill-master",
        "partition-master",
        "pause",
        "power-loss-all",
        "cpu-starve-master",
    ],
    "sync-async-flush": [
        "kill-master",
        "partition-slave",
        "power-loss-master",
        "restart-all",
        "slow-disk-master",
    ],
    "async-sync-flush": [
        "kill-master",
        "partition-master",
        "partition-clients",
        "power-loss-all",
        "busy-host",
    ],
    "async-async-flush": [
        "kill-master",
        "partition-master",
        "kill-slave",
        "power-loss-master",
        "cpu-starve-all",
    ],
}
# 3 s of quiet load, then the fault (kill: 2 s down; pause and partitions: 4.5 s;
# overloads: 9 s).
SECONDS_PER_FAULT = 8.5
# Writes must come back while these last (4.5 s): the kernel tells a cut path within
# ``DEAD_LINK_S`` (2 s); the master drops the slave from the in-sync set, the client goes
# through another node. Waiting for the heal instead took 4.8 s and 4.5 s.
WRITES_BACK_DURING = {"partition-slave": 3.5, "partition-clients": 3.5}


@pytest.mark.parametrize("mode", list(RUNS))
def test_a_short_chaos_run_keeps_the_promises_of_its_mode(mode, tmp_path):
    faults = RUNS[mode]
    result = runner.run(mode, faults, SECONDS_PER_FAULT * len(faults) + 3, str(tmp_path / "run"))
    print(result["summary"])
    kinds = [f["kind"] for f in result["faults"]]
    assert set(faults) <= set(kinds), kinds
    assert result["valid"], result["summary"]
    findings = result["findings"]
    assert findings["spurious_failovers"] == []
    assert findings["acknowledged"] > 500
    # Every topic's sends were acknowledged and checked: NORMAL, FIFO, LITE and PRIORITY.
    assert set(findings["acknowledged_by_topic"]) == set(workload.TOPICS)
    assert findings["pop_released"] > 0  # deliveries left to expire came back (valid above)
    assert findings["pop_nacked"] > 0 and findings["doomed_dead_lettered"] > 0
    # Dead letters were resent and came back (none resent twice or lost: valid above).
    assert findings["resent_delivered_again"] > 0
    assert findings["served_records"] > 0  # read back, and the same as the log (valid above)
    assert all(f["writes_back_after_s"] is not None for f in result["faults"])
    for fault in result["faults"]:
        bound = WRITES_BACK_DURING.get(fault["kind"])
        assert bound is None or fault["writes_back_after_s"] < bound, fault
    for name in ("report.json", "summary.txt", "history.json", "timeline.png"):
        assert os.path.getsize(tmp_path / "run" / name) > 0
    assert not (tmp_path / "run" / "cluster").exists()  # no node data left behind
    with open(tmp_path / "run" / "report.json", encoding="utf-8") as f:
        assert json.load(f)["mode"] == mode


def test_the_checker_catches_a_master_that_drops_acknowledged_records(tmp_path, monkeypatch):
    # Every node runs tests/support/planted_bug_node.py: once promoted to master it cuts its last
    # 50 records, which a SYNC cluster had acknowledged.
    monkeypatch.setattr(cluster, "NODE_MODULE", planted_bug_node.__name__)
    result = runner.run("sync-sync-flush", ["kill-master"], 10, str(tmp_path / "run"))
    print(result["summary"])
    assert not result["valid"]
    lost = result["findings"]["lost"]
    assert lost["count"] > 0, result["summary"]
    assert any("acknowledged sends lost" in v for v in result["violations"])
