"""Failover side by side: kill -9 of the master under a steady producer and consumer.

For each system, a producer sends one numbered 1 KiB message at a time through the
system's usual client (its retries and route refreshes included: they are part of what is
measured), and a consumer reads the same topic all along. A drill waits until every
replica is back in sync, kills the node that takes the writes (ferrymq's master, the
Kafka partition leader, Apache RocketMQ's master broker) with SIGKILL, and records the
time from the kill to the first acknowledged send the dead node cannot have answered
(``first_ack_after``); it then lets the producer run on the new master, restarts the
killed process and waits until it has rejoined before the next drill. After the last
drill a fresh consumer reads the topic from the beginning, and every acknowledged number
it does not find is an acknowledged message lost.

This module is the bookkeeping (timelines, the figures, the loss) and the drill loop,
on any ``FailoverTarget``; each system's module provides the target.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from bench.peers.workloads import BODY_BYTES, log, percentile

# A send acknowledged this soon after the kill may have been answered by the old master
# just before it died; a retried send, the only way to reach the new master, takes longer.
OLD_MASTER_WINDOW_S = 0.05
RECOVERY_TIMEOUT_S = 180.0  # a drill without an acknowledged send by then counts as none
_SEQ = struct.Struct("<q")
_PADDING = bytes(range(256)) * 4


def drill_body(seq: int) -> bytes:
    """1 KiB whose first 8 bytes are ``seq``."""
    return _SEQ.pack(seq) + _PADDING[_SEQ.size : BODY_BYTES]


def drill_seq(body: bytes) -> int:
    return _SEQ.unpack_from(body)[0]


class Timeline:
    """What the steady producer and consumer saw, appended from their threads (or parsed
    from a client process's lines): monotonic seconds, the same clock in every process of
    the machine."""

    def __init__(self) -> None:
        self.acks: list[tuple[int, float, float]] = []  # (seq, send started, acknowledged)
        self.failures: list[tuple[float, str]] = []  # (when, what) for sends that failed
        self.received: set[int] = set()  # seqs the steady consumer got
        self.errors: list[str] = []  # the load's own troubles (a thread that died)
        self.lock = threading.Lock()

    def ack(self, seq: int, started: float, acked: float) -> None:
        with self.lock:
            self.acks.append((seq, started, acked))

    def fail(self, when: float, what: str) -> None:
        with self.lock:
            self.failures.append((when, what[:200]))

    def acked_count(self) -> int:
        return len(self.acks)

    def acked_seqs(self) -> set[int]:
        with self.lock:
            return {seq for seq, _, _ in self.acks}

    def first_ack_after(self, killed_at: float, since: int = 0) -> float | None:
        """When the first send the killed node cannot have acknowledged was: one started
        after the kill, or acknowledged later than ``OLD_MASTER_WINDOW_S`` after it.
        Only acknowledgements recorded from index ``since`` on are looked at (those
        recorded before the kill were acknowledged before it)."""
        with self.lock:
            acks = self.acks[max(0, since) :]
        return first_ack_after(acks, killed_at)

    def failures_between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(1 for when, _ in self.failures if start <= when <= end)

    # ---- a client process's report, one line per event --------------------------------
    def apply_line(self, line: str) -> None:
        """``A seq started acked`` | ``F when what`` | ``R seq`` | ``E what`` (see
        ``event_line``); other lines are ignored."""
        kind, _, rest = line.strip().partition(" ")
        try:
            if kind == "A":
                seq, started, acked = rest.split()
                self.ack(int(seq), float(started), float(acked))
            elif kind == "F":
                when, _, what = rest.partition(" ")
                self.fail(float(when), what)
            elif kind == "R":
                self.received.add(int(rest))
            elif kind == "E":
                self.errors.append(rest)
        except ValueError:
            pass


def event_line(kind: str, *values) -> str:
    """One event of a client process (``Timeline.apply_line`` reads it back)."""
    return " ".join([kind, *(f"{v:.6f}" if isinstance(v, float) else str(v) for v in values)])


def first_ack_after(acks: Iterable[tuple[int, float, float]], killed_at: float) -> float | None:
    later = [
        acked
        for _, started, acked in acks
        if acked > killed_at and (started > killed_at or acked - killed_at > OLD_MASTER_WINDOW_S)
    ]
    return min(later) if later else None


def lost(acked: set[int], read: set[int]) -> list[int]:
    """Acknowledged numbers the final read did not find, in order."""
    return sorted(acked - read)


@dataclass
class Drill:
    killed: str  # which node (and what else it was: "k2 (also the KRaft controller)")
    unavailable_ms: float | None  # None: no acknowledged send within RECOVERY_TIMEOUT_S
    failed_sends: int  # sends that failed (after the client's retries) during the drill


@dataclass
class FailoverFigures:
    system: str
    client: str = ""
    how: str = ""  # what was killed and what the clients do about it
    drills: list[Drill] = field(default_factory=list)
    acknowledged: int = 0
    read_back: int = 0
    lost: int = 0
    lost_sample: list[int] = field(default_factory=list)
    steady_consumer_received: int = 0
    failed_sends: int = 0
    unavailable_ms_p50: float | None = None
    unavailable_ms_p99: float | None = None
    unavailable_ms_max: float | None = None
    not_recovered: int = 0
    error: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def summarize(figures: FailoverFigures, acked: set[int], read: set[int]) -> FailoverFigures:
    """Fill in the percentiles and the loss from the drills and the two sets."""
    times = [d.unavailable_ms for d in figures.drills if d.unavailable_ms is not None]
    figures.not_recovered = sum(1 for d in figures.drills if d.unavailable_ms is None)
    if times:
        figures.unavailable_ms_p50 = round(percentile(times, 0.5), 1)
        figures.unavailable_ms_p99 = round(percentile(times, 0.99), 1)
        figures.unavailable_ms_max = round(max(times), 1)
    missing = lost(acked, read)
    figures.acknowledged = len(acked)
    figures.read_back = len(read & acked)
    figures.lost = len(missing)
    figures.lost_sample = missing[:20]
    return figures


# ---- the drill loop ---------------------------------------------------------------------
class SteadyLoad(Protocol):
    timeline: Timeline

    def stop(self) -> None:
        """Stop the producer, let the consumer catch up for a moment, stop it."""
        ...


class FailoverTarget(Protocol):
    name: str
    client: str
    failover_how: str  # one sentence: what a drill kills, how the client finds the new one

    def failover_prepare(self, topic: str) -> None: ...

    def steady_load(self, topic: str) -> SteadyLoad: ...

    def master_node(self, topic: str) -> tuple[str, str]:
        """(the key of the node taking ``topic``'s writes, a label for the report)."""
        ...

    def kill_node(self, key: str) -> None:
        """SIGKILL first thing, and return once the process is gone."""
        ...

    def restart_node(self, key: str) -> None: ...

    def wait_rejoined(self, topic: str) -> None:
        """Until every replica is back and in sync."""
        ...

    def read_back(self, topic: str, expected: set[int]) -> set[int]:
        """Every drill number a fresh consumer reads from the beginning of ``topic``."""
        ...


def _progress(timeline: Timeline, more: int, what: str, timeout_s: float = 60.0) -> None:
    target = timeline.acked_count() + more
    deadline = time.monotonic() + timeout_s
    while timeline.acked_count() < target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {timeline.acked_count()} of {target} acknowledged")
        time.sleep(0.01)


def run_drills(
    target: FailoverTarget,
    drills: int,
    acks_before: int = 50,
    acks_after: int = 200,
    topic: str = "FailoverDrill",
) -> FailoverFigures:
    """``drills`` kills of the master under a steady load; the figures."""
    figures = FailoverFigures(target.name, target.client, target.failover_how)
    target.failover_prepare(topic)
    target.wait_rejoined(topic)
    load = target.steady_load(topic)
    stopped = ""  # why the drills ended early, if they did
    try:
        try:
            _drill_loop(target, drills, load, figures, acks_before, acks_after, topic)
        except TimeoutError as error:
            # What the drills measured stands; the losses are still counted below.
            stopped = f"after {len(figures.drills)} drill(s): {error}"
            log(f"  {target.name}: {stopped}")
    finally:
        load.stop()
    timeline = load.timeline
    acked = timeline.acked_seqs()
    figures.failed_sends = len(timeline.failures)
    figures.steady_consumer_received = len(timeline.received & acked)
    figures.error = "; ".join(([stopped] if stopped else []) + timeline.errors[:3])
    read = target.read_back(topic, acked)
    summarize(figures, acked, read)
    log(
        f"  {target.name}: {figures.acknowledged} acknowledged, {figures.read_back} read back, "
        f"{figures.lost} lost"
    )
    return figures


def _drill_loop(
    target: FailoverTarget,
    drills: int,
    load: SteadyLoad,
    figures: FailoverFigures,
    acks_before: int,
    acks_after: int,
    topic: str,
) -> None:
    for number in range(1, drills + 1):
        target.wait_rejoined(topic)
        _progress(load.timeline, acks_before, "load before the kill")
        key, label = target.master_node(topic)
        before = load.timeline.acked_count()
        # The clock starts as the signal goes: kill_node returns once the process is
        # gone, which is later.
        killed_at = time.monotonic()
        target.kill_node(key)
        deadline = killed_at + RECOVERY_TIMEOUT_S
        first = None
        while first is None and time.monotonic() < deadline:
            time.sleep(0.01)
            first = load.timeline.first_ack_after(killed_at, since=before)
        unavailable = None if first is None else round((first - killed_at) * 1000, 1)
        if first is not None:
            # The new master alone for a while before the old one returns.
            _progress(load.timeline, acks_after, "load after the failover")
        drill = Drill(label, unavailable, 0)
        target.restart_node(key)
        drill.failed_sends = load.timeline.failures_between(killed_at, time.monotonic())
        figures.drills.append(drill)
        shown = "no acknowledged send" if unavailable is None else f"{unavailable:.0f} ms"
        log(
            f"  {target.name} drill {number}: killed {label}; writes unavailable: {shown}; "
            f"{drill.failed_sends} sends failed"
        )
    target.wait_rejoined(topic)
    _progress(load.timeline, acks_before, "load after the last restart")
