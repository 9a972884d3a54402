"""A node process whose event loop is kept busy by its own CPU-bound work: every
``STALL_EVERY_S`` it computes for ``STALL_S`` without yielding (holding the GIL but for
the interpreter's switch interval), as a node saturated by message work does. For
``tests/cluster/test_liveness.py``: such a node must keep its lease and never be taken
for dead. ``python -m tests.support.stalled_loop_node --config ...`` is ``python -m node
--config ...`` with the stalls (``ferrymq.launcher.cluster.NODE_MODULE``)."""

from __future__ import annotations

import asyncio
import sys
import time

from node.run import main
from node.server import Node

STALL_S = 2.5  # longer than two thirds of the 3 s lease: a heartbeat behind it is late
STALL_EVERY_S = 3.0

_start = Node._start_background_tasks


async def _stall_forever() -> None:
    while True:
        await asyncio.sleep(STALL_EVERY_S)
        busy_until = time.monotonic() + STALL_S
        while time.monotonic() < busy_until:  # computes, never yields to the loop
            pass


def _start_with_stalls(self: Node) -> None:
    _start(self)
    self._stalls = asyncio.ensure_future(_stall_forever())


def plant() -> None:
    """Patch this process's node only (importing the module must change nothing)."""
    Node._start_background_tasks = _start_with_stalls


if __name__ == "__main__":
    plant()
    sys.exit(main())
