"""The master's Python calls a message, by stretch of work, in the end to end.

``python -m bench.calls [--messages N] [--functions N] [--json]``: a fresh 3-node SYNC
group whose nodes count their event loop's calls (``node/call_count.py``, on while
``FERRYMQ_CALL_COUNT`` is set), the end to end asked as its floor is (``bench.cluster``'s
``measure_end_to_end_by_channel``: one FERRY_PRODUCE, then the FERRY_FETCH that brings
it, one message at a time), and the master's counts taken before and after the measured
messages. The figure docs/native-lane.md holds each native step to: the calls a step
leaves, by stretch (the produce and fetch lanes, a request's task, the reput, the
writer's answer, the ACKs' intake, the frames read, the link's buffer, the rest), Python
functions and C functions called from Python apart; with ``--functions N`` each
stretch's N most called functions. The counting slows the nodes several-fold: no timing
of this run is a figure.

And the SDK's share (``sdk``): this process's calls a message in the SDK's end to end
(``bench.cluster``'s ``measure_end_to_end``, remoting) on the same group, by thread: the
``Producer``'s sends (the main thread, the bench's stamping and waiting included) and
the ``PullConsumer``'s polls (its thread). Counted over two runs of different lengths
and differenced, so that what each run pays once (the clients' start, their routes and
offsets) is left out.

``--time [--sdk]`` instead (``run_time``): the master's wall time a message in each
stretch (``node/stretch_time.py``, on while ``FERRYMQ_STRETCH_TIME`` is set: its system
calls included, each stretch with those it calls), beside its CPU a message in the same
measured run, over the end to end by channel (``--sdk``: the SDK's). The wrappers cost
~0.3 µs a call: the figures are the nodes' own, nearly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator

from bench.cluster import (
    END_TO_END_WARM_UP,
    CpuMeter,
    all_in_sync,
    create_topic,
    master_of,
    measure_end_to_end,
    measure_end_to_end_by_channel,
    start_cluster,
    stop_cluster,
)
from ferrymq.launcher.cluster import ClusterPlan, NodePlan
from ferrymq.launcher.polling import until
from node.call_count import ENV, called
from node.stretch_time import ENV as STRETCH_TIME_ENV

WARM_UP_MESSAGES = 300


def counts_of(pid: int, prefix: str, write: int) -> dict:
    """The ``write``-th counts node ``pid`` wrote (SIGUSR2 asks for them)."""
    path = f"{prefix}.{pid}.{write}"
    os.kill(pid, signal.SIGUSR2)
    until(lambda: os.path.exists(path), 30, f"the counts of {pid}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def per_message(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], messages: int
) -> dict[str, dict[str, float]]:
    """Calls a message of each key of each stretch, between two writes (``counts`` or
    ``functions``)."""
    return {
        stretch: {
            key: round((calls - before.get(stretch, {}).get(key, 0)) / messages, 2)
            for key, calls in sorted(after[stretch].items())
        }
        for stretch in sorted(after)
    }


def top(functions: dict[str, dict[str, float]], count: int) -> dict[str, list]:
    """Each stretch's ``count`` functions called most a message."""
    return {
        stretch: sorted(([f, n] for f, n in calls.items() if n > 0), key=lambda x: -x[1])[:count]
        for stretch, calls in functions.items()
    }


class ThreadCalls:
    """This process's calls by role: the main thread's ("producer") and the others'
    ("consumer"), Python functions and C functions apart, by function."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()  # "<role>", "<kind> <function>"

    def profile(self, frame, event: str, arg: object) -> None:
        call = called(frame, event, arg)
        if call is not None:
            main = threading.current_thread() is threading.main_thread()
            self.counts[("producer" if main else "consumer", " ".join(call))] += 1

    def during(self, work) -> dict[str, dict[str, int]]:
        """The calls ``work()`` made, by role and function, on every thread it started."""
        self.counts.clear()
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            work()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        by_role: dict[str, dict[str, int]] = {}
        for (role, function), calls in self.counts.items():
            by_role.setdefault(role, {})[function] = calls
        return by_role


def sdk_calls(plan, messages: int, functions: int) -> dict:
    """The SDK's calls a message in its end to end, by role: (a run of ``messages`` more)
    minus (a short run), over ``messages``."""
    count = ThreadCalls()
    short = count.during(lambda: measure_end_to_end(plan, WARM_UP_MESSAGES, "remoting"))
    full = count.during(lambda: measure_end_to_end(plan, WARM_UP_MESSAGES + messages, "remoting"))
    by_function = per_message(short, full, messages)
    figures: dict = {
        role: {
            "python": round(sum(n for f, n in calls.items() if f.startswith("python ")), 1),
            "c": round(sum(n for f, n in calls.items() if f.startswith("c ")), 1),
        }
        for role, calls in by_function.items()
    }
    if functions:
        figures["top_functions"] = top(by_function, functions)
    return figures


@contextlib.contextmanager
def instrumented_group(env: str, name: str) -> Iterator[tuple[ClusterPlan, NodePlan, str]]:
    """A fresh SYNC group whose nodes start with ``env`` set to a path prefix (this process
    does not), its topic made and all three in sync: (the plan, its master, the prefix);
    stopped and removed after."""
    root = tempfile.mkdtemp(prefix=f"ferrymq-bench-{name}-")
    prefix = os.path.join(root, name)
    os.environ[env] = prefix
    try:
        plan = start_cluster(os.path.join(root, "cluster"), "SYNC")
        os.environ.pop(env)
        create_topic(plan)
        master = master_of(plan)
        until(lambda: all_in_sync(plan, master) or None, 60, "all three in sync")
        yield plan, master, prefix
    finally:
        os.environ.pop(env, None)
        stop_cluster(os.path.join(root, "cluster"))
        shutil.rmtree(root, ignore_errors=True)


def run(messages: int, functions: int = 0) -> dict:
    with instrumented_group(ENV, "calls") as (plan, master, prefix):
        measure_end_to_end_by_channel(plan, WARM_UP_MESSAGES)
        before = counts_of(master.pid, prefix, 0)
        measure_end_to_end_by_channel(plan, messages)
        after = counts_of(master.pid, prefix, 1)
        sdk = sdk_calls(plan, messages, functions)
    sent = messages + END_TO_END_WARM_UP
    stretches = per_message(before["counts"], after["counts"], sent)
    figures = {
        "messages": sent,
        "python_calls_per_message": round(sum(s["python"] for s in stretches.values()), 1),
        "c_calls_per_message": round(sum(s["c"] for s in stretches.values()), 1),
        "by_stretch": stretches,
        "sdk": sdk,
    }
    if functions:
        by_function = per_message(before["functions"], after["functions"], sent)
        figures["top_functions"] = top(by_function, functions)
    return figures


def measure_sdk_end_to_end(plan, count: int) -> tuple[float, float, dict[str, float]]:
    """``measure_end_to_end`` (remoting) with the CPU µs a message of each process, as
    ``measure_end_to_end_by_channel`` reports them."""
    with CpuMeter.of_group(plan, master_of(plan)) as cpu:
        p50, p99 = measure_end_to_end(plan, count, "remoting")
    return p50, p99, cpu.us_per_message(count + END_TO_END_WARM_UP)


def run_time(messages: int, sdk: bool = False) -> dict:
    """The master's wall µs a message by stretch (``node/stretch_time.py``) and its CPU µs a
    message, over ``messages`` of the end to end by channel on a fresh SYNC group (``sdk``:
    of the SDK's end to end, its ``PullConsumer`` following as it does by default)."""
    with instrumented_group(STRETCH_TIME_ENV, "time") as (plan, master, prefix):
        measure = measure_sdk_end_to_end if sdk else measure_end_to_end_by_channel
        measure(plan, WARM_UP_MESSAGES)
        before = counts_of(master.pid, prefix, 0)["stretches"]
        p50, _, cpu = measure(plan, messages)
        after = counts_of(master.pid, prefix, 1)["stretches"]
    sent = messages + END_TO_END_WARM_UP
    stretches = {}
    for stretch, sums in after.items():
        earlier = before.get(stretch, {"ns": 0, "calls": 0})
        stretches[stretch] = {
            "us": round((sums["ns"] - earlier["ns"]) / 1000 / sent, 1),
            "calls": round((sums["calls"] - earlier["calls"]) / sent, 2),
        }
    return {
        "messages": sent,
        "measured": "the SDK's end to end" if sdk else "the end to end by channel",
        "end_to_end_p50_us": round(p50, 1),
        "master_cpu_us_per_message": cpu["master"],
        "stretches": stretches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="measured messages")
    parser.add_argument(
        "--functions", type=int, default=0, help="also each stretch's N most called functions"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument(
        "--time", action="store_true", help="the master's wall µs a message by stretch instead"
    )
    parser.add_argument(
        "--sdk", action="store_true", help="with --time: over the SDK's end to end, not by channel"
    )
    args = parser.parse_args()
    if args.time:
        figures = run_time(args.messages, args.sdk)
        if not args.json:
            print(f"{'stretch':24} {'µs':>8} {'calls':>6}  (each with the stretches it calls)")
            for stretch, sums in figures["stretches"].items():
                print(f"{stretch:24} {sums['us']:8} {sums['calls']:6}")
            print(f"{'the master, CPU':24} {figures['master_cpu_us_per_message']:8}")
        print(json.dumps(figures))
        return
    figures = run(args.messages, args.functions)
    if not args.json:
        print(f"{'stretch':20} {'python':>8} {'c':>8}")
        for stretch, calls in figures["by_stretch"].items():
            print(f"{stretch:20} {calls['python']:8} {calls['c']:8}")
            for function, per_message in figures.get("top_functions", {}).get(stretch, []):
                print(f"    {per_message:8} {function}")
        print(
            f"{'all':20} {figures['python_calls_per_message']:8} {figures['c_calls_per_message']:8}"
        )
        print("the SDK's end to end, this process's calls a message by thread:")
        for role in ("producer", "consumer"):
            calls = figures["sdk"][role]
            print(f"{'SDK ' + role:20} {calls['python']:8} {calls['c']:8}")
            for function, per_message in figures["sdk"].get("top_functions", {}).get(role, []):
                print(f"    {per_message:8} {function}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
