"""A node's processes: its own and its routing host's (``node/routing_host.py``), which is
its child. What stops, starves or inspects a node as a whole (the chaos faults, the tests'
pauses, a benchmark's memory) goes through ``process_tree``."""

from __future__ import annotations

import contextlib
import os


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (Linux ``/proc``), parents first."""
    tree, index = [pid], 0
    while index < len(tree):
        parent = tree[index]
        index += 1
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    tree.extend(int(child) for child in children.read().split())
    return tree


def signal_node(pid: int, signum: int) -> None:
    """``signum`` to the node's every process: SIGSTOP and SIGCONT pause and resume the
    whole node (a stalled machine), not only the process that serves clients."""
    for each in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signum)
