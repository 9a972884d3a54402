"""Queue locks of 4.x orderly consumers (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ): one client id per
(group, queue), held on the master (``node/queue_locks.py``).

Who may: SUBSCRIBE on the group and on every locked queue's topic (``%RETRY%<group>``: the
group's own); then the master; then the locks.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from node.queue_locks import LockedQueue, QueueLocks
from node.services.caller import Caller
from node.services.permissions import Need, Permissions, group_need, read


class QueueLockService:
    def __init__(
        self, locks: QueueLocks, permissions: Permissions, check_master: Callable[[], None]
    ) -> None:
        self.locks = locks
        self.permissions = permissions
        self.check_master = check_master

    def _allowed(self, caller: Caller, group: str, queues: list[LockedQueue]) -> None:
        needs: list[Need] = [group_need(group)]
        for topic in sorted({queue.topic for queue in queues}):
            needs.extend(read(topic))
        self.permissions.require(caller, needs)
        self.check_master()

    def lock(
        self, caller: Caller, group: str, client_id: str, queues: list[LockedQueue]
    ) -> list[LockedQueue]:
        """The queues ``client_id`` holds for ``group`` now, of those it asked for."""
        self._allowed(caller, group, queues)
        return self.locks.lock(group, client_id, queues)

    def unlock(self, caller: Caller, group: str, client_id: str, queues: list[LockedQueue]) -> None:
        self._allowed(caller, group, queues)
        self.locks.unlock(group, client_id, queues)
