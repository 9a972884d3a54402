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

Heartbeats run in the node's routing host (``node/routing_host.py``), a process apart from
message work; ``renew_now`` is the one method called from outside their loop. ``times``
keeps what the metrics export: how long each heartbeat took to commit, and how old the
lease was when a heartbeat renewed it (past two thirds of the lease, a master refuses
writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from routing.commands import CommandResult, NodeHeartbeat
from routing.replica import RoutingUnavailable

log = logging.getLogger("ferrymq.heartbeat")
RETRY_S = 0.1  # after a heartbeat routing did not commit
ROUND_TRIP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
LEASE_AGE_BUCKETS_S = (1.05, 1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 5.0, 10.0)


@dataclass
class HeartbeatTimes:
    """Written by the heartbeat's loop only, read at scrape time (a reader may see one
    observation half counted: plain numbers, no lock). ``round_trips[i]`` and
    ``lease_ages[i]`` count observations in bucket i alone (the last: above every bound)."""

    committed: int = 0
    failed: int = 0
    withheld: int = 0  # not sent: the node's process showed no progress (``sample``)
    round_trips: list[int] = field(default_factory=lambda: [0] * (len(ROUND_TRIP_BUCKETS_S) + 1))
    round_trip_sum_s: float = 0.0
    round_trip_max_s: float = 0.0
    lease_ages: list[int] = field(default_factory=lambda: [0] * (len(LEASE_AGE_BUCKETS_S) + 1))
    lease_age_sum_s: float = 0.0
    lease_age_max_s: float = 0.0

    def observe(self, round_trip_s: float, lease_age_s: float | None) -> None:
        self.committed += 1
        self.round_trips[_bucket(ROUND_TRIP_BUCKETS_S, round_trip_s)] += 1
        self.round_trip_sum_s += round_trip_s
        self.round_trip_max_s = max(self.round_trip_max_s, round_trip_s)
        if lease_age_s is not None:
            self.lease_ages[_bucket(LEASE_AGE_BUCKETS_S, lease_age_s)] += 1
            self.lease_age_sum_s += lease_age_s
            self.lease_age_max_s = max(self.lease_age_max_s, lease_age_s)


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    return next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))


class Heartbeat:
    def __init__(
        self,
        *,
        interval_s: float,
        sample: Callable[[], NodeHeartbeat | None],
        submit: Callable[[NodeHeartbeat, float], Awaitable[CommandResult]],
        on_renewed: Callable[[float], None],
        register: Callable[[float], Awaitable[None]],
    ) -> None:
        self.interval_s = interval_s
        # This node's heartbeat as of now; None while its process shows no progress (a
        # heartbeat vouches for the process that serves, not for whoever sends it).
        self.sample = sample
        self.submit = submit  # (heartbeat, timeout_s) -> what routing answered
        self.on_renewed = on_renewed  # (monotonic time the committed heartbeat left)
        self.register = register  # (deadline): routing forgot this node: join again
        self._now = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop ``run`` runs on
        self._renew_asked = False  # renew_now before run began
        self.failures = 0  # heartbeats in a row that routing did not commit
        self.times = HeartbeatTimes()
        self._renewed_sent_at: float | None = None  # when the last committed one left

    def renew_now(self) -> None:
        """Send a heartbeat without waiting for the interval (the lease matters now).
        Callable from any thread."""
        loop = self._loop
        if loop is None:
            self._renew_asked = True
        elif loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(self._now.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._renew_asked:
            self._now.set()
        while True:
            wait_s = self.interval_s if self.failures == 0 else min(RETRY_S, self.interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), wait_s)
            self._now.clear()
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat: renews the lease if routing commits it."""
        heartbeat = self.sample()
        if heartbeat is None:
            self.times.withheld += 1
            return
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
            now = time.monotonic()
            last = self._renewed_sent_at
            self.times.observe(now - sent_at, None if last is None else now - last)
            self._renewed_sent_at = sent_at
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
        self.times.failed += 1
        if self.failures == 1 and detail:
            # Once per outage: retries come every RETRY_S until one commits.
            log.warning("heartbeat not committed (retrying every %.1f s): %s", RETRY_S, detail)
