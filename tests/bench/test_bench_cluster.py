"""``python -m bench.cluster --json --smoke`` runs end to end: two real 3-node groups, one
kill -9 drill with ferrymq's SDK and one with the official Python client, the official
client's sends direct and through a slave, every figure present and sane, nothing left
running."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT

KEYS = (
    "sync_batch_send_msgs_per_s",
    "async_batch_send_msgs_per_s",
    "sync_single_send_p50_us",
    "sync_single_send_p99_us",
    "end_to_end_p50_us",
    "end_to_end_by_channel_p50_us",
    "grpc_sync_single_send_p50_us",
    "grpc_sync_batch_send_msgs_per_s",
    "grpc_end_to_end_p50_us",
    "replication_lag_bytes_p99",
    "failover_unavailable_ms_p50",
    "failover_unavailable_ms_p99",
    "official_client_failover_unavailable_ms_p50",
    "official_client_failover_unavailable_ms_p99",
    "official_send_p50_us_direct",
    "official_send_p50_us_via_slave",
    "official_send_extra_hop_us",
    "sync_single_cpu_us_per_send_master",
    "sync_single_cpu_us_per_send_slaves",
    "sync_single_cpu_us_per_send_client",
    "sync_single_send_idle_readers_p50_us",
    "sync_single_idle_readers_cpu_us_per_send_master",
    "floor_single_send_p50_us",
    "floor_end_to_end_p50_us",
    "floor_single_cpu_us_per_send_master",
    "sync_single_send_floor_ratio",
    "end_to_end_floor_ratio",
    "end_to_end_by_channel_floor_ratio",
    "end_to_end_by_channel_cpu_us_per_message_master",
    "floor_end_to_end_cpu_us_per_message_master",
    "floor_native_single_send_p50_us",
    "floor_native_single_cpu_us_per_send_slaves",
    "sync_single_send_native_floor_ratio",
)


def assert_floors_of_the_same_run(figures: dict, *, end_to_end: bool) -> None:
    """The floors were measured in this run, and each ratio is its figure over its floor."""
    assert 0 < figures["floor_single_send_p50_us"] <= figures["floor_single_send_p99_us"]
    assert figures["floor_single_cpu_us_per_send_master"] > 0
    ratio = figures["sync_single_send_p50_us"] / figures["floor_single_send_p50_us"]
    assert figures["sync_single_send_floor_ratio"] == round(ratio, 2)
    # The native floor's relay and slaves answered (built from bench/native_floor here).
    native = figures["floor_native_single_send_p50_us"]
    assert 0 < native <= figures["floor_native_single_send_p99_us"]
    ratio = figures["sync_single_send_p50_us"] / native
    assert figures["sync_single_send_native_floor_ratio"] == round(ratio, 2)
    if end_to_end:
        ratio = figures["end_to_end_p50_us"] / figures["floor_end_to_end_p50_us"]
        assert figures["end_to_end_floor_ratio"] == round(ratio, 2)
        ratio = figures["end_to_end_by_channel_p50_us"] / figures["floor_end_to_end_p50_us"]
        assert figures["end_to_end_by_channel_floor_ratio"] == round(ratio, 2)


def bench_cluster(tmp_path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cluster", *args],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_smoke_run_prints_every_figure_with_sane_values(tmp_path):
    figures = bench_cluster(tmp_path, "--json", "--smoke")
    missing = [key for key in KEYS if key not in figures]
    assert not missing, missing
    assert figures["sync_batch_send_msgs_per_s"] > 0
    assert figures["async_batch_send_msgs_per_s"] > 0
    assert 0 < figures["sync_single_send_p50_us"] <= figures["sync_single_send_p99_us"]
    assert 0 < figures["end_to_end_p50_us"] <= figures["end_to_end_p99_us"]
    by_channel = (figures[f"end_to_end_by_channel_{p}_us"] for p in ("p50", "p99"))
    assert 0 < next(by_channel) <= next(by_channel)
    assert figures["end_to_end_by_channel_cpu_us_per_message_master"] > 0
    idle_p50, idle_p99 = (figures[f"sync_single_send_idle_readers_{p}_us"] for p in ("p50", "p99"))
    assert 0 < idle_p50 <= idle_p99
    assert 0 < figures["grpc_sync_single_send_p50_us"] <= figures["grpc_sync_single_send_p99_us"]
    assert 0 < figures["grpc_end_to_end_p50_us"] <= figures["grpc_end_to_end_p99_us"]
    assert figures["grpc_sync_batch_send_msgs_per_s"] > 0
    assert figures["replication_lag_bytes_p99"] >= 0
    assert figures["replication_lag_samples"] > 0  # the sampler's filtered scrape reads
    assert figures["failover_drills"] == 1
    assert 0 < figures["failover_unavailable_ms_p50"] <= figures["failover_unavailable_ms_p99"]
    assert figures["failover_unavailable_ms_p99"] < 10_000
    # The official client through a failover: one drill, nothing acknowledged lost.
    assert figures["official_client_failover_drills"] == 1
    assert 0 < figures["official_client_failover_unavailable_ms_p99"] < 10_000
    assert figures["official_client_failover_lost"] == 0
    assert len(figures["official_client_failover_sends_ms"]) == 1
    assert len(figures["official_client_failover_receives_ms"]) == 1
    # And one kill of the node the client is connected to while it is not the master.
    assert len(figures["official_client_slave_kill_unavailable_ms"]) == 1
    assert 0 < figures["official_client_slave_kill_unavailable_ms_p99"] < 10_000
    assert figures["official_send_p50_us_direct"] > 0
    assert figures["official_send_p50_us_via_slave"] > 0
    # The benchmark cleans up after itself: its scratch directory is gone.
    assert not [p for p in os.listdir(tmp_path) if p.startswith("ferrymq-bench-cluster-")]
    assert figures["sync_single_cpu_us_per_send_master"] > 0
    assert_floors_of_the_same_run(figures, end_to_end=True)


@pytest.mark.slow
def test_single_sends_alone_print_their_cost_by_process(tmp_path):
    """``--single-sends N``: the quick probe of one send's cost, on a group of its own."""
    figures = bench_cluster(tmp_path, "--single-sends", "2000")
    assert figures["sync_single_sends"] == 2000
    assert 0 < figures["sync_single_send_p50_us"] <= figures["sync_single_send_p99_us"]
    # The master and both slaves worked for the sends. CPU is counted in 10 ms ticks, and
    # a slave spends ~25 µs a send here: 200 sends were under one tick of the two slaves
    # together, and read 0 once in a while; 2,000 are several.
    assert figures["sync_single_cpu_us_per_send_master"] > 0
    assert figures["sync_single_cpu_us_per_send_slaves"] > 0
    assert figures["sync_single_cpu_us_per_send_client"] > 0
    assert_floors_of_the_same_run(figures, end_to_end=False)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("ferrymq-bench-cluster-")]
