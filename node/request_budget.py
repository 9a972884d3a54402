"""Bytes of client requests held while they are handled: a node-wide total, counted per
owner (a remoting connection; later a gRPC peer).

Why: a request keeps its bytes for as long as its handler runs, and some wait long (a long
poll, a send waiting for its replicas). Without a bound one client pinned ~800 MiB with 48
waiting pulls on one connection. A door asks ``acquire`` before it hands a request to
its handler and calls ``release`` with the same size once the handler is done, whatever
its outcome:

- ``acquire`` refuses (False, nothing held) a request that would take the node past
  ``max_bytes``: the door answers it busy at once (remoting: SYSTEM_BUSY, RocketMQ's
  flow-control answer; gRPC: RESOURCE_EXHAUSTED) and drops it;
- ``over(owner)``: the owner holds more than ``max_bytes_per_owner``. A door that can stop
  reading an owner does (remoting: ``pause_reading``, so the peer's writes back up, as
  TCP flow control) until ``relieved(owner)``, below half of it; a door that cannot
  refuses the owner's next requests instead.

Nothing here is specific to a protocol: an owner is any hashable the door chooses.
Thread-safety: owned by the node's event loop (both doors run on it).
"""

from __future__ import annotations

from collections.abc import Hashable


class RequestBudget:
    def __init__(self, max_bytes: int, max_bytes_per_owner: int) -> None:
        if max_bytes <= 0 or max_bytes_per_owner <= 0:
            raise ValueError("request byte limits must be positive")
        self.max_bytes = max_bytes
        self.max_bytes_per_owner = max_bytes_per_owner
        # An owner over its limit is read again once it holds less than this.
        self.low_bytes_per_owner = max_bytes_per_owner // 2
        self.total = 0
        self._held: dict[Hashable, int] = {}

    @property
    def owners(self) -> int:
        """Owners holding bytes now."""
        return len(self._held)

    def held(self, owner: Hashable) -> int:
        return self._held.get(owner, 0)

    def acquire(self, owner: Hashable, size: int) -> bool:
        """Hold ``size`` bytes for ``owner``; False, holding nothing, when the node's
        total would pass ``max_bytes``."""
        if self.total + size > self.max_bytes:
            return False
        self.total += size
        self._held[owner] = self._held.get(owner, 0) + size
        return True

    def release(self, owner: Hashable, size: int) -> None:
        """Give back what one ``acquire`` held."""
        self.total -= size
        left = self._held.get(owner, 0) - size
        if left > 0:
            self._held[owner] = left
        else:
            self._held.pop(owner, None)

    def over(self, owner: Hashable) -> bool:
        """The owner holds more than its limit: take no more of its requests."""
        return self._held.get(owner, 0) > self.max_bytes_per_owner

    def relieved(self, owner: Hashable) -> bool:
        """The owner holds less than half its limit again: take its requests again."""
        return self._held.get(owner, 0) < self.low_bytes_per_owner
