"""What every system is measured on, and the one interface each system's module fills in.

A ``Peer`` (ferrymq, NATS JetStream, Redis Streams, RabbitMQ quorum queues, Apache Kafka,
Apache RocketMQ) starts its own 3-node group on loopback and runs five workloads with
1 KiB bodies through its usual Python client. ``measure`` runs them in turn and turns what
they return into ``Figures``; a workload that fails is recorded with its error and the
others still run.
"""

from __future__ import annotations

import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from bench.peers.processes import ProcessRegistry

BODY_BYTES = 1024
IN_FLIGHT = 256
# Batched/pipelined sends: each system's batching API with the same shape, BATCH messages
# per request (pipeline, burst) and BATCHES_IN_FLIGHT requests outstanding.
BATCH = 128
BATCHES_IN_FLIGHT = 16
WARMUP = 50  # messages sent before any clock starts (connections, routes, JIT caches)
WAIT_S = 30.0  # the longest any single step may wait before the workload fails
_STAMP = struct.Struct("<q")
_PADDING = bytes(range(256)) * 4


def stamped_body() -> bytes:
    """1 KiB whose first 8 bytes are ``time.monotonic_ns()`` now: the consumer (in this
    process, on the same clock) computes produce→consume latency from the body alone."""
    return _STAMP.pack(time.monotonic_ns()) + _PADDING[_STAMP.size : BODY_BYTES]


def age_s(body: bytes) -> float:
    """Seconds since ``stamped_body`` made ``body``."""
    return (time.monotonic_ns() - _STAMP.unpack_from(body)[0]) / 1e9


def plain_body() -> bytes:
    return _PADDING[:BODY_BYTES]


class Peer(Protocol):
    """One system under test. Sends wait for the system's acknowledgement at its stated
    durability; every method cleans up the destination it used."""

    name: str
    client: str  # the Python client library and version
    durability: str  # what an acknowledgement means, stated next to the figures

    def start(self, registry: ProcessRegistry) -> None: ...

    def stop(self) -> None: ...

    def sequential_send(self, count: int) -> list[float]:
        """One send at a time, each acknowledged before the next: seconds per send."""
        ...

    def inflight_send(self, count: int, in_flight: int) -> float:
        """``in_flight`` sends outstanding at all times: seconds for ``count`` sends."""
        ...

    def batched_send(self, count: int) -> float:
        """The system's batching/pipelining API, ``BATCH`` per request, ``BATCHES_IN_
        FLIGHT`` requests outstanding: seconds for ``count`` acknowledged sends."""
        ...

    def end_to_end(self, count: int) -> list[float]:
        """Send one message, wait until a running consumer has it, repeat: seconds from
        the start of each send to its delivery."""
        ...

    def consume(self, count: int) -> float:
        """``count`` messages stored first (not timed), then read: seconds to read all."""
        ...


@dataclass(frozen=True)
class Scale:
    sequential: int
    inflight: int
    batched: int
    end_to_end: int
    consume: int


SCALES = {
    "full": Scale(
        sequential=3000, inflight=40_000, batched=150_000, end_to_end=2000, consume=150_000
    ),
    "quick": Scale(sequential=600, inflight=8000, batched=30_000, end_to_end=400, consume=30_000),
    "smoke": Scale(sequential=50, inflight=512, batched=1024, end_to_end=30, consume=1024),
}


@dataclass
class Figures:
    """One system's figures (None where a workload did not run or failed)."""

    name: str
    client: str = ""
    durability: str = ""
    available: bool = True
    unavailable_reason: str = ""
    sequential_send_p50_us: float | None = None
    sequential_send_p99_us: float | None = None
    sequential_send_msgs_per_s: float | None = None
    inflight_256_send_msgs_per_s: float | None = None
    batched_send_msgs_per_s: float | None = None
    end_to_end_p50_us: float | None = None
    end_to_end_p99_us: float | None = None
    consume_msgs_per_s: float | None = None
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def log(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def _attempt(figures: Figures, workload: str, run: Callable[[], None]) -> None:
    started = time.monotonic()
    try:
        run()
        log(f"  {figures.name} {workload}: done in {time.monotonic() - started:.1f} s")
    except Exception as error:
        figures.errors[workload] = f"{type(error).__name__}: {error}"
        log(f"  {figures.name} {workload} failed: {error!r}")
        log(traceback.format_exc(limit=4))


def measure(peer: Peer, scale: Scale) -> Figures:
    """Every workload on a started peer, one after the other."""
    figures = Figures(peer.name, peer.client, peer.durability)
    started = time.monotonic()

    def sequential() -> None:
        took = peer.sequential_send(scale.sequential)
        figures.sequential_send_p50_us = round(percentile(took, 0.5) * 1e6)
        figures.sequential_send_p99_us = round(percentile(took, 0.99) * 1e6)
        figures.sequential_send_msgs_per_s = round(len(took) / sum(took))

    def inflight() -> None:
        seconds = peer.inflight_send(scale.inflight, IN_FLIGHT)
        figures.inflight_256_send_msgs_per_s = round(scale.inflight / seconds)

    def batched() -> None:
        figures.batched_send_msgs_per_s = round(scale.batched / peer.batched_send(scale.batched))

    def end_to_end() -> None:
        took = peer.end_to_end(scale.end_to_end)
        figures.end_to_end_p50_us = round(percentile(took, 0.5) * 1e6)
        figures.end_to_end_p99_us = round(percentile(took, 0.99) * 1e6)

    def consume() -> None:
        figures.consume_msgs_per_s = round(scale.consume / peer.consume(scale.consume))

    for workload, run in (
        ("sequential_send", sequential),
        ("inflight_256_send", inflight),
        ("batched_send", batched),
        ("end_to_end", end_to_end),
        ("consume", consume),
    ):
        _attempt(figures, workload, run)
    figures.seconds = round(time.monotonic() - started, 1)
    return figures
