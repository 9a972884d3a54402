"""A node process whose interpreter is contended: a thread of its own holds the GIL for
``HOLD_S`` at a time, over and over, inside one C call (``usleep`` through
``ctypes.PyDLL``, which keeps the GIL), letting the other threads in only between calls,
as a process with many busy threads on a busy host does. Every other thread of the
process (the event loop, the liveness loop, pysyncobj's) waits up to ``HOLD_S`` each
time it wants the GIL back (after each read, write or select). For
``tests/cluster/test_liveness.py``: such a node must keep its lease and never be taken for
dead. ``python -m tests.support.gil_hog_node --config ...`` is ``python -m node --config
...`` with the hog (``ferrymq.launcher.cluster.NODE_MODULE``)."""

from __future__ import annotations

import ctypes
import sys
import threading

from node.run import main
from node.server import Node

HOLD_S = 0.1

_start = Node._start_background_tasks


def _hog_forever() -> None:
    libc = ctypes.PyDLL(None)  # a PyDLL call keeps the GIL for its whole length
    while True:
        libc.usleep(int(HOLD_S * 1_000_000))


def _start_with_hog(self: Node) -> None:
    _start(self)
    threading.Thread(target=_hog_forever, name="gil-hog", daemon=True).start()


def plant() -> None:
    """Patch this process's node only (importing the module must change nothing)."""
    Node._start_background_tasks = _start_with_hog


if __name__ == "__main__":
    plant()
    sys.exit(main())
