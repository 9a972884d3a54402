"""The Python calls a node's event loop makes, counted by the stretch of work each was made
in: the figure docs/native-lane.md gives every native step ("the calls it leaves"), read
by ``python -m bench.calls``.

Off unless the node starts with ``FERRYMQ_CALL_COUNT`` set to a path prefix, and for
benchmarks only: a profile function runs on every call of the loop's thread and walks
the stack, so the node runs several times slower while it counts (the counts, not the
timings, are the figure). Each SIGUSR2 writes the counts so far to
``<prefix>.<pid>.<n>`` (n = 0, 1, ...), as JSON, and counting goes on: the difference
of two writes is what happened between them.

A call is counted under the innermost stretch on its stack (``STRETCHES``, matched by
the end of a function's qualified name), else "other"; calls of Python functions and of
C functions from Python are counted apart ("python", "c"). A coroutine's resumption is
a call.

Thread-safety: installed on, and counting, the thread that calls ``install_from_env``
(the event loop's); the signal handler runs there too.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from types import FrameType

ENV = "FERRYMQ_CALL_COUNT"

# (stretch, the function whose frames make it), innermost first where they nest: the
# reput and the writer's answer run inside the ACK intake, all three inside a link's
# buffer callback; the lanes and a request's task inside a connection's frames.
STRETCHES: tuple[tuple[str, str], ...] = (
    ("produce lane", "ProduceLane.take"),
    ("fetch lane", "FetchLane.take"),
    ("request task", "RemotingConnection._handle"),
    ("reput", "ReplicationMaster._reput"),
    ("writer's answer", "_run_on_confirmed"),
    ("ACK intake", "_read_acks.<locals>.take"),
    ("frames read", "RemotingConnection.data_received"),
    ("link buffer", "LinkStream.buffer_updated"),
)


def called(frame: FrameType, event: str, arg: object) -> tuple[str, str] | None:
    """A profile event's call as (kind, function): ("python", its qualified name) or ("c",
    the C function's); None for the other events (returns, exceptions)."""
    if event == "call":
        return "python", frame.f_code.co_qualname
    if event == "c_call":
        return "c", getattr(arg, "__qualname__", None) or type(arg).__name__
    return None


class CallCount:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.counts: Counter[tuple[str, str, str]] = Counter()  # stretch, kind, function
        self.writes = 0
        self._stretch_of: dict[object, str | None] = {}  # code object -> its stretch

    def _stretch(self, frame: FrameType | None) -> str:
        stretch_of = self._stretch_of
        while frame is not None:
            code = frame.f_code
            stretch = stretch_of.get(code, "")
            if stretch == "":
                stretch = stretch_of[code] = next(
                    (name for name, end in STRETCHES if code.co_qualname.endswith(end)), None
                )
            if stretch is not None:
                return stretch
            frame = frame.f_back
        return "other"

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        call = called(frame, event, arg)
        if call is not None:
            self.counts[(self._stretch(frame), *call)] += 1

    def write(self, *_signal) -> str:
        """The counts so far, to the next ``<prefix>.<pid>.<n>``; that path. Each stretch
        has its calls by kind, and by function (``"<kind> <qualified name>"``)."""
        profile = sys.getprofile()
        sys.setprofile(None)  # its own calls are not the node's work
        try:
            return self._write()
        finally:
            sys.setprofile(profile)

    def _write(self) -> str:
        counts: dict[str, dict[str, int]] = {}
        functions: dict[str, dict[str, int]] = {}
        for (stretch, kind, function), calls in list(self.counts.items()):
            kinds = counts.setdefault(stretch, {"python": 0, "c": 0})
            kinds[kind] += calls
            functions.setdefault(stretch, {})[f"{kind} {function}"] = calls
        path = write_numbered(self.prefix, self.writes, {"counts": counts, "functions": functions})
        self.writes += 1
        return path


def write_numbered(prefix: str, write: int, figures: dict) -> str:
    """``figures`` and this process's pid, as JSON, to ``<prefix>.<pid>.<write>``; that
    path. A reader never sees half of it (written aside, then renamed)."""
    path = f"{prefix}.{os.getpid()}.{write}"
    with open(path + ".part", "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), **figures}, f)
    os.replace(path + ".part", path)
    return path


def install_from_env() -> CallCount | None:
    """Count this thread's calls when ``FERRYMQ_CALL_COUNT`` is set (SIGUSR2 writes them);
    None, and nothing installed, when it is not."""
    prefix = os.environ.get(ENV)
    if not prefix:
        return None
    count = CallCount(prefix)
    signal.signal(signal.SIGUSR2, count.write)
    sys.setprofile(count.profile)
    return count
