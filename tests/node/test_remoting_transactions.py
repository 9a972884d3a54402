"""Transactions on the remoting port of a real node: a 4.x half is parked as a gRPC one,
END_TRANSACTION commits or rolls it back, the node's CHECK_TRANSACTION_STATE reaches the
producer's own connection, and a transaction sent on one protocol is resolved on the
other."""

from __future__ import annotations

import json

import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting import FLAG_ONEWAY
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import BatchedMessage, encode_batch
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, properties_text, send_v2
from tests.support.rpc import create_topic, message, pull, stubs

NODE_TOML = """
[messages]
transaction_check_interval_ms = 1000
transaction_max_checks = 5
"""
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-tx") / "node"), NODE_TOML)
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, "pay", queues=1, message_type=api.TRANSACTION)
    create_topic(admin, "plain", queues=1)
    admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G")))
    yield started, messaging
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node[0].remoting) as connected:
        yield connected


def send_half(client, body: bytes, unique_key: str, topic: str = "pay", group: str = "pg"):
    answer = send_v2(
        client,
        topic,
        body,
        0,
        UNIQ_KEY=unique_key,
        TAGS="t",
        KEYS=f"key-{unique_key}",
        TRAN_MSG="true",
        PGROUP=group,
    )
    return answer


def end(client, sent, kind: int, *, oneway: bool = True, **fields: str):
    _, physical = parse_offset_message_id(sent.ext_fields["msgId"])
    header = {
        "producerGroup": "pg",
        "tranStateTableOffset": sent.ext_fields["queueOffset"],
        "commitLogOffset": str(physical),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "false",
        "msgId": "unused",
        "transactionId": sent.ext_fields.get("transactionId", ""),
    }
    header.update(fields)
    if oneway:
        client.send(RequestCode.END_TRANSACTION, header, flag=FLAG_ONEWAY)
        return None
    return client.call(RequestCode.END_TRANSACTION, header)


def visible(messaging, topic: str = "pay") -> list[bytes]:
    _, messages, _ = pull(messaging, topic, 0, 0)
    return [m.body for m in messages]


def test_a_half_stays_hidden_until_commit_and_rollback_discards(node, client):
    _, messaging = node
    committed = send_half(client, b"commit-me", "U-1")
    assert committed.code == ResponseCode.SUCCESS, committed
    assert len(committed.ext_fields["transactionId"]) == 32
    rolled = send_half(client, b"roll-me", "U-2")
    assert b"commit-me" not in visible(messaging)
    end(client, committed, COMMIT)
    end(client, rolled, ROLLBACK)
    until(lambda: b"commit-me" in visible(messaging), 10, "the committed half")
    [copy] = [m for m in pull(messaging, "pay", 0, 0)[1] if m.body == b"commit-me"]
    assert copy.system_properties.message_id == "U-1"
    assert copy.system_properties.tag == "t" and list(copy.system_properties.keys) == ["key-U-1"]
    assert b"roll-me" not in visible(messaging)
    # A repeat is answered as gRPC answers it: the same resolution is fine, another is not.
    assert end(client, committed, COMMIT, oneway=False).code == ResponseCode.SUCCESS
    refused = end(client, committed, ROLLBACK, oneway=False)
    assert refused.code == ResponseCode.SYSTEM_ERROR and "resolved as commit" in refused.remark


def test_the_commit_log_offset_names_the_transaction_when_the_id_is_missing(node, client):
    _, messaging = node
    sent = send_half(client, b"by-offset", "U-3")
    assert end(client, sent, COMMIT, oneway=False, transactionId="").code == 0
    assert b"by-offset" in visible(messaging)
    assert end(client, sent, 3, oneway=False).code == ResponseCode.SYSTEM_ERROR
    left = send_half(client, b"left", "U-4")
    unknown = end(client, left, UNKNOWN, oneway=False)
    assert unknown.code == ResponseCode.SUCCESS and b"left" not in visible(messaging)
    # Resolved before its check is due: a check frame would interleave with later answers.
    assert end(client, left, ROLLBACK, oneway=False).code == ResponseCode.SUCCESS


def test_a_half_in_a_batch_or_to_a_normal_topic_is_refused(node, client):
    batch = encode_batch([BatchedMessage(0, b"x", properties_text({"UNIQ_KEY": "B-1"}).encode())])
    answer = client.call(
        RequestCode.SEND_BATCH_MESSAGE,
        {"a": "pg", "b": "pay", "c": "TBW102", "d": "4", "e": "0", "f": "4", "g": "0", "h": "0"}
        | {"i": properties_text({"TRAN_MSG": "true"}), "j": "0", "k": "false", "m": "true"},
        batch,
    )
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, answer
    assert "batch cannot carry transaction" in answer.remark
    refused = send_half(client, b"x", "U-5", topic="plain")
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "TRANSACTION" in refused.remark


def test_the_node_checks_an_unresolved_half_over_the_producers_connection(node, client):
    _, messaging = node
    sent = send_half(client, b"checked", "U-6", group="checker")  # the group's only half
    end(client, sent, UNKNOWN)
    check = client.receive()  # the node's own request, oneway, within the check interval
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
    header = check.ext_fields
    assert header["transactionId"] == sent.ext_fields["transactionId"]
    assert header["msgId"] == "U-6" and header["offsetMsgId"] == sent.ext_fields["msgId"]
    assert header["tranStateTableOffset"] == sent.ext_fields["queueOffset"]
    record = decode(check.body, 0)
    assert (record.topic, record.queue_id, record.body) == ("pay", 0, b"checked")
    assert record.properties["PGROUP"] == "checker" and record.properties["UNIQ_KEY"] == "U-6"
    client.send(
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": "checker",
            "tranStateTableOffset": header["tranStateTableOffset"],
            "commitLogOffset": header["commitLogOffset"],
            "commitOrRollback": str(COMMIT),
            "fromTransactionCheck": "true",
            "msgId": header["msgId"],
            "transactionId": header["transactionId"],
        },
        flag=FLAG_ONEWAY,
    )
    until(lambda: b"checked" in visible(messaging), 10, "the half committed after its check")


def test_a_transaction_sent_on_one_protocol_resolves_on_the_other(node, client):
    _, messaging = node
    # gRPC half, remoting commit.
    answer = messaging.SendMessage(
        rpc.SendMessageRequest(
            messages=[message("pay", b"grpc-half", "X-1", message_type=pb.TRANSACTION)]
        )
    )
    transaction_id = answer.entries[0].transaction_id
    assert transaction_id
    committed = client.call(
        RequestCode.END_TRANSACTION,
        {"producerGroup": "p", "commitOrRollback": str(COMMIT), "transactionId": transaction_id}
        | {"tranStateTableOffset": "0", "commitLogOffset": "-1"},
    )
    assert committed.code == ResponseCode.SUCCESS, committed
    assert b"grpc-half" in visible(messaging)
    # Remoting half, gRPC rollback; the remoting repeat of a commit is refused.
    sent = send_half(client, b"remoting-half", "X-2")
    rolled = messaging.EndTransaction(
        rpc.EndTransactionRequest(
            topic=pb.Resource(name="pay"),
            message_id="X-2",
            transaction_id=sent.ext_fields["transactionId"],
            resolution=pb.ROLLBACK,
            source=pb.SOURCE_CLIENT,
        )
    )
    assert rolled.status.code == pb.OK, rolled.status
    assert end(client, sent, COMMIT, oneway=False).code == ResponseCode.SYSTEM_ERROR
    assert b"remoting-half" not in visible(messaging)


def test_a_restarted_producer_is_checked_once_its_heartbeat_names_its_group(node):
    _, messaging = node
    started, _ = node
    with RemotingClient(started.remoting) as crashed:
        sent = send_half(crashed, b"after-restart", "U-7", group="restarted")
        end(crashed, sent, UNKNOWN)
    # The producer's connection is gone; its next incarnation heartbeats the group.
    with RemotingClient(started.remoting) as again:
        body = {
            "clientID": "127.0.0.1@2#restarted",
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}, {"groupName": "restarted"}],
            "consumerDataSet": [],
        }
        assert again.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode()).code == 0
        check = again.receive()
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE
        assert check.ext_fields["transactionId"] == sent.ext_fields["transactionId"]
        answer = again.call(  # (answered: the test waits for the rollback)
            RequestCode.END_TRANSACTION,
            {"producerGroup": "restarted", "commitOrRollback": str(ROLLBACK)}
            | {"fromTransactionCheck": "true", "transactionId": check.ext_fields["transactionId"]}
            | {"tranStateTableOffset": "0", "commitLogOffset": check.ext_fields["commitLogOffset"]},
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        assert end(again, sent, COMMIT, oneway=False).code == ResponseCode.SYSTEM_ERROR
    assert b"after-restart" not in visible(messaging)
