"""Live members of consumer groups, from heartbeats.

A client's id is the ``x-mq-client-id`` metadata every official client (and ferrymq's SDK)
sends. A member is live while heartbeats keep arriving (the official clients send one every
10 s; members expire after ``EXPIRY_MS``) and leaves at once on NotifyClientTermination.
Pull consumers rebalance queues over the sorted member list, so every member computes the
same assignment from the same list. Membership is soft state: a restarted node learns it
again from the next heartbeats.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

EXPIRY_MS = 30_000
MAX_MEMBERS_PER_GROUP = 10_000  # bounds memory against a client minting ids


class GroupMembers:
    def __init__(self, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000):
        self.clock_ms = clock_ms
        self._groups: dict[str, dict[str, int]] = {}

    def heartbeat(self, group: str, client_id: str) -> None:
        members = self._groups.setdefault(group, {})
        if client_id not in members and len(members) >= MAX_MEMBERS_PER_GROUP:
            self._expire(members)
            if len(members) >= MAX_MEMBERS_PER_GROUP:
                return
        members[client_id] = self.clock_ms()

    def leave(self, group: str, client_id: str) -> None:
        self._groups.get(group, {}).pop(client_id, None)

    def live(self, group: str) -> list[tuple[str, int]]:
        """(client id, last heartbeat ms) of live members, sorted by id."""
        members = self._groups.get(group, {})
        self._expire(members)
        return sorted(members.items())

    def _expire(self, members: dict[str, int]) -> None:
        oldest = self.clock_ms() - EXPIRY_MS
        for client_id in [c for c, seen in members.items() if seen < oldest]:
            del members[client_id]


def client_id_of(context) -> str:
    """The caller's ``x-mq-client-id``; empty when it sent none."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return ""
