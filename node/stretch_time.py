"""The wall time a node's event loop spends in each stretch of work, read by ``python -m
bench.calls --time``: what ``node/call_count.py``'s counts do not say, the microseconds,
system calls included (an answer's write on loopback costs a wake-up of its reader).

Off unless the node starts with ``FERRYMQ_STRETCH_TIME`` set to a path prefix, and for
benchmarks only. Each stretch is a function of the node (``TIMED``) replaced, before the
node is built, by a wrapper that adds its wall time (``perf_counter_ns``) and its calls
to the stretch's; a stretch's time includes the stretches it calls (the reput is inside
the confirmation, which is inside a link's buffer callback). A wrapper costs ~0.3 µs a
call, so the figures are a little above the node's own. Each SIGUSR2 writes the sums so
far to ``<prefix>.<pid>.<n>`` (n = 0, 1, ...), as JSON; the difference of two writes is
what happened between them. ``FERRYMQ_CALL_COUNT`` answers SIGUSR2 too: one at a time.

Thread-safety: the wrappers add without a lock; the timed functions run on the event
loop's thread.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
from collections.abc import Callable
from time import perf_counter_ns

from node.call_count import write_numbered

ENV = "FERRYMQ_STRETCH_TIME"

# (stretch, module, the function: "Class.method" or a module's "function"), outermost
# first; a module's function is timed where that module calls it by its global name.
TIMED: tuple[tuple[str, str, str], ...] = (
    ("frames read", "node.remoting.connection", "RemotingConnection.data_received"),
    ("produce lane", "node.remoting.produce_lane", "ProduceLane.take"),
    ("the native write", "ha.master", "ReplicationMaster.write_log"),
    ("the answer made ahead", "ha.master", "ReplicationMaster.acknowledge_now"),
    ("fetch lane", "node.remoting.fetch_lane", "FetchLane.take"),
    ("link buffer", "ha.link_stream", "LinkStream.buffer_updated"),
    ("confirmation", "ha.master", "ReplicationMaster._recompute"),
    ("writer's answer", "ha.master", "_run_on_confirmed"),
    ("reput", "ha.master", "ReplicationMaster._reput"),
    ("tail read's answer", "node.tail_reads", "TailReads.on_run"),
    ("an answer's write", "node.remoting.connection", "RemotingConnection._write_answer"),
)


class StretchTime:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.sums: dict[str, list[int]] = {}  # stretch -> [ns, calls]
        self.writes = 0

    def wrap(self, owner: object, name: str, stretch: str) -> None:
        """Replace ``owner.name`` by a function that times each call under ``stretch``."""
        function: Callable = getattr(owner, name)
        sums = self.sums.setdefault(stretch, [0, 0])

        @functools.wraps(function)
        def timed(*args, **kwargs):
            started = perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                sums[0] += perf_counter_ns() - started
                sums[1] += 1

        setattr(owner, name, timed)

    def install(self, timed: tuple[tuple[str, str, str], ...] = TIMED) -> None:
        for stretch, module, path in timed:
            self.wrap(*resolve(module, path), stretch)

    def write(self, *_signal) -> str:
        """The sums so far, to the next ``<prefix>.<pid>.<n>``; that path."""
        stretches = {s: {"ns": ns, "calls": calls} for s, (ns, calls) in self.sums.items()}
        path = write_numbered(self.prefix, self.writes, {"stretches": stretches})
        self.writes += 1
        return path


def resolve(module: str, path: str) -> tuple[object, str]:
    """A ``TIMED`` function's owner (its class, or its module) and its name there."""
    owner: object = importlib.import_module(module)
    *classes, name = path.split(".")
    for attribute in classes:
        owner = getattr(owner, attribute)
    return owner, name


def install_from_env() -> StretchTime | None:
    """Time the stretches when ``FERRYMQ_STRETCH_TIME`` is set (SIGUSR2 writes them); None,
    and nothing replaced, when it is not."""
    prefix = os.environ.get(ENV)
    if not prefix:
        return None
    timing = StretchTime(prefix)
    timing.install()
    signal.signal(signal.SIGUSR2, timing.write)
    return timing
