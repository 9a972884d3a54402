"""A node's heartbeats to routing: proof that it is alive, and the lease a master writes
under.

A master may write only while its lease is fresh (``ReplicationRole.write_refusal``: at
most two thirds of ``lease_ms`` since the last heartbeat that routing committed left this
node). Heartbeats go out every ``interval_s``, and at once when the role asks
(``renew_now``: a promotion, a refilled log). A heartbeat that routing did not commit is
sent again after ``RETRY_S``, not a whole interval later: when the Raft leader dies, the
followers fail the commands waiting on it once they elect another, and a master whose last
renewal is already old must renew with the first leader that can commit, or it refuses
writes for an interval more than the election took.

Invariant: the lease is renewed only by a committed heartbeat, and it runs from when that
heartbeat was sent (``on_renewed(sent_at)``), never from when it committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from routing.commands import CommandResult, NodeHeartbeat
from routing.replica import RoutingUnavailable

log = logging.getLogger("ferrymq.heartbeat")
RETRY_S = 0.1  # after a heartbeat routing did not commit


class Heartbeat:
    def __init__(
        self,
        *,
        interval_s: float,
        sample: Callable[[], NodeHeartbeat],
        submit: Callable[[NodeHeartbeat, float], Awaitable[CommandResult]],
        on_renewed: Callable[[float], None],
        register: Callable[[float], Awaitable[None]],
    ) -> None:
        self.interval_s = interval_s
        self.sample = sample  # this node's heartbeat as of now
        self.submit = submit  # (heartbeat, timeout_s) -> what routing answered
        self.on_renewed = on_renewed  # (monotonic time the committed heartbeat left)
        self.register = register  # (deadline): routing forgot this node: join again
        self._now = asyncio.Event()
        self.failures = 0  # heartbeats in a row that routing did not commit

    def renew_now(self) -> None:
        """Send a heartbeat without waiting for the interval (the lease matters now)."""
        self._now.set()

    async def run(self) -> None:
        while True:
            wait_s = self.interval_s if self.failures == 0 else min(RETRY_S, self.interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), wait_s)
            self._now.clear()
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat: renews the lease if routing commits it."""
        heartbeat = self.sample()
        sent_at = time.monotonic()
        try:
            result = await self.submit(heartbeat, self.interval_s * 2)
        except RoutingUnavailable as error:
            self._failed(error.detail)
            return
        except Exception:  # one failed heartbeat must not end them
            log.exception("heartbeat failed")
            self._failed("")
            return
        if result.ok:
            if self.failures:
                log.warning("heartbeat committed again after %d that were not", self.failures)
            self.failures = 0
            self.on_renewed(sent_at)
            return
        self._failed(result.detail)
        if result.reason == "UNKNOWN_NODE":
            try:
                await self.register(time.monotonic() + self.interval_s * 2)
            except Exception:  # the next heartbeat tries again; the loop must not end
                log.exception("registering again failed")

    def _failed(self, detail: str) -> None:
        self.failures += 1
        if self.failures == 1 and detail:
            # Once per outage: retries come every RETRY_S until one commits.
            log.warning("heartbeat not committed (retrying every %.1f s): %s", RETRY_S, detail)
