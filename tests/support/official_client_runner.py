"""Runs one scenario with the official ``rocketmq-python-client`` (5.1.2) and reports it as
JSON lines on stdout. Started by ``tests.support.official_client.run_official_at`` in a process of
its own: the official client registers the same protobuf names as ferrymq's generated
modules, so the two must never share an interpreter. Imports nothing of ferrymq.

Usage: python tests/support/official_client_runner.py < scenario.json
Every line is ``{"event": ..., ...}``; the last is ``{"event": "done"}`` unless it failed,
in which case it is ``{"event": "error", "type": <exception class>, "message": ...}``.

``namespace`` configures the client with a RocketMQ namespace
(``tests/node/test_namespaces.py``).

Recall (``produce``): a message spec's ``recall`` recalls it that many times after its
send (``recalled`` or ``recall_failed`` events), and the scenario's ``recall_handles``
(``[[body, handle], ...]``, from an earlier run's ``sent`` events) are recalled after the
sends.

Transactions (``transaction``): ``wait_for_check_s`` waits for the first orphan check
(``checked``; the node's answer to the resolution it sends is ``check_ended``), then keeps
the producer connected until that answer came, and then until the file
``shutdown_when_file_exists`` names exists, if the scenario names one.

``pin`` (``"host:port"``) sends every call to that node, whatever the routes name
(``tests/cluster/test_failover_any_node.py`` talks to a slave).

Security scenarios (``tests/node/test_security_auth.py``) add ``access_key``/``secret_key`` (the
client's ``Credentials``), ``tls`` (``tls_enable``; the CA comes from gRPC's
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``), and ``signing``: ``{"date_offset_s": N}`` signs with
a clock that is off, ``{"omit_authorization": true}`` drops the header. The client stamps
``x-mq-date-time`` with its local time (a bug of 5.1.2), so the runner runs in UTC.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    LiteSimpleConsumer,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType
from rocketmq.v5.util import signature as signature_module

_print_lock = threading.Lock()


def emit(event: str, **fields) -> None:
    with _print_lock:
        print(json.dumps({"event": event, **fields}), flush=True)


def described(message) -> dict:
    return {
        "id": message.message_id,
        "body": message.body.decode("latin-1"),
        "tag": message.tag,
        "keys": sorted(message.keys or []),
        "group": message.message_group,
        "attempt": message.delivery_attempt,
        "delivery_timestamp": message.delivery_timestamp,
        "priority": message.priority,
        "lite_topic": message.lite_topic,
        "topic": message.topic,
        "corrupted": message.corrupted,
        "properties": dict(message.properties or {}),
    }


def error_fields(error: Exception) -> dict:
    return {"type": type(error).__name__, "message": str(error)}


def outgoing(spec: dict) -> Message:
    message = Message()
    message.topic = spec["topic"]
    # ``pad_to`` makes a large body without sending it through the pipe.
    message.body = spec["body"].encode("latin-1").ljust(spec.get("pad_to", 0), b"y")
    if spec.get("tag"):
        message.tag = spec["tag"]
    if spec.get("keys"):
        message.keys = spec["keys"]
    if spec.get("group"):
        message.message_group = spec["group"]
    if spec.get("delivery_timestamp"):
        message.delivery_timestamp = spec["delivery_timestamp"]
    if spec.get("priority") is not None:
        message.priority = spec["priority"]
    if spec.get("lite_topic"):
        message.lite_topic = spec["lite_topic"]
    for name, value in spec.get("properties", {}).items():
        message.add_property(name, value)
    return message


_signing: dict = {}


def install_signing(signing: dict) -> None:
    """Re-sign every call as ``_signing`` says (a clock offset, other credentials, or no
    authorization header at all); the official signing code computes the values."""
    _signing.update(signing)
    original = signature_module.Signature.metadata

    def metadata(config, client_id):
        headers = dict(original(config, client_id))
        if _signing.get("omit_authorization"):
            headers.pop("authorization")
            return list(headers.items())
        offset = _signing.get("date_offset_s", 0)
        ak = _signing.get("access_key", config.credentials.ak)
        sk = _signing.get("secret_key", config.credentials.sk)
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() + offset))
        headers["x-mq-date-time"] = date
        headers["authorization"] = (
            f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature_module.Signature.sign(sk, date)}"
        )
        return list(headers.items())

    signature_module.Signature.metadata = staticmethod(metadata)


def pin_broker_endpoints(address: str) -> None:
    """Every call goes to ``address`` (``"host:port"``), whatever endpoints a route names:
    the gRPC target the client builds from endpoints is replaced (the failover tests use
    it to talk to a slave)."""
    from rocketmq.v5.client.connection import rpc_channel

    rpc_channel.RpcEndpoints.facade = property(lambda self: f"ipv4:{address}")


def produce(config, scenario: dict) -> None:
    producer = Producer(config, tuple(scenario["topics"]), tls_enable=scenario.get("tls", False))
    producer.startup()
    try:
        for spec in scenario["messages"]:
            if "signing" in spec:  # sign from this message on as it says
                _signing.clear()
                _signing.update(spec["signing"])
            try:
                if spec.get("async"):
                    receipt = producer.send_async(outgoing(spec)).result(timeout=10)
                else:
                    receipt = producer.send(outgoing(spec))
                handle = receipt.recall_handle or ""
                emit("sent", body=spec["body"], id=receipt.message_id, recall_handle=handle)
            except Exception as error:  # reported, the scenario goes on
                emit("send_failed", body=spec["body"], **error_fields(error))
                continue
            for _ in range(spec.get("recall", 0)):  # recall it this many times
                recall_one(producer, spec["topic"], spec["body"], handle)
        for body, handle in scenario.get("recall_handles", []):  # handles of earlier runs
            recall_one(producer, scenario["topics"][0], body, handle)
    finally:
        producer.shutdown()


def recall_one(producer, topic: str, body: str, handle: str) -> None:
    try:
        emit("recalled", body=body, id=producer.recall_message(topic, handle))
    except Exception as error:  # reported, the scenario goes on
        emit("recall_failed", body=body, **error_fields(error))


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked = threading.Event()

    def check(self, message) -> TransactionResolution:
        emit("checked", **described(message))
        self.checked.set()
        return getattr(TransactionResolution, self.answer)


_check_answered = threading.Event()


def report_check_answers() -> None:
    """Emit ``check_ended`` (code, message) when the node answers the EndTransaction a
    check's resolution sends (the client itself only logs a failed one), and set
    ``_check_answered``."""
    original = Producer._Producer__server_transaction_check_callback

    def reported(self, future, message, transaction_id, result):
        try:
            status = future.result().status
            emit("check_ended", id=message.message_id, code=status.code, message=status.message)
        except Exception as error:
            emit("check_ended", id=message.message_id, **error_fields(error))
        _check_answered.set()
        return original(self, future, message, transaction_id, result)

    Producer._Producer__server_transaction_check_callback = reported


def commit_with_retries(tx, attempts: int = 20) -> None:
    """Commit, retrying while the restarted node is not reachable yet."""
    for attempt in range(attempts):
        try:
            tx.commit()
            return
        except Exception as error:
            emit("commit_retry", attempt=attempt, **error_fields(error))
            time.sleep(0.5)
    raise TimeoutError("commit never reached the node")


def wait_for_file(path: str, timeout_s: float, what: str) -> None:
    """Wait until the test creates ``path``: its signal that this runner may go on."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never said {what}")
        time.sleep(0.05)


def transaction(config, scenario: dict) -> None:
    checker = Checker(scenario.get("checker_answer", "COMMIT"))
    report_check_answers()
    producer = Producer(config, (scenario["topic"],), checker=checker)
    producer.startup()
    try:
        for spec in scenario["messages"]:
            tx = producer.begin_transaction()
            receipt = producer.send(outgoing(spec), tx)
            emit("sent", body=spec["body"], id=receipt.message_id)
            if spec.get("commit_when_file_exists"):
                # The test restarts the node meanwhile; the client's channel reconnects.
                wait_for_file(spec["commit_when_file_exists"], 60, "to commit")
                commit_with_retries(tx)
            elif spec["end"] == "commit":
                tx.commit()
            elif spec["end"] == "rollback":
                tx.rollback()
            emit("ended", body=spec["body"], end=spec["end"])
        if scenario.get("wait_for_check_s"):
            if not checker.checked.wait(scenario["wait_for_check_s"]):
                raise TimeoutError("no orphan check arrived")
            if not _check_answered.wait(scenario["wait_for_check_s"]):
                raise TimeoutError("the check's resolution was never answered")
            if scenario.get("shutdown_when_file_exists"):
                # Connected, as a producer stays, until the test sees the orphan resolved:
                # an answer the node refused (a busy new master) is checked again.
                wait_for_file(scenario["shutdown_when_file_exists"], 60, "to shut down")
    finally:
        producer.shutdown()


def simple(config, scenario: dict) -> None:
    """Steps: receive, ack, change, ack_forged, receive_until. ``sql``: subscribe with that
    SQL92 filter instead of the tag ``filter``."""
    if "sql" in scenario:
        expression = FilterExpression(scenario["sql"], FilterType.SQL)
    else:
        expression = FilterExpression(scenario.get("filter", "*"))
    consumer = SimpleConsumer(
        config,
        scenario["group"],
        {scenario["topic"]: expression},
        await_duration=scenario.get("await_s", 5),
        tls_enable=scenario.get("tls", False),
    )
    consumer.startup()
    held: dict[str, object] = {}
    try:
        for step in scenario["steps"]:
            kind = step["do"]
            if kind == "receive_until":
                deadline = time.monotonic() + step["deadline_s"]
                got = []
                while len(got) < step["count"] and time.monotonic() < deadline:
                    for message in consumer.receive(step.get("max", 16), step["invisible_s"]):
                        got.append(message)
                        held[message.message_id] = message
                        emit("received", **described(message))
                        if step.get("ack"):
                            consumer.ack(message)
                            emit("acked", id=message.message_id)
            elif kind == "receive_once":
                try:
                    for message in consumer.receive(step.get("max", 16), step["invisible_s"]):
                        held[message.message_id] = message
                        emit("received", **described(message))
                except Exception as error:
                    emit("receive_failed", **error_fields(error))
            elif kind == "sign_as":
                _signing.update(access_key=step["access_key"], secret_key=step["secret_key"])
            elif kind == "ack":
                for message_id in step["ids"]:
                    try:
                        consumer.ack(held[message_id])
                        emit("acked", id=message_id)
                    except Exception as error:
                        emit("ack_failed", id=message_id, **error_fields(error))
            elif kind == "change":
                message = held[step["id"]]
                consumer.change_invisible_duration(message, step["invisible_s"])
                emit("changed", id=step["id"])
            elif kind == "ack_forged":
                message = held[step["id"]]
                message.receipt_handle = step["handle"]
                try:
                    consumer.ack(message)
                    emit("acked", id=step["id"])
                except Exception as error:
                    emit("ack_failed", id=step["id"], **error_fields(error))
    finally:
        consumer.shutdown()


class Listener(MessageListener):
    def __init__(self, fail_bodies: set[str]) -> None:
        self.fail_bodies = fail_bodies
        self.seen: set[str] = set()

    def consume(self, message) -> ConsumeResult:
        description = described(message)
        failing = description["body"] in self.fail_bodies
        emit("consumed", failed=failing, **description)
        if not failing:
            self.seen.add(description["body"])
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


def push(config, scenario: dict) -> None:
    listener = Listener(set(scenario.get("fail", [])))
    consumer = PushConsumer(
        config,
        scenario["group"],
        listener,
        {scenario["topic"]: FilterExpression("*")},
        consumption_thread_count=4,
    )
    consumer.startup()
    try:
        deadline = time.monotonic() + scenario["deadline_s"]
        wanted = set(scenario["expect"])
        while not wanted <= listener.seen and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(scenario.get("linger_s", 0))  # let failing messages be retried meanwhile
        emit("seen", bodies=sorted(listener.seen))
    finally:
        consumer.shutdown()


def settled(subscribe, wait_s: float = 10.0) -> None:
    """``subscribe()``, tried again while the client's quota is still 0: a LiteSimpleConsumer
    does not wait for the server's settings at startup, and refuses every subscription
    until they arrive (with the quota in them)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return subscribe()
        except Exception as error:
            if "exceed quota: 0 " not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def lite_simple(config, scenario: dict) -> None:
    """A LiteSimpleConsumer bound to ``topic``. Steps: subscribe and unsubscribe (``names``;
    a refusal is an event), sync_all (the client's whole set), receive_until (acking what
    it receives)."""
    consumer = LiteSimpleConsumer(
        scenario["topic"], config, scenario["group"], await_duration=scenario.get("await_s", 5)
    )
    consumer.startup()
    try:
        for step in scenario["steps"]:
            kind = step["do"]
            if kind in ("subscribe", "unsubscribe"):
                act = consumer.subscribe_lite if kind == "subscribe" else consumer.unsubscribe_lite
                for name in step["names"]:
                    try:
                        settled(lambda act=act, name=name: act(name))
                        emit(f"{kind}d", name=name)
                    except Exception as error:
                        emit(f"{kind}_failed", name=name, **error_fields(error))
            elif kind == "sync_all":  # the whole set at once (COMPLETE_ADD)
                consumer.subscribe_lite_all()
                emit("synced")
            elif kind == "receive_until":
                deadline = time.monotonic() + step["deadline_s"]
                got = 0
                while got < step["count"] and time.monotonic() < deadline:
                    for message in consumer.receive(step.get("max", 16), step["invisible_s"]):
                        got += 1
                        emit("received", **described(message))
                        if step.get("ack", True):
                            consumer.ack(message)
                            emit("acked", id=message.message_id)
    finally:
        consumer.shutdown()


SCENARIOS = {
    "produce": produce,
    "transaction": transaction,
    "simple": simple,
    "push": push,
    "lite_simple": lite_simple,
}


def main() -> int:
    scenario = json.loads(sys.stdin.read())
    os.environ["TZ"] = "UTC"
    time.tzset()
    credentials = Credentials(scenario.get("access_key", ""), scenario.get("secret_key", ""))
    config = ClientConfiguration(
        scenario["endpoint"], credentials, scenario.get("namespace", ""), request_timeout=5
    )
    if "signing" in scenario:
        install_signing(scenario["signing"])
    if scenario.get("pin"):
        pin_broker_endpoints(scenario["pin"])
    try:
        SCENARIOS[scenario["scenario"]](config, scenario)
    except Exception as error:
        emit("error", **error_fields(error))
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
