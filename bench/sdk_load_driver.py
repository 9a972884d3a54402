"""The open-loop load of ``bench.saturation`` through ferrymq's own SDK:
``python -m bench.sdk_load_driver ACCESS TOPIC GROUP SIZE_BYTES DRAIN_S RATE:SECONDS[,...]``.

The same steps, pacing and events as the Java drivers (``bench/java/LoadSteps.java``), so
that one node or a group is ramped through its fastest client as Kafka is through its own:
one ``Producer`` on an asyncio loop (uvloop) queueing each send with ``enqueue_async`` when
the clock allows it (sends made while earlier ones are in flight share a request: the SDK's
coalescing, its default settings; a full queue holds the pacing loop back, as a full
buffer blocks Kafka's ``send``), and one ``PullConsumer`` subscribed in a group, in a
process of its own (the reader of a real deployment is another program, and in this one
it would share the producer's interpreter). ``ACCESS`` is the nodes' gRPC addresses,
comma-separated.

A send's latency runs from the moment the pacing allowed it to its receipt; end to end
from the message's born timestamp to the consumer's poll. Error kinds: ``code:NAME`` for
a ``FerryError`` (the SDK's own retries spent), else the exception's class.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import ctypes
import functools
import json
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass, field

from ferrymq.client import Message, Producer, PullConsumer
from ferrymq.client.errors import FerryError

SETTLE_S = 3.0
# A pacing loop behind its clock sends without waiting; it lets the loop run the sends it
# made every this many, or they would wait for it to catch up (as they did at 80,000/s).
YIELD_EVERY = 64


def latency_bounds_us() -> list[int]:
    """50 µs .. 120 s, about 5 % apart (``LoadSteps``' buckets): percentiles within 5 %."""
    bounds: list[int] = []
    bound = 50.0
    while bound <= 120_000_000:
        rounded = round(bound)
        if not bounds or bounds[-1] < rounded:
            bounds.append(rounded)
        bound *= 1.05
    return bounds


BOUNDS_US = latency_bounds_us()
BUCKETS = len(BOUNDS_US) + 1


def bucket_of(micros: int) -> int:
    """The bucket ``LoadSteps.Histogram.record`` puts ``micros`` in."""
    return bisect.bisect_left(BOUNDS_US, micros)


def histogram_json(counts, largest_us: int) -> dict[str, float]:
    """p50, p99 (each its bucket's upper bound) and max, in ms, as ``LoadSteps`` prints."""
    total = sum(counts)

    def quantile(q: float) -> float:
        if total == 0:
            return 0.0
        rank, seen = math.ceil(q * total), 0
        for index, count in enumerate(counts):
            seen += count
            if seen >= rank:
                return (BOUNDS_US[index] if index < len(BOUNDS_US) else largest_us) / 1000.0
        return largest_us / 1000.0

    return {"p50": quantile(0.50), "p99": quantile(0.99), "max": largest_us / 1000.0}


@dataclass
class Step:
    """What one step's sends count (the producer's loop is their only writer)."""

    acked: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    publish: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    publish_max_us: int = 0

    def answered(self, due: float) -> None:
        micros = int((time.perf_counter() - due) * 1e6)
        self.publish[bucket_of(micros)] += 1
        self.publish_max_us = max(self.publish_max_us, micros)

    def failed(self, error: BaseException, due: float) -> None:
        kind = f"code:{error.code_name}" if isinstance(error, FerryError) else type(error).__name__
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.samples.setdefault(kind, str(error))
        self.answered(due)


class Arrivals:
    """What the consumer's process counts, in shared memory: arrivals in all, and the end
    to end of the arrivals in each step (the step not yet ended when they arrive; after
    the last, a slot of their own). An arrival and a step's end take ``counts`` each, so
    every arrival is in exactly one step's event (``end_step``), as ``LoadSteps.java``
    counts for the Java drivers."""

    def __init__(self, steps: int) -> None:
        slots = steps + 1  # the last for arrivals after the last step ended
        self.counts = multiprocessing.Lock()
        self.step = multiprocessing.Value(ctypes.c_int64, 0, lock=False)
        self.received = multiprocessing.Value(ctypes.c_int64, 0, lock=False)
        self.ready = multiprocessing.Event()
        self.stop = multiprocessing.Event()
        self.per_step = multiprocessing.Array(ctypes.c_int64, slots, lock=False)
        self.end_to_end = multiprocessing.Array(ctypes.c_int64, slots * BUCKETS, lock=False)
        self.largest_us = multiprocessing.Array(ctypes.c_int64, slots, lock=False)

    def record(self, born_ms: int) -> None:
        micros = max(0, time.time_ns() // 1_000_000 - born_ms) * 1000
        with self.counts:
            step = self.step.value
            self.end_to_end[step * BUCKETS + bucket_of(micros)] += 1
            self.largest_us[step] = max(self.largest_us[step], micros)
            self.per_step[step] += 1
            self.received.value += 1

    def end_step(self, step: int) -> tuple[int, int]:
        """End ``step``: its arrivals and the arrivals in all, read at one moment; later
        arrivals count in the next step."""
        with self.counts:
            self.step.value = step + 1
            return self.per_step[step], self.received.value

    def of_step(self, step: int) -> dict[str, float]:
        """The end to end of an ended step's arrivals."""
        counts = self.end_to_end[step * BUCKETS : (step + 1) * BUCKETS]
        return histogram_json(counts, self.largest_us[step])


def consume(access: str, topic: str, group: str, arrivals: Arrivals) -> None:
    """The consumer's process: poll the group's queues until asked to stop."""
    with PullConsumer(access, group) as consumer:
        consumer.subscribe(topic)
        arrivals.ready.set()
        while not arrivals.stop.is_set():
            for message in consumer.poll(wait_s=0.5):
                arrivals.record(message.born_timestamp_ms)


def emit(event: dict) -> None:
    print(json.dumps(event), flush=True)


async def run_step(
    producer: Producer, topic: str, body: bytes, rate: float, seconds: float
) -> tuple[Step, int, float]:
    """One step's sends, each made when the clock allows it: (its counts, how many, its
    seconds until answered or ``SETTLE_S`` after the last send)."""
    step = Step()
    count = int(rate * seconds)
    unanswered = 0

    def answered(due: float, receipt: asyncio.Future) -> None:
        nonlocal unanswered
        unanswered -= 1
        error = receipt.exception() if not receipt.cancelled() else asyncio.CancelledError()
        if error is not None:  # counted by kind, as the Java drivers count them
            step.failed(error, due)
        else:
            step.acked += 1
            step.answered(due)

    start = time.perf_counter()
    for index in range(count):
        due = start + index / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        elif index % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # behind the clock: the sends made so far still go
        # Queued, or waiting for room as Kafka's send blocks on a full buffer.
        receipt = await producer.enqueue_async(Message(topic, body))
        unanswered += 1
        receipt.add_done_callback(functools.partial(answered, due))
    settle = time.perf_counter() + SETTLE_S
    while unanswered and time.perf_counter() < settle:
        await asyncio.sleep(0.02)
    return step, count, time.perf_counter() - start


async def produce(
    access: str, topic: str, size: int, steps: list[tuple[float, float]], arrivals: Arrivals
) -> int:
    """Every step in turn, its event printed at its end: acknowledged sends in all."""
    body = b"x" * size
    acked = 0
    with Producer(access) as producer:
        for index, (rate, seconds) in enumerate(steps):
            step, sent, took_s = await run_step(producer, topic, body, rate, seconds)
            acked += step.acked
            received, received_in_all = arrivals.end_step(index)
            emit(
                {
                    "event": "step",
                    "rate": rate,
                    "seconds": seconds,
                    "elapsed_ms": int(took_s * 1000),
                    "sent": sent,
                    "acked": step.acked,
                    "errors": dict(sorted(step.errors.items())),
                    "error_samples": step.samples,
                    "publish_ms": histogram_json(step.publish, step.publish_max_us),
                    "received": received,
                    "end_to_end_ms": arrivals.of_step(index),
                    "backlog": max(0, acked - received_in_all),
                }
            )
    return acked


def main(argv: list[str]) -> None:
    access, topic, group, size, drain_s, spec = argv
    steps = [tuple(float(x) for x in each.split(":")) for each in spec.split(",")]
    arrivals = Arrivals(len(steps))
    reader = multiprocessing.get_context("fork").Process(
        target=consume, args=(access, topic, f"{group}-consumer", arrivals), daemon=True
    )
    reader.start()
    try:
        if not arrivals.ready.wait(60):
            raise RuntimeError("the consumer did not start")
        with contextlib.suppress(ImportError):
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        acked = asyncio.run(produce(access, topic, int(size), steps, arrivals))
        drain_until = time.monotonic() + float(drain_s)
        while time.monotonic() < drain_until and arrivals.received.value < acked:
            time.sleep(0.05)
        received = arrivals.received.value
        emit({"event": "drained", "received": received, "backlog": max(0, acked - received)})
    finally:
        arrivals.stop.set()
        reader.join(10)
        if reader.is_alive():
            reader.kill()
    emit({"event": "done"})


if __name__ == "__main__":
    main(sys.argv[1:])
