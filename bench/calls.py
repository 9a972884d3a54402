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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections import Counter

from bench.cluster import (
    END_TO_END_WARM_UP,
    all_in_sync,
    create_topic,
    master_of,
    measure_end_to_end,
    measure_end_to_end_by_channel,
    start_cluster,
    stop_cluster,
)
from ferrymq.launcher.polling import until
from node.call_count import ENV, called

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


def run(messages: int, functions: int = 0) -> dict:
    root = tempfile.mkdtemp(prefix="ferrymq-bench-calls-")
    prefix = os.path.join(root, "calls")
    os.environ[ENV] = prefix  # the nodes started now count; this process does not
    try:
        plan = start_cluster(os.path.join(root, "cluster"), "SYNC")
        os.environ.pop(ENV)
        create_topic(plan)
        master = master_of(plan)
        until(lambda: all_in_sync(plan, master) or None, 60, "all three in sync")
        measure_end_to_end_by_channel(plan, WARM_UP_MESSAGES)
        before = counts_of(master.pid, prefix, 0)
        measure_end_to_end_by_channel(plan, messages)
        after = counts_of(master.pid, prefix, 1)
        sdk = sdk_calls(plan, messages, functions)
    finally:
        os.environ.pop(ENV, None)
        stop_cluster(os.path.join(root, "cluster"))
        shutil.rmtree(root, ignore_errors=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="measured messages")
    parser.add_argument(
        "--functions", type=int, default=0, help="also each stretch's N most called functions"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
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
