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

from bench.peers.drills import Timeline, drill_body, drill_seq, event_line
from bench.peers.growth import spread
from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    IN_FLIGHT,
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

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "HOME": self.client_home or os.environ.get("HOME", "")}

    def _call(self, request: dict, timeout_s: float = WAIT_S * 20) -> dict:
        """One workload in a client process of its own: what it printed last."""
        done = subprocess.run(
            [sys.executable, "-m", "bench.peers.official"],
            input=json.dumps({"endpoints": self.endpoints, **request}) + "\n",
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self._environment(),
            timeout=timeout_s,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"official client: {done.stderr.strip()[-600:]}")
        return json.loads(lines[-1])

    def _run(self, workload: str, count: int, queues: int = QUEUES, **extra) -> dict:
        """``workload`` in a client process of its own, on a fresh topic (and group)."""
        self._topics += 1
        topic = f"Bench{self._topics}"
        group = f"bench-{workload.replace('_', '-')}-{self._topics}"
        self.create_topic(topic, queues)
        self.create_group(group)
        try:
            return self._call(
                {"workload": workload, "topic": topic, "group": group, "count": count, **extra}
            )
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

    # ---- failover (bench.peers.drills): the peer provides the node control -------------
    def failover_prepare(self, topic: str) -> None:
        self.create_topic(topic, 1)
        for group in ("drill-steady", "drill-readback"):
            self.create_group(group)
        self._call({"workload": "init_groups", "topic": topic, "groups": ["drill-readback"]})

    def steady_load(self, topic: str) -> OfficialSteadyLoad:
        return OfficialSteadyLoad(
            {"endpoints": self.endpoints, "workload": "steady", "topic": topic},
            self._environment(),
        )

    def read_back(self, topic: str, expected: set[int]) -> set[int]:
        request = {
            "workload": "read_back",
            "topic": topic,
            "group": "drill-readback",
            "expected": sorted(expected),
        }
        return set(self._call(request)["seqs"])

    # ---- how the cost grows (bench.peers.growth): the peer creates the topics -----------
    def spread_send(self, names: list[str], count: int) -> float:
        request = {"workload": "spread_send", "topics": names, "count": count}
        return self._call(request, timeout_s=WAIT_S * 20 + len(names) / 50)["seconds"]

    def backlog_prepare(self, topic: str, groups: tuple[str, ...]) -> None:
        """The topic, and each group's offsets set at the (empty) queues' start: a group
        first seen on a backlog starts at its end (Apache RocketMQ's POP does)."""
        self.create_topic(topic, QUEUES)
        for group in groups:
            self.create_group(group)
        self._call({"workload": "init_groups", "topic": topic, "groups": list(groups)})

    def fill(self, topic: str, count: int) -> float:
        request = {"workload": "fill", "topic": topic, "count": count}
        return self._call(request, timeout_s=WAIT_S * 20 + count / 500)["seconds"]

    def read_all(self, topic: str, count: int, group: str) -> float:
        request = {"workload": "consume_only", "topic": topic, "group": group, "count": count}
        return self._call(request, timeout_s=WAIT_S * 20 + count / 500)["seconds"]

    def backlog_cleanup(self, topic: str) -> None:
        self.delete_topic(topic)


class OfficialSteadyLoad:
    """The ``steady`` workload in a client process: its lines fill the timeline; a line
    on its stdin stops it."""

    def __init__(self, request: dict, environment: dict[str, str]) -> None:
        self.timeline = Timeline()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.peers.official"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            env=environment,
        )
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.timeline.apply_line(line)

    def stop(self) -> None:
        try:
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(WAIT_S * 2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)


# ---- the client process ---------------------------------------------------------------
def _producer(request: dict, topics: tuple[str, ...] = (), timeout_s: float = WAIT_S):
    from rocketmq import ClientConfiguration, Credentials, Producer

    timeout = int(timeout_s)
    config = ClientConfiguration(request["endpoints"], Credentials(), request_timeout=timeout)
    producer = Producer(config, topics or (request["topic"],))
    producer.startup()
    return producer


def _message(topic: str, body: bytes):
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    return message


def _consumer(request: dict, group: str = "", timeout_s: float = WAIT_S, await_s: int = 5):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    timeout = int(timeout_s)
    config = ClientConfiguration(request["endpoints"], Credentials(), request_timeout=timeout)
    consumer = SimpleConsumer(
        config,
        group or request["group"],
        {request["topic"]: FilterExpression()},
        await_duration=await_s,
    )
    consumer.startup()
    return consumer


def _send_windowed(producer, topic, count: int, window: int) -> float:
    """``count`` asynchronous sends, at most ``window`` unacknowledged: seconds for all.
    ``topic`` is one name, or a list with the topic of each message."""
    slots = threading.Semaphore(window)
    failures: list[BaseException] = []
    body = plain_body()
    topics = [topic] * count if isinstance(topic, str) else topic

    def done(future) -> None:
        if future.exception() is not None:
            failures.append(future.exception())
        slots.release()

    started = time.perf_counter()
    for i in range(count):
        if not slots.acquire(timeout=WAIT_S) or failures:
            raise RuntimeError(f"send failed: {failures[:1] or 'timed out'}")
        producer.send_async(_message(topics[i], body)).add_done_callback(done)
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
    fill(request)
    return consume_only(request)


def fill(request: dict) -> dict:
    producer = _producer(request)
    try:
        window = BATCH * BATCHES_IN_FLIGHT
        return {"seconds": _send_windowed(producer, request["topic"], request["count"], window)}
    finally:
        producer.shutdown()


def consume_only(request: dict) -> dict:
    consumer = _consumer(request)
    try:
        received = 0
        deadline = time.monotonic() + WAIT_S * 10 + request["count"] / 1000
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


def spread_send(request: dict) -> dict:
    """One message to each topic (routes fetched, untimed), then ``count`` spread over
    them round-robin, IN_FLIGHT outstanding."""
    names = request["topics"]
    producer = _producer(request, tuple(names))
    try:
        _send_windowed(producer, names, len(names), 64)
        messages = spread(names, request["count"])
        return {"seconds": _send_windowed(producer, messages, len(messages), IN_FLIGHT)}
    finally:
        producer.shutdown()


def init_groups(request: dict) -> dict:
    """One receive per group on the empty topic: the broker sets each group's offsets
    where the queues start."""
    for group in request["groups"]:
        consumer = _consumer(request, group, await_s=1)
        try:
            for attempt in range(20):
                try:
                    consumer.receive(RECEIVE, INVISIBLE_S)
                    break
                except Exception as error:  # settings not yet at the proxy: see consume
                    print(f"receive: {error!r}", file=sys.stderr, flush=True)
                    if attempt == 19:
                        raise
                    time.sleep(0.5)
        finally:
            consumer.shutdown()
    return {"groups": request["groups"]}


def steady(request: dict) -> dict:
    """Numbered sends one at a time (3 s each at most, the client's retries inside) and
    a consumer of the same topic, each event a line on stdout (``drills.event_line``),
    until a line arrives on stdin; then the consumer catches up for a moment."""
    out = threading.Lock()

    def emit(*event) -> None:
        with out:
            print(event_line(*event), flush=True)

    stop_producing, stop_consuming = threading.Event(), threading.Event()
    last_received = [time.monotonic()]

    def produce() -> None:
        try:
            producer = _producer(request, timeout_s=3)
        except Exception as error:
            emit("E", f"producer: {error!r}".replace("\n", " "))
            return
        seq = 0
        while not stop_producing.is_set():
            seq += 1
            started = time.monotonic()
            try:
                producer.send(_message(request["topic"], drill_body(seq)))
                emit("A", seq, started, time.monotonic())
            except Exception as error:
                emit("F", time.monotonic(), type(error).__name__)
        producer.shutdown()

    def consume() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        consumer = None
        while consumer is None and not stop_consuming.is_set():
            try:
                consumer = _consumer(request, "drill-steady", timeout_s=3, await_s=1)
            except Exception as error:
                emit("E", f"consumer: {error!r}".replace("\n", " "))
                time.sleep(1)
        while consumer is not None and not stop_consuming.is_set():
            try:
                messages = consumer.receive(RECEIVE, INVISIBLE_S) or ()
            except Exception:
                time.sleep(0.1)
                continue
            for message in messages:
                emit("R", drill_seq(message.body))
                last_received[0] = time.monotonic()
                consumer.ack_async(message)
        if consumer is not None:
            consumer.shutdown()

    threads = [threading.Thread(target=produce, daemon=True)]
    threads.append(threading.Thread(target=consume, daemon=True))
    for thread in threads:
        thread.start()
    sys.stdin.readline()
    stop_producing.set()
    threads[0].join(WAIT_S)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and time.monotonic() - last_received[0] < 3:
        time.sleep(0.2)
    stop_consuming.set()
    threads[1].join(WAIT_S)
    return {"done": True}


def read_back(request: dict) -> dict:
    """A fresh group from the beginning: every drill number it gets, until it has every
    one of ``expected`` or nothing new came for 5 s."""
    consumer = _consumer(request, await_s=1)
    expected = set(request["expected"])
    found: set[int] = set()
    try:
        # Nothing new for 5 s ends it, counted from the first receive that worked (the
        # proxy refuses receives until the consumer's settings have reached it).
        deadline = time.monotonic() + 120
        last_new = None
        while not expected <= found and time.monotonic() < deadline:
            try:
                messages = consumer.receive(RECEIVE, INVISIBLE_S) or ()
            except Exception:
                time.sleep(0.2)
                continue
            now = time.monotonic()
            if messages or last_new is None:
                last_new = now
            elif now - last_new > 5:
                break
            for message in messages:
                found.add(drill_seq(message.body))
                consumer.ack_async(message)
        return {"seqs": sorted(found)}
    finally:
        consumer.shutdown()


WORKLOADS = {
    "sequential_send": sequential_send,
    "windowed_send": windowed_send,
    "end_to_end": end_to_end,
    "consume": consume,
    "fill": fill,
    "consume_only": consume_only,
    "spread_send": spread_send,
    "init_groups": init_groups,
    "steady": steady,
    "read_back": read_back,
}


def main() -> None:
    request = json.loads(sys.stdin.readline())
    result = WORKLOADS[request["workload"]](request)
    print(json.dumps(result), flush=True)
    # The client's threads do not all end on shutdown; the result is out.
    os._exit(0)


if __name__ == "__main__":
    main()
