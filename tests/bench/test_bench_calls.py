"""The master's calls a message by stretch (``bench.calls``, ``node/call_count.py``): each
call is counted under the innermost stretch on its stack, Python and C calls apart; a
node counts only when ``FERRYMQ_CALL_COUNT`` is set, and writes its counts on SIGUSR2;
the benchmark's figures come from a real SYNC group's end to end."""

from __future__ import annotations

import json
import os
import sys
import threading

from bench import calls
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
