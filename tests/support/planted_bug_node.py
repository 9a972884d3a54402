"""A node process with a planted bug, for the chaos checker's self-test
(``tests/chaos/test_chaos_run.py``): once promoted to master, it discards the last
``DROPPED_RECORDS`` records of its log, acknowledged or not, before it records its epoch.

The node's own code has no such path: this module patches the promotion of
``ha.role.ReplicationRole`` in its own process, then runs the normal entry point
(``python -m tests.support.planted_bug_node --config ...`` is ``python -m node --config ...``
with the bug). The test has ``ferrymq.launcher.cluster`` launch nodes with it (``NODE_MODULE``).
"""

from __future__ import annotations

import sys

from ha.role import ReplicationRole
from node.run import main

DROPPED_RECORDS = 50

_promote = ReplicationRole._become_master


async def _promote_dropping_the_tail(
    self: ReplicationRole, epoch: int, in_sync: frozenset[str]
) -> None:
    if epoch >= self.epochs.last_epoch and self.epochs.entries:  # a promotion it will make
        await self.slave.stop()  # no more of the old master's records first
        commitlog = self.store.commitlog
        term_start = self.epochs.last.start_offset
        tail = list(commitlog.iterate(term_start, commitlog.write_offset))
        if tail:
            self.store.truncate_to(tail[-DROPPED_RECORDS:][0].physical_offset)
    await _promote(self, epoch, in_sync)


def plant() -> None:
    """Patch the promotion, in this process only: importing the module (the chaos test
    names it) must not change the pytest process's own ``ReplicationRole``."""
    ReplicationRole._become_master = _promote_dropping_the_tail


if __name__ == "__main__":
    plant()
    sys.exit(main())
