"""The five workloads through the official RocketMQ Python client (``rocketmq-python-client``),
against any broker speaking RocketMQ 5 gRPC: Apache RocketMQ's proxy and ferrymq alike, so
that the same client measures both.

The client registers the same protobuf names as ferrymq's generated modules, so it never
runs in the benchmark's interpreter: ``OfficialClientWorkloads`` (imported by the peers)
runs each workload as ``python -m bench.peers.official``, which reads the workload as
JSON on stdin and prints its timings as the last line of stdout. This module imports the
client only in that process, and nothing of ferrymq.

The client has no batch API: "batched" keeps BATCH * BATCHES_IN_FLIGHT asynchronous sends
outstanding, the same number of messages in flight as the other peers' batches.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time

from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    WAIT_S,
    WARMUP,
    age_s,
    plain_body,
    stamped_body,
)

QUEUES = 8
RECEIVE = 32  # messages a receive may return (the proxy's limit)
INVISIBLE_S = 60
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class OfficialClientWorkloads:
    """A peer's workloads through the official client; the peer fills in ``endpoints``
    and the topic and group administration."""

    endpoints = ""

    def __init__(self) -> None:
        self._topics = 0
        self.client_home = ""  # the client writes its logs under $HOME: set by start()

    def create_topic(self, topic: str, queues: int) -> None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def create_group(self, group: str) -> None:
        raise NotImplementedError

    def delete_group(self, group: str) -> None:
        raise NotImplementedError

    def _run(self, workload: str, count: int, queues: int = QUEUES, **extra) -> dict:
        """``workload`` in a client process of its own, on a fresh topic (and group)."""
        self._topics += 1
        topic = f"Bench{self._topics}"
        group = f"bench-{workload.replace('_', '-')}-{self._topics}"
        self.create_topic(topic, queues)
        self.create_group(group)
        try:
            request = {
                "endpoints": self.endpoints,
                "workload": workload,
                "topic": topic,
                "group": group,
                "count": count,
                **extra,
            }
            done = subprocess.run(
                [sys.executable, "-m", "bench.peers.official"],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                cwd=REPO,
                env={**os.environ, "HOME": self.client_home or os.environ.get("HOME", "")},
                timeout=WAIT_S * 20,
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"official client: {done.stderr.strip()[-600:]}")
            return json.loads(lines[-1])
        finally:
            self.delete_topic(topic)
            self.delete_group(group)

    def sequential_send(self, count: int) -> list[float]:
        return self._run("sequential_send", count)["took"]

    def inflight_send(self, count: int, in_flight: int) -> float:
        return self._run("windowed_send", count, window=in_flight)["seconds"]

    def batched_send(self, count: int) -> float:
        return self._run("windowed_send", count, window=BATCH * BATCHES_IN_FLIGHT)["seconds"]

    def end_to_end(self, count: int) -> list[float]:
        return self._run("end_to_end", count, queues=1)["took"]

    def consume(self, count: int) -> float:
        return self._run("consume", count)["seconds"]


# ---- the client process ---------------------------------------------------------------
def _producer(request: dict):
    from rocketmq import ClientConfiguration, Credentials, Producer

    config = ClientConfiguration(request["endpoints"], Credentials(), request_timeout=int(WAIT_S))
    producer = Producer(config, (request["topic"],))
    producer.startup()
    return producer


def _message(topic: str, body: bytes):
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    return message


def _consumer(request: dict):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(request["endpoints"], Credentials(), request_timeout=int(WAIT_S))
    consumer = SimpleConsumer(
        config, request["group"], {request["topic"]: FilterExpression()}, await_duration=5
    )
    consumer.startup()
    return consumer


def _send_windowed(producer, topic: str, count: int, window: int) -> float:
    """``count`` asynchronous sends, at most ``window`` unacknowledged: seconds for all."""
    slots = threading.Semaphore(window)
    failures: list[BaseException] = []
    body = plain_body()

    def done(future) -> None:
        if future.exception() is not None:
            failures.append(future.exception())
        slots.release()

    started = time.perf_counter()
    for _ in range(count):
        if not slots.acquire(timeout=WAIT_S) or failures:
            raise RuntimeError(f"send failed: {failures[:1] or 'timed out'}")
        producer.send_async(_message(topic, body)).add_done_callback(done)
    for _ in range(window):
        if not slots.acquire(timeout=WAIT_S):
            raise RuntimeError("sends not acknowledged in time")
    if failures:
        raise RuntimeError(f"send failed: {failures[0]!r}")
    return time.perf_counter() - started


def sequential_send(request: dict) -> dict:
    producer = _producer(request)
    try:
        body = plain_body()
        for _ in range(WARMUP):
            producer.send(_message(request["topic"], body))
        took = []
        for _ in range(request["count"]):
            message = _message(request["topic"], body)
            started = time.perf_counter()
            producer.send(message)
            took.append(time.perf_counter() - started)
        return {"took": took}
    finally:
        producer.shutdown()


def windowed_send(request: dict) -> dict:
    producer = _producer(request)
    try:
        _send_windowed(producer, request["topic"], WARMUP, 8)
        return {
            "seconds": _send_windowed(
                producer, request["topic"], request["count"], request["window"]
            )
        }
    finally:
        producer.shutdown()


def end_to_end(request: dict) -> dict:
    """A consumer thread long-polls the topic's one queue; the producer sends one message
    at a time and waits until the consumer has it."""
    arrived: queue.Queue[float] = queue.Queue()
    stop = threading.Event()
    consumer = _consumer(request)

    def consume() -> None:
        # The client's asynchronous calls look for the calling thread's event loop.
        asyncio.set_event_loop(asyncio.new_event_loop())
        while not stop.is_set():
            try:
                messages = consumer.receive(RECEIVE, INVISIBLE_S)
            except Exception as error:
                print(f"receive: {error!r}", file=sys.stderr, flush=True)
                continue
            for message in messages or ():
                arrived.put(age_s(message.body))
                consumer.ack_async(message)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = _producer(request)
    try:
        # A new group starts reading where the queue ends when it first polls: send until
        # the consumer has one, so that no timed message is sent before that.
        while True:
            producer.send(_message(request["topic"], stamped_body()))
            try:
                arrived.get(timeout=1.0)
                break
            except queue.Empty:
                continue
        took = []
        for i in range(WARMUP + request["count"]):
            producer.send(_message(request["topic"], stamped_body()))
            latency = arrived.get(timeout=WAIT_S)
            if i >= WARMUP:
                took.append(latency)
        return {"took": took}
    finally:
        stop.set()
        producer.shutdown()
        reader.join(WAIT_S)
        consumer.shutdown()


def consume(request: dict) -> dict:
    producer = _producer(request)
    try:
        _send_windowed(producer, request["topic"], request["count"], BATCH * BATCHES_IN_FLIGHT)
    finally:
        producer.shutdown()
    consumer = _consumer(request)
    try:
        received = 0
        deadline = time.monotonic() + WAIT_S * 10
        started = time.perf_counter()
        while received < request["count"]:
            try:
                messages = consumer.receive(RECEIVE, INVISIBLE_S) or ()
            except Exception as error:
                # Apache RocketMQ's proxy refuses receives until the consumer's settings
                # have reached it over telemetry, which startup does not wait for.
                print(f"receive: {error!r}", file=sys.stderr, flush=True)
                messages = ()
            for message in messages:
                consumer.ack_async(message)
                received += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {received} of {request['count']}")
        return {"seconds": time.perf_counter() - started}
    finally:
        consumer.shutdown()


WORKLOADS = {
    "sequential_send": sequential_send,
    "windowed_send": windowed_send,
    "end_to_end": end_to_end,
    "consume": consume,
}


def main() -> None:
    request = json.load(sys.stdin)
    result = WORKLOADS[request["workload"]](request)
    print(json.dumps(result), flush=True)
    # The client's threads do not all end on shutdown; the result is out.
    os._exit(0)


if __name__ == "__main__":
    main()
