"""The official RocketMQ Python client's side of ``bench.lite``, in a process of its own (it
registers the same protobuf names as ferrymq): reads one request as JSON on stdin, prints
its figures as JSON, the last line of stdout.

Requests:
- ``{"op": "send", "endpoints", "topic", "lite_topics": N, "window"}``: one message to each
  of the lite topics ``lite-0`` .. ``lite-<N-1>`` (the body names it), ``window`` sends
  outstanding; answers ``elapsed_s`` and ``failed``.
- ``{"op": "consume", "endpoints", "topic", "group", "consumers": C, "lite_topics": S}``:
  C LitePushConsumers share the lite topics ``lite-0`` .. ``lite-<S-1>`` (each subscribes
  to its slice), until each of their messages is consumed; answers ``subscribe_s`` (all
  subscriptions made) and ``consume_s`` (from then until the last message) and how many
  were consumed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    LitePushConsumer,
    Message,
    MessageListener,
    Producer,
)

WAIT_S = 600.0


def config(request: dict) -> ClientConfiguration:
    return ClientConfiguration(request["endpoints"], Credentials(), request_timeout=10)


def send(request: dict) -> dict:
    producer = Producer(config(request), (request["topic"],))
    producer.startup()
    window = threading.BoundedSemaphore(request.get("window", 256))
    failed = []
    pending = []
    try:
        started = time.monotonic()
        for n in range(request["lite_topics"]):
            message = Message()
            message.topic = request["topic"]
            message.lite_topic = f"lite-{n}"
            message.body = f"lite-{n}".encode()
            window.acquire()
            future = producer.send_async(message)

            def done(f, n=n) -> None:
                window.release()
                if f.exception() is not None:
                    failed.append(n)

            future.add_done_callback(done)
            pending.append(future)
        for future in pending:
            with contextlib.suppress(Exception):
                future.result(timeout=WAIT_S)
        return {"elapsed_s": time.monotonic() - started, "failed": len(failed)}
    finally:
        producer.shutdown()


class Seen(MessageListener):
    def __init__(self) -> None:
        self.bodies: set[str] = set()
        self.lock = threading.Lock()
        self.last_at = 0.0

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.bodies.add(message.body.decode())
            self.last_at = time.monotonic()
        return ConsumeResult.SUCCESS


def subscribed(consumer, name: str, wait_s: float = 30.0) -> None:
    """``subscribe_lite``, tried again while the client's quota is 0 (its settings have not
    arrived yet) or the server timed out (RocketMQ's proxy gives its broker 2 s)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return consumer.subscribe_lite(name)
        except Exception as error:
            again = "exceed quota: 0 " in str(error) or "timeout" in str(error).lower()
            if not again or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def consume(request: dict) -> dict:
    seen = Seen()
    count, consumers = request["lite_topics"], []
    share = -(-count // request["consumers"])
    try:
        started = time.monotonic()
        for index in range(request["consumers"]):
            consumer = LitePushConsumer(
                config(request),
                request["group"],
                request["topic"],
                seen,
                consumption_thread_count=8,
            )
            consumer.startup()
            consumers.append(consumer)
            for n in range(index * share, min(count, (index + 1) * share)):
                subscribed(consumer, f"lite-{n}")
            # 5.1.2's subscribe_lite sends the name's characters (tests/compat/README.md):
            # the whole set, as the client's 30 s sync sends it.
            consumer.subscribe_lite_all()
        subscribed_at = time.monotonic()
        wanted = {f"lite-{n}" for n in range(count)}
        deadline = subscribed_at + WAIT_S
        while time.monotonic() < deadline:
            with seen.lock:
                if wanted <= seen.bodies:
                    break
            time.sleep(0.05)
        with seen.lock:
            got = len(wanted & seen.bodies)
            last = seen.last_at
        return {
            "subscribe_s": subscribed_at - started,
            "consume_s": max(0.0, last - subscribed_at),
            "consumed": got,
        }
    finally:
        for consumer in consumers:
            consumer.shutdown()


def main() -> int:
    request = json.loads(sys.stdin.read())
    answer = {"send": send, "consume": consume}[request["op"]](request)
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
