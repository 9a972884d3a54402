"""``cluster_down`` stops every process running one of the cluster's nodes, also one the
plan does not name: a restart interrupted (Ctrl-C of a chaos run) between starting a node
and saving the plan left that node running after everything else had stopped."""

from __future__ import annotations

import subprocess
import sys

from ferrymq.launcher.cluster import cluster_down, config_path, plan_cluster, save_plan
from tests.support.cluster import SMALL_STORE

# Stands in for a node: a process whose command line names the node's config.
IDLE = "import time\nwhile True: time.sleep(1)"


def test_a_node_process_the_plan_does_not_name_is_stopped_too(tmp_path):
    plan = plan_cluster(str(tmp_path), 2, auto_ports=True, settings=SMALL_STORE)
    save_plan(plan)
    unnamed = subprocess.Popen(
        [sys.executable, "-c", IDLE, "--config", config_path(plan, plan.nodes[1])]
    )
    elsewhere = subprocess.Popen([sys.executable, "-c", IDLE, "--config", str(tmp_path / "x.toml")])
    try:
        assert cluster_down(str(tmp_path), timeout_s=10) == []  # the plan names none running
        assert unnamed.wait(timeout=10) is not None
        assert elsewhere.poll() is None  # another cluster's node is not this one's
    finally:
        for process in (unnamed, elsewhere):
            process.kill()
            process.wait()
