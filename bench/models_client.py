"""The official RocketMQ Python client's side of ``bench.models``, in a process of its own (it
registers the same protobuf names as ferrymq): reads one request as JSON on stdin, prints
what it observed as JSON, the last line of stdout. It reports what happened and judges
nothing: ``bench.models`` compares it with what RocketMQ's model promises.

Requests (each with ``endpoints``, ``topic`` and ``group``):
- ``{"op": "priority", "priorities": [...]}``: one message per priority (body
  ``m<index>-p<priority>``), then one SimpleConsumer receive of at most 16; answers the
  bodies in the order received and the priority each message carried. With
  ``"priorities": []`` it sends nothing (another client sent them) and only receives.
- ``{"op": "recall", "delay_s"}``: two messages due in ``delay_s`` seconds, ``recalled``
  and ``kept``; the first is recalled by the handle of its send receipt; a SimpleConsumer
  receives until ``delay_s + GRACE_S``; answers the recall's outcome and each arrival
  (body, seconds after the requested delivery time).
- ``{"op": "lite", "lite_topics": [...], "per_lite_topic": N}``: N messages to each lite
  topic (interleaved, body ``<lite topic>/<n>``), then a LitePushConsumer subscribes to the
  first lite topic only and consumes with one thread (so the order consumed is the order
  delivered), until its N messages or ``WAIT_S``, then ``STRAY_S`` more for strays;
  answers the bodies consumed, in order.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ConsumeResult,
    FilterExpression,
    LitePushConsumer,
    Message,
    MessageListener,
    Producer,
    SimpleConsumer,
)

from bench.lite_client import config, subscribed

AWAIT_S = 5  # a receive's long poll: Apache's proxy raises anything shorter to 5 s
INVISIBLE_S = 30
GRACE_S = 10.0  # how long past the delivery time an arrival (or a stray) is waited for
WAIT_S = 60.0
STRAY_S = 3.0  # after a lite consumer has what it wants: how long others are waited for
SETTINGS_WAIT_S = 10.0
SETTLE_S = 1.0  # sends stored, then dispatched to their queues, before the first receive


def described(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def started_producer(request: dict) -> Producer:
    producer = Producer(config(request), (request["topic"],))
    producer.startup()
    return producer


def simple_consumer(request: dict) -> SimpleConsumer:
    consumer = SimpleConsumer(
        config(request),
        request["group"],
        {request["topic"]: FilterExpression("*")},
        await_duration=AWAIT_S,
    )
    consumer.startup()
    # 5.1.2's SimpleConsumer does not wait for its settings at startup (its push consumers
    # do); Apache's proxy fails a receive from a client whose settings it has not had yet.
    consumer._init_settings_event.wait(SETTINGS_WAIT_S)
    return consumer


def priority(request: dict) -> dict:
    """Everything is stored before the one receive, so its order is the server's choice."""
    if request["priorities"]:
        producer = started_producer(request)
        try:
            for index, value in enumerate(request["priorities"]):
                message = Message()
                message.topic = request["topic"]
                message.body = f"m{index}-p{value}".encode()
                message.priority = value
                producer.send(message)
        finally:
            producer.shutdown()
    time.sleep(SETTLE_S)
    consumer = simple_consumer(request)
    try:
        received = consumer.receive(16, INVISIBLE_S)
        for message in received:
            consumer.ack(message)
    finally:
        consumer.shutdown()
    return {
        "bodies": [m.body.decode() for m in received],
        "priority_fields": [m.priority for m in received],
    }


def delayed(topic: str, body: str, due_s: int) -> Message:
    """5.1.2 writes ``delivery_timestamp`` into the Timestamp's seconds, whatever its
    docstring says (milliseconds): it is given in seconds here."""
    message = Message()
    message.topic = topic
    message.body = body.encode()
    message.delivery_timestamp = due_s
    return message


def recall(request: dict) -> dict:
    """The consumer keeps receiving past the delivery time: a recalled message that is
    delivered anyway shows up, and so does one delivered late."""
    due_s = int(time.time()) + request["delay_s"]
    producer = started_producer(request)
    try:
        receipts = {
            body: producer.send(delayed(request["topic"], body, due_s))
            for body in ("recalled", "kept")
        }
        handle = receipts["recalled"].recall_handle
        try:
            outcome = {"recalled_id": producer.recall_message(request["topic"], handle)}
        except Exception as error:
            outcome = {"recall_error": described(error)}
    finally:
        producer.shutdown()
    arrivals = []
    consumer = simple_consumer(request)
    try:
        while time.time() < due_s + GRACE_S:
            for message in consumer.receive(16, INVISIBLE_S):
                arrivals.append(
                    {"body": message.body.decode(), "after_due_s": round(time.time() - due_s, 2)}
                )
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return {
        **outcome,
        "recall_handles": {body: bool(r.recall_handle) for body, r in receipts.items()},
        "arrivals": arrivals,
    }


class InOrder(MessageListener):
    """The bodies in the order the listener saw them (one consumption thread)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.bodies.append(message.body.decode())
        return ConsumeResult.SUCCESS

    def count(self, prefix: str) -> int:
        with self.lock:
            return sum(body.startswith(prefix) for body in self.bodies)


def send_lite(request: dict) -> None:
    producer = started_producer(request)
    try:
        for n in range(request["per_lite_topic"]):
            for lite_topic in request["lite_topics"]:
                message = Message()
                message.topic = request["topic"]
                message.lite_topic = lite_topic
                message.body = f"{lite_topic}/{n}".encode()
                producer.send(message)
    finally:
        producer.shutdown()


def lite(request: dict) -> dict:
    send_lite(request)
    wanted = request["lite_topics"][0]
    seen = InOrder()
    consumer = LitePushConsumer(
        config(request), request["group"], request["topic"], seen, consumption_thread_count=1
    )
    consumer.startup()
    try:
        subscribed(consumer, wanted)
        # 5.1.2's subscribe_lite sends the name's characters (tests/compat/README.md): the
        # whole set, as the client's 30 s sync sends it, makes the subscription.
        consumer.subscribe_lite_all()
        deadline = time.monotonic() + WAIT_S
        while seen.count(f"{wanted}/") < request["per_lite_topic"]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(STRAY_S)
    finally:
        consumer.shutdown()
    with seen.lock:
        return {"bodies": list(seen.bodies)}


def main() -> int:
    request = json.loads(sys.stdin.read())
    answer = {"priority": priority, "recall": recall, "lite": lite}[request["op"]](request)
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
