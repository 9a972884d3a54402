"""``python -m bench.console --json --smoke`` runs end to end: a real 3-node cluster with
auth and the console on, every API call a page makes timed, every figure present and
sane, nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import ROOT

CALLS = (
    "cluster",
    "topics_first_page",
    "topics_last_page",
    "topics_filtered",
    "topic_detail",
    "groups_first_page",
    "groups_filtered",
    "group_detail",
    "messages_by_key",
    "messages_by_offset",
    "users",
    "busy_topic_detail",
    "message_history",
    "dead_letters",
    "producers",
    "node_config_here",
    "node_config_of_a_slave",
)


def test_smoke_run_times_every_call_of_every_page(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench.console", "--json", "--smoke", "--requests", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["topics"], result["groups"], result["requests_each"]) == (50, 10, 5)
    assert set(result["calls"]) == set(CALLS)
    for name, figures in result["calls"].items():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"], name
    assert result["worst_p99_ms"] == max(f["p99_ms"] for f in result["calls"].values())
    assert result["within_target"] == (result["worst_p99_ms"] <= result["target_p99_ms"])
    # The cluster was stopped and its scratch directory removed.
    assert not [p for p in os.listdir(tmp_path) if p.startswith("ferrymq-bench-console-")]
