"""A stored message consumed directly (``node/services/direct_consume.py``) on a real node,
through every door that asks for it: the SDK's Admin (Admin ConsumeMessageDirectly) and an
admin tool's CONSUME_MESSAGE_DIRECTLY on the remoting port (RocketMQ Dashboard's way), with
a raw 4.x consumer answering the node's CONSUME_MESSAGE_DIRECTLY over its own connection as
the Java and Go clients do; a pull consumer is never asked; a client that does not answer
times out."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from ferrymq.cli import main as cli
from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from tests.support.nodes import start_node
from tests.support.remoting_client import (
    RemotingClient,
    answer_direct_consumption,
    heartbeat_body,
)
from tests.support.rpc import create_group, create_topic, stubs

TOPIC, GROUP = "dc-orders", "dc-group"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("direct") / "node"), "")
    channel, _, admin = stubs(started.address)
    create_topic(admin, TOPIC, queues=1)
    create_group(admin, GROUP)
    channel.close()
    with Producer(started.address) as producer:
        sent = producer.send(Message(TOPIC, b"again", tag="t"))
    yield started, sent
    started.sigterm()


def consumer(node, client_id: str, consume_type: str = "CONSUME_PASSIVELY") -> RemotingClient:
    client = RemotingClient(node.remoting)
    body = json.loads(heartbeat_body(client_id, [GROUP], TOPIC))
    body["consumerDataSet"][0]["consumeType"] = consume_type
    answer = client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
    assert answer.code == ResponseCode.SUCCESS, answer
    return client


def answer(client: RemotingClient, result: dict) -> dict:
    """Answer the node's CONSUME_MESSAGE_DIRECTLY as a 4.x client does; its header."""
    asked = answer_direct_consumption(client, result)
    stored = decode(asked.body, 0)
    assert (stored.topic, stored.body) == (TOPIC, b"again")
    return asked.ext_fields


def test_the_sdk_and_an_admin_tool_reach_a_4x_push_consumer(node):
    started, sent = node
    with consumer(started, "push@1") as push, ThreadPoolExecutor(1) as pool:
        with Admin(started.address) as admin:
            asking = pool.submit(admin.consume_directly, GROUP, TOPIC, sent.message_id)
            header = answer(push, {"consumeResult": "CR_SUCCESS", "spentTimeMills": 4})
            done = asking.result()
        assert (done.outcome, done.client_answer, done.spent_ms) == ("consumed", "CR_SUCCESS", 4)
        assert header["consumerGroup"] == GROUP and header["clientId"] == "push@1"
        assert header["msgId"] == done.message_id and header["topic"] == TOPIC
        with RemotingClient(started.remoting) as tool:
            fields = {
                "consumerGroup": GROUP,
                "clientId": "push@1",
                "msgId": done.message_id,
                "topic": TOPIC,
            }
            opaque = tool.send(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
            answer(push, {"consumeResult": 1, "spentTimeMills": 2, "remark": ""})  # Go: CR_LATER
            reply = tool.response()
        assert reply.opaque == opaque and reply.code == ResponseCode.SUCCESS, reply
        said = json.loads(reply.body)
        assert (said["consumeResult"], said["spentTimeMills"]) == ("CR_LATER", 2)


def test_a_pull_consumer_is_never_asked_and_a_silent_client_times_out(node):
    started, sent = node
    unsupported = "DIRECT_CONSUME_UNSUPPORTED: client pull@1"
    with consumer(started, "pull@1", "CONSUME_ACTIVELY"), Admin(started.address) as admin:
        with pytest.raises(FerryError, match=unsupported):
            admin.consume_directly(GROUP, TOPIC, sent.message_id, client_id="pull@1")
        with consumer(started, "silent@1"), RemotingClient(started.remoting) as tool:
            fields = {
                "consumerGroup": GROUP,
                "clientId": "silent@1",
                "msgId": sent.message_id,
                "topic": TOPIC,
            }
            with Admin(started.address) as admin:
                quick = admin.consume_directly(
                    GROUP, TOPIC, sent.message_id, client_id="silent@1", timeout_ms=300
                )
            assert (quick.outcome, quick.remark) == ("timed_out", "no answer in 0.3 s")
            unknown = tool.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, {**fields, "clientId": "x"})
            assert unknown.code == ResponseCode.SYSTEM_ERROR
            assert unknown.remark.startswith("CLIENT_NOT_MEMBER"), unknown
    until(lambda: _refused(started, sent), 10, "the consumers' connections closed")


def _refused(started, sent) -> bool:
    with Admin(started.address) as admin:
        try:
            admin.consume_directly(GROUP, TOPIC, sent.message_id)
        except FerryError as error:
            return "NO_ONLINE_CLIENT" in str(error)
    return False


def test_the_cli_says_what_the_client_answered(node, capsys):
    started, sent = node
    argv = ["message", "consume-directly", "--topic", TOPIC, "--group", GROUP]
    argv += ["--id", sent.message_id, "--server", started.address]
    with consumer(started, "cli@1") as push, ThreadPoolExecutor(1) as pool:
        running = pool.submit(cli.main, [*argv, "--json"])
        answer(push, {"consumeResult": "CR_SUCCESS", "spentTimeMills": 3})
        assert running.result() == 0
        said = json.loads(capsys.readouterr().out)
        assert (said["outcome"], said["client_id"], said["spent_ms"]) == ("consumed", "cli@1", 3)
        running = pool.submit(cli.main, argv)
        answer(push, {"consumeResult": "CR_THROW_EXCEPTION", "remark": "boom"})
        assert running.result() == 1  # not consumed
    assert capsys.readouterr().out.startswith("failed (CR_THROW_EXCEPTION): boom; client cli@1")
