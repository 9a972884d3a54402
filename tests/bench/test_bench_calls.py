"""The master's calls a message by stretch (``bench.calls``, ``node/call_count.py``): each
call is counted under the innermost stretch on its stack, Python and C calls apart; a
node counts only when ``FERRYMQ_CALL_COUNT`` is set, and writes its counts on SIGUSR2;
the benchmark's figures come from a real SYNC group's end to end. And its wall time a
message by stretch (``bench.calls --time``, ``node/stretch_time.py``), the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from time import perf_counter_ns

import pytest

from bench import calls
from node import stretch_time
from node.call_count import ENV, CallCount, install_from_env


class ProduceLane:  # qualified names as the node's stretches end
    def take(self, master) -> int:
        len("counted as the lane's C call")
        return master._reput()


class ReplicationMaster:
    def _reput(self) -> int:
        return len("counted as the reput's")


def unnamed() -> int:
    return abs(-1)


def test_a_call_counts_under_the_innermost_stretch_on_its_stack(tmp_path):
    count = CallCount(str(tmp_path / "calls"))
    sys.setprofile(count.profile)
    try:
        ProduceLane().take(ReplicationMaster())
        unnamed()
    finally:
        sys.setprofile(None)
    path = count.write()
    assert path == f"{tmp_path / 'calls'}.{os.getpid()}.0"
    with open(path, encoding="utf-8") as f:
        written = json.load(f)
    counts, functions = written["counts"], written["functions"]
    assert counts["produce lane"] == {"python": 1, "c": 1}  # ``take`` and its ``len``
    assert functions["produce lane"] == {"python ProduceLane.take": 1, "c len": 1}
    assert counts["reput"] == {"python": 1, "c": 1}  # ``_reput``, inside ``take``
    assert functions["reput"] == {"python ReplicationMaster._reput": 1, "c len": 1}
    assert functions["other"]["python unnamed"] == 1 and functions["other"]["c abs"] == 1
    assert count.write().endswith(".1")  # the next write, counting on


def test_the_bench_process_s_calls_count_by_thread():
    def work() -> None:
        unnamed()
        reader = threading.Thread(target=lambda: [unnamed(), unnamed()])
        reader.start()
        reader.join()

    by_role = calls.ThreadCalls().during(work)
    assert by_role["producer"]["python unnamed"] == 1  # the main thread's
    assert by_role["consumer"]["python unnamed"] == 2  # the thread it started
    assert by_role["consumer"]["c abs"] == 2
    assert sys.getprofile() is None and threading.getprofile() is None


def test_nothing_counts_unless_asked(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert install_from_env() is None
    assert sys.getprofile() is None


def test_the_master_s_calls_a_message_by_stretch():
    figures = calls.run(150, functions=3)
    assert figures["messages"] == 200
    by_stretch = figures["by_stretch"]
    for stretch in ("produce lane", "fetch lane", "reput", "ACK intake", "frames read"):
        assert by_stretch[stretch]["python"] >= 1, (stretch, by_stretch)
    assert "request task" not in by_stretch  # the SDK's common requests take the lanes
    total = sum(s["python"] for s in by_stretch.values())
    assert abs(figures["python_calls_per_message"] - total) < 0.5
    assert ENV not in os.environ
    [(function, per_message), *_] = figures["top_functions"]["produce lane"]
    assert function.startswith(("python ", "c ")) and per_message >= 1
    sdk = figures["sdk"]  # the bench process's own, the clients' start differenced out
    for role in ("producer", "consumer"):
        assert 1 <= sdk[role]["python"] < 1000, sdk
    [(function, per_message), *_] = sdk["top_functions"]["consumer"]
    assert function.startswith(("python ", "c ")) and per_message >= 1


class Timed:
    def work(self, ns: int) -> int:
        """Runs ``ns`` at least, by the clock the wrapper reads."""
        until = perf_counter_ns() + ns
        while perf_counter_ns() < until:
            pass
        return ns


def test_a_stretch_s_wall_time_and_calls_are_summed_and_written(tmp_path, monkeypatch):
    monkeypatch.setattr(Timed, "work", Timed.work)  # put back after the test
    timing = stretch_time.StretchTime(str(tmp_path / "time"))
    timing.install((("timed work", __name__, "Timed.work"),))
    assert Timed().work(1_000_000) == 1_000_000 and Timed().work(0) == 0
    path = timing.write()
    assert path == f"{tmp_path / 'time'}.{os.getpid()}.0"
    with open(path, encoding="utf-8") as f:
        written = json.load(f)["stretches"]["timed work"]
    assert written["calls"] == 2 and written["ns"] >= 1_000_000
    assert timing.write().endswith(".1")  # the next write, timing on


def test_nothing_is_timed_unless_asked(monkeypatch):
    monkeypatch.delenv(stretch_time.ENV, raising=False)
    assert stretch_time.install_from_env() is None


def test_every_timed_function_is_found():
    """A stretch whose function was renamed would time nothing, silently."""
    for _, module, path in stretch_time.TIMED:
        owner, name = stretch_time.resolve(module, path)
        assert callable(getattr(owner, name)), (module, path)


def test_a_node_asked_to_count_and_to_time_refuses_to_start(tmp_path):
    """Both answer SIGUSR2: a node would write one of them, and the other never."""
    env = {**os.environ, ENV: str(tmp_path / "c"), stretch_time.ENV: str(tmp_path / "t")}
    ran = subprocess.run(
        [sys.executable, "-m", "node", "--data", str(tmp_path / "node"), "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "FERRYMQ_CALL_COUNT and FERRYMQ_STRETCH_TIME are both set" in ran.stderr


@pytest.mark.parametrize("sdk", [False, True], ids=["by channel", "the SDK's"])
def test_the_master_s_wall_time_a_message_by_stretch(sdk):
    figures = calls.run_time(150, sdk)
    assert figures["messages"] == 200
    stretches = {name: sums["us"] for name, sums in figures["stretches"].items()}
    for name in ("produce lane", "the native write", "confirmation", "reput"):
        assert stretches[name] > 0, stretches
    # The SDK's reader follows: one FERRY_FETCH for many messages, a fetch a message by channel.
    assert (figures["stretches"]["fetch lane"]["calls"] < 0.5) == sdk, figures
    assert figures["stretches"]["an answer's write"]["calls"] >= 2  # the writer's, the reader's
    # Each stretch holds the ones it calls.
    assert stretches["the native write"] <= stretches["produce lane"] <= stretches["frames read"]
    assert stretches["reput"] <= stretches["confirmation"] <= stretches["link buffer"]
    assert figures["master_cpu_us_per_message"] > 0
    assert stretch_time.ENV not in os.environ
