"""The figures of RocketMQ's broker runtime table (GET_BROKER_RUNTIME_INFO: what
``mqadmin clusterList`` and ``brokerStatus`` print), counted by this node.

RocketMQ's broker counts messages put and got since it started (``StoreStatsService``),
samples the counts to give rates over the last 10 s, 1 min and 10 min (``putTps``:
"<10 s> <1 min> <10 min>"), and at each local midnight keeps the counts as "this morning"
and "yesterday morning" (``BrokerStats``), so tools print yesterday's and today's traffic as
differences. ``BrokerStats`` does the same with what the services report for every door
(``node.metrics_rpc.RpcMetrics.stored`` / ``delivered``): messages stored by sends, and
messages delivered by pulls, fetches and receives.

``InFlight`` counts the sends a node took and has not answered yet (waiting for their
flush or their slaves among them), and how long the oldest has waited: the node's
``sendThreadPoolQueueSize`` and ``…HeadWaitTimeMills``. ferrymq has no worker pool in front
of its requests; the send queue is what it holds open, and reads have nothing queued (a
long poll is parked, as in RocketMQ's PullRequestHoldService, not queued).

Thread-safety: fed and read on the node's event loop.
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

SAMPLE_EVERY_S = 1.0
# RocketMQ's windows: "<10 s> <1 min> <10 min>".
TPS_WINDOWS_S = (10, 60, 600)
SAMPLES_KEPT = TPS_WINDOWS_S[-1] + 2


class InFlight:
    """Requests taken and not answered yet, in the order they came."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._since: dict[int, float] = {}
        self._tokens = itertools.count()

    def enter(self) -> int:
        token = next(self._tokens)
        self._since[token] = self.clock()
        return token

    def leave(self, token: int) -> None:
        self._since.pop(token, None)

    @property
    def size(self) -> int:
        return len(self._since)

    def oldest_wait_ms(self) -> int:
        """How long the oldest request has been open (0 with none)."""
        for since in self._since.values():  # insertion order: the first is the oldest
            return int((self.clock() - since) * 1000)
        return 0


class KeyedRates:
    """Messages per key (a topic, a consumer group) and their rate over the last minute
    (``topicStatus``'s put TPS, ``consumerProgress``'s consume TPS): the counts are copied
    every ``MARK_EVERY_S``, a minute of copies kept."""

    MARK_EVERY_S = 10.0
    WINDOW_S = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.counts: dict[str, int] = {}
        self._marks: deque[tuple[float, dict[str, int]]] = deque([(clock(), {})])

    def add(self, key: str, count: int) -> None:
        self.counts[key] = self.counts.get(key, 0) + count

    def mark_if_due(self) -> None:
        now = self.clock()
        if now - self._marks[-1][0] >= self.MARK_EVERY_S:
            self._marks.append((now, dict(self.counts)))
            while len(self._marks) > 1 and now - self._marks[1][0] >= self.WINDOW_S:
                self._marks.popleft()

    def rate(self, key: str) -> float:
        """Per second, since the oldest copy at most a minute and a mark old."""
        at, counts = self._marks[0]
        elapsed = self.clock() - at
        if elapsed <= 0:
            return 0.0
        return (self.counts.get(key, 0) - counts.get(key, 0)) / elapsed


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    put: int
    got: int


@dataclass(frozen=True)
class DailyTotals:
    """Counts since start at the last two local midnights (0 before the first)."""

    put_yesterday_morning: int = 0
    put_today_morning: int = 0
    got_yesterday_morning: int = 0
    got_today_morning: int = 0


class BrokerStats:
    """Messages put and got since this node started, their rates and daily marks."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:
        self.clock = clock
        self.today = today
        self.put_total = 0
        self.put_bytes = 0
        self.got_total = 0
        self.sends = InFlight(clock)
        self.topics_put = KeyedRates(clock)
        self.groups_got = KeyedRates(clock)
        self.topics_got = KeyedRates(clock)  # the console's messages out per second
        self.daily = DailyTotals()
        self._day = today()
        self._samples: deque[Sample] = deque([Sample(clock(), 0, 0)], maxlen=SAMPLES_KEPT)

    def stored(self, topic: str, count: int, size: int) -> None:
        self.put_total += count
        self.put_bytes += size
        self.topics_put.add(topic, count)

    def delivered(self, group: str, count: int, topic: str = "") -> None:
        self.got_total += count
        self.groups_got.add(group, count)
        if topic:
            self.topics_got.add(topic, count)

    def topic_got_rate(self, topic: str) -> float:
        """Messages per second delivered from ``topic`` here over the last minute."""
        return self.topics_got.rate(topic)

    def sample(self) -> None:
        """Called once a second (the node's housekeeping): a point for the rates, and the
        daily marks at a local midnight."""
        self._samples.append(Sample(self.clock(), self.put_total, self.got_total))
        self.topics_put.mark_if_due()
        self.groups_got.mark_if_due()
        self.topics_got.mark_if_due()
        day = self.today()
        if day != self._day:
            self._day = day
            d = self.daily
            self.daily = DailyTotals(
                d.put_today_morning, self.put_total, d.got_today_morning, self.got_total
            )

    def rates(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(put, got) messages per second over each of ``TPS_WINDOWS_S``, from the sample
        closest to that long ago and the counts now (a node up for less: since it started)."""
        now = Sample(self.clock(), self.put_total, self.got_total)
        puts, gots = [], []
        for window in TPS_WINDOWS_S:
            start = self._samples[0]
            for sample in reversed(self._samples):
                if now.at - sample.at >= window:
                    start = sample
                    break
            elapsed = now.at - start.at
            puts.append((now.put - start.put) / elapsed if elapsed > 0 else 0.0)
            gots.append((now.got - start.got) / elapsed if elapsed > 0 else 0.0)
        return tuple(puts), tuple(gots)


def tps_text(rates: tuple[float, ...]) -> str:
    """RocketMQ's form: the rates over 10 s, 1 min and 10 min, space-separated."""
    return " ".join(f"{rate:.2f}" for rate in rates)
