"""Queue locks of RocketMQ 4.x orderly consumers: per (group, queue) the client id that
may consume it, so that during a rebalance two members of a group never take turns on one
queue (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, ``node/remoting/broker_locks.py``).

As RocketMQ's broker: a lock is held by one client id and lapses 60 s after its holder
last locked it (clients renew every 20 s); a client that locks a queue it holds renews
it, and one whose lock lapsed loses the queue to the next client that asks. Unlock ends
only the caller's own lock.

Locks live in the memory of the master that answered them; they are not replicated. A new
master after a failover starts with none, so for up to the clients' own lock lifetime
(30 s, checked before each batch) an old holder may go on consuming a queue that another
member has locked on the new master: orderly consumption is ordered per queue except
across a failover (docs/guarantees.md).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LOCK_LIFETIME_MS = 60_000  # RocketMQ's rocketmq.broker.rebalance.lockMaxLiveTime
LOCKS_MAX = 100_000  # over every group: past it, lapsed locks are dropped, then refusals


@dataclass(frozen=True, order=True)
class LockedQueue:
    topic: str
    broker_name: str
    queue_id: int


@dataclass
class _Holder:
    client_id: str
    renewed_ms: int


class QueueLocks:
    def __init__(self, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000):
        self.clock_ms = clock_ms
        self._groups: dict[str, dict[LockedQueue, _Holder]] = {}
        self._count = 0

    def lock(self, group: str, client_id: str, queues: Iterable[LockedQueue]) -> list[LockedQueue]:
        """Lock or renew ``queues`` for ``client_id``; the ones it now holds, sorted."""
        now = self.clock_ms()
        locks = self._groups.setdefault(group, {})
        held = []
        for queue in queues:
            holder = locks.get(queue)
            if holder is None:
                if self._count >= LOCKS_MAX:
                    self._drop_lapsed(now)
                if self._count >= LOCKS_MAX:
                    continue
                locks[queue] = _Holder(client_id, now)
                self._count += 1
            elif holder.client_id == client_id or lapsed(holder, now):
                holder.client_id, holder.renewed_ms = client_id, now
            else:
                continue
            held.append(queue)
        if not locks:
            del self._groups[group]
        return sorted(held)

    def unlock(self, group: str, client_id: str, queues: Iterable[LockedQueue]) -> None:
        locks = self._groups.get(group)
        if locks is None:
            return
        for queue in queues:
            holder = locks.get(queue)
            if holder is not None and holder.client_id == client_id:
                del locks[queue]
                self._count -= 1
        if not locks:
            del self._groups[group]

    def holder(self, group: str, queue: LockedQueue) -> str | None:
        """The client id holding ``queue`` for ``group`` now, if any."""
        holder = self._groups.get(group, {}).get(queue)
        if holder is None or lapsed(holder, self.clock_ms()):
            return None
        return holder.client_id

    def _drop_lapsed(self, now: int) -> None:
        for group in list(self._groups):
            locks = self._groups[group]
            for queue in [q for q, h in locks.items() if lapsed(h, now)]:
                del locks[queue]
                self._count -= 1
            if not locks:
                del self._groups[group]


def lapsed(holder: _Holder, now: int) -> bool:
    return now - holder.renewed_ms > LOCK_LIFETIME_MS
