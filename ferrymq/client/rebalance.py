"""Which queues a member of a consumer group reads: RocketMQ's averaging allocation.

Every member computes the same answer from the same sorted member list, so no coordinator
is needed; while members join or leave, two may briefly read the same queue (at-least-once).
"""

from __future__ import annotations


def allocate(queue_ids: list[int], members: list[str], me: str) -> list[int]:
    """Contiguous, nearly equal shares of the sorted queues, in sorted-member order."""
    if me not in members or not queue_ids:
        return []
    queues = sorted(queue_ids)
    ordered = sorted(members)
    index, count, total = ordered.index(me), len(ordered), len(queues)
    base, extra = divmod(total, count)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return queues[start : start + size]
