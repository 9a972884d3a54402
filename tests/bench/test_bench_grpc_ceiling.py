"""``python -m bench.grpc_ceiling --json --smoke`` runs end to end: the no-op servers and
slaves start, every floor is measured, and the figures are sane."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def test_smoke_run_prints_every_floor():
    done = subprocess.run(
        [sys.executable, "-m", "bench.grpc_ceiling", "--json", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for kind in ("aio", "threads"):
        assert figures[f"noop_{kind}_server_256_inflight_rpcs_per_s"] > 0
    for name in (
        "noop_single_send",
        "noop_uvloop_single_send",
        "noop_produce_single_send",
        "noop_replicated_single_send",
        "noop_remoting_uvloop",
        "noop_remoting_asyncio",
        "noop_sdk_remoting_produce",
        "node_remoting_noop",
        "noop_remoting_replicated_single_send",
        "noop_remoting_replicated_end_to_end",
        "native_remoting_replicated_single_send",
        "native_relay_remoting_replicated_single_send",
        "native_slaves_remoting_replicated_single_send",
        "os_round_trip",
        "os_round_trip_same_cpu",
    ):
        assert 0 < figures[f"{name}_p50_us"] <= figures[f"{name}_p99_us"]
    assert figures["noop_replicated_batch_msgs_per_s"] > 0
    assert figures["noop_remoting_replicated_batch_msgs_per_s"] > 0
    assert figures["page_cache_first_write_us_per_kib"] > 0
    assert figures["page_cache_rewrite_us_per_kib"] > 0
    assert figures["page_cache_recycled_write_us_per_kib"] > 0
