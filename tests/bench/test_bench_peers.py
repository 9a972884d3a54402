"""bench.peers without the peer servers: the ratios, the JSON and RESULTS.md section built
from given figures, the workload harness on a fake peer, and the teardown registry
killing real child processes when the run fails."""

from __future__ import annotations

import json
import os

import pytest

from bench.peers import report
from bench.peers.processes import ProcessRegistry, marked_processes
from bench.peers.workloads import SCALES, Figures, measure
from ferrymq.launcher.polling import until


def figures(name: str, **values) -> dict:
    return Figures(
        name, client=f"{name}-client", durability=f"{name} durability", **values
    ).to_json()


PEERS = {
    "ferrymq": figures(
        "ferrymq",
        sequential_send_msgs_per_s=3000,
        sequential_send_p50_us=300,
        sequential_send_p99_us=900,
        inflight_256_send_msgs_per_s=40_000,
        batched_send_msgs_per_s=80_000,
        end_to_end_p50_us=500,
        end_to_end_p99_us=2000,
        consume_msgs_per_s=100_000,
    ),
    "nats": figures(
        "nats",
        sequential_send_msgs_per_s=2000,
        sequential_send_p50_us=450,
        sequential_send_p99_us=800,
        inflight_256_send_msgs_per_s=16_000,
        batched_send_msgs_per_s=20_000,
        end_to_end_p50_us=600,
        consume_msgs_per_s=None,
    ),
    "redis": figures(
        "redis",
        sequential_send_msgs_per_s=6000,
        sequential_send_p50_us=150,
        inflight_256_send_msgs_per_s=5000,
        batched_send_msgs_per_s=50_000,
        end_to_end_p50_us=250,
        end_to_end_p99_us=1000,
        consume_msgs_per_s=50_000,
    ),
    "rabbitmq": Figures("rabbitmq", available=False, unavailable_reason="apt failed").to_json(),
}


def test_ratios_pick_the_best_peer_and_invert_latencies():
    found = report.ratios(PEERS)
    assert found["ratio_batched_send"] == {
        "ratio": 1.6,
        "ferrymq": 80_000,
        "best_peer": "redis",
        "best_peer_value": 50_000,
    }
    assert found["ratio_256_inflight_send"]["ratio"] == 2.5  # 40k / nats 16k
    assert found["ratio_sequential_send"]["ratio"] == 0.5  # 3000 / redis 6000
    # Latencies: best (lowest) peer / ferrymq, so above 1 still means ferrymq is faster.
    assert found["ratio_sequential_send_p50"]["ratio"] == 0.5  # redis 150 / 300
    assert found["ratio_sequential_send_p99"] == {
        "ratio": 0.89,
        "ferrymq": 900,
        "best_peer": "nats",  # the only peer with the figure
        "best_peer_value": 800,
    }
    assert found["ratio_consume"]["best_peer"] == "redis"  # nats has no figure
    assert found["ratio_consume"]["ratio"] == 2.0


def test_ratio_is_none_without_a_figure_on_either_side():
    peers = {"ferrymq": figures("ferrymq", consume_msgs_per_s=10), "nats": figures("nats")}
    found = report.ratios(peers)
    assert found["ratio_consume"]["ratio"] is None
    assert found["ratio_batched_send"]["ratio"] is None
    assert report.targets(found) == {
        "ahead_in_every_workload": False,
        "ratio_batched_send_at_least_1.5": False,
        "ratio_256_inflight_send_at_least_1.5": False,
    }


def test_json_object_has_every_figure_ratio_and_target():
    built = report.build(PEERS, {"mode": "quick", "machine": "test machine"})
    encoded = json.loads(json.dumps(built))
    for key in ("ratio_batched_send", "ratio_256_inflight_send", "ratio_sequential_send"):
        assert isinstance(encoded[key], float)
    assert set(encoded["peers"]) == {"ferrymq", "nats", "redis", "rabbitmq"}
    assert encoded["peers"]["rabbitmq"]["unavailable_reason"] == "apt failed"
    assert encoded["targets_met"] == {
        "ahead_in_every_workload": False,
        "ratio_batched_send_at_least_1.5": True,
        "ratio_256_inflight_send_at_least_1.5": True,
    }
    assert encoded["mode"] == "quick"


def test_results_section_is_replaced_not_repeated(tmp_path):
    built = report.build(
        PEERS,
        {
            "mode": "quick",
            "machine": "test machine",
            "seconds": 1.0,
            "started_at": "now",
            "load_average_start": [1.0, 1.0, 1.0],
            "load_average_end": [2.0, 2.0, 2.0],
        },
    )
    section = report.markdown(built, "python -m bench.peers --json --quick", "peers.png")
    assert "| batched send (msgs/s) | 80,000 | 20,000 | 50,000 | — | **1.60** (redis) |" in section
    assert "nats durability" in section and "apt failed" in section
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\n## Storage\n\nstore figures\n")
    report.write_section(str(path), section)
    report.write_section(str(path), section.replace("80,000", "81,000"))
    text = path.read_text()
    assert text.count(report.SECTION) == 1
    assert "81,000" in text and "store figures" in text


class FakePeer:
    name, client, durability = "fake", "fake-client", "none"

    def sequential_send(self, count):
        return [0.001] * (count - 1) + [0.1]

    def inflight_send(self, count, in_flight):
        return count / 10_000

    def batched_send(self, count):
        raise RuntimeError("broken batch")

    def end_to_end(self, count):
        return [0.002] * count

    def consume(self, count):
        return count / 50_000


def test_measure_turns_timings_into_figures_and_keeps_going_after_a_failure():
    result = measure(FakePeer(), SCALES["smoke"])
    assert result.sequential_send_p50_us == 1000
    assert result.sequential_send_p99_us == 100_000  # the one slow send of 50
    assert result.inflight_256_send_msgs_per_s == 10_000
    assert result.batched_send_msgs_per_s is None
    assert result.errors == {"batched_send": "RuntimeError: broken batch"}
    assert result.end_to_end_p50_us == 2000
    assert result.consume_msgs_per_s == 50_000


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def test_registry_kills_children_and_escaped_daemons_on_an_exception(tmp_path):
    registry = ProcessRegistry("test", grace_s=1)
    with pytest.raises(RuntimeError, match="workload failed"), registry:
        directory = registry.make_dir("test")
        # A shell with a child in its group, and one that left the group (setsid), as a
        # daemonizing server would: only the environment marker still finds it.
        registry.spawn(
            "shell",
            ["sh", "-c", "sleep 300 & setsid sleep 301 & exec sleep 302"],
            str(tmp_path / "shell.log"),
        )
        children = until(
            lambda: (found := marked_processes(registry.token)) and len(found) >= 3 and found,
            20,
            "the three marked processes",
        )
        assert all(alive(pid) for pid in children)
        raise RuntimeError("workload failed")
    assert not any(alive(pid) for pid in children)
    assert not os.path.exists(directory)
    assert registry.started == [] and registry.directories == []
