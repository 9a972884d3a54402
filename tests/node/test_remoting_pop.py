"""POP on the remoting port (RocketMQ 5's POP_MESSAGE, ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME) with raw frames: the pop service of the gRPC doors behind
both protocols, so deliveries, acks, attempts and refusals are the same through either."""

from __future__ import annotations

import base64
import json

import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.pop_state import RESENT_QUEUE_ID
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import ack, create_group, create_topic, receive, stubs

STALE = "the receipt handle is stale"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("pop") / "node"))
    channel, messaging, admin = stubs(started.address)
    for topic in ("popped", "crossed", "changed", "forged", "batched"):
        create_topic(admin, topic, queues=2)
        create_group(admin, f"{topic}-group")
    yield started, messaging
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node[0].remoting) as connected:
        yield connected


def pop(client, topic: str, invisible_ms: int = 60_000, poll_ms: int = 0, **fields: str):
    header = {
        "consumerGroup": f"{topic}-group",
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": str(invisible_ms),
        "pollTime": str(poll_ms),
        "bornTime": "0",
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "order": "false",
        **fields,
    }
    return client.call(RequestCode.POP_MESSAGE, header)


def popped(answer) -> list:
    found, position = [], 0
    while position < len(answer.body):
        record = decode(answer.body, position)
        found.append(record)
        position += record.size
    return found


def extra_info_of_the_5x_client(answer, record, broker: str = "group-1") -> str:
    """What RocketMQ 5's remoting client builds from a pop answer (no startOffsetInfo):
    ``ckOffset popTime invisibleTime reviveQid retry brokerName queueId offset``."""
    h = answer.ext_fields
    return (
        f"{record.queue_offset} {h['popTime']} {h['invisibleTime']} {h['reviveQid']} 0 "
        f"{broker} {record.queue_id} {record.queue_offset}"
    )


def ack_remoting(client, topic: str, extra_info: str, queue_id: int = 0, offset: int = 0):
    return client.call(
        RequestCode.ACK_MESSAGE,
        {
            "consumerGroup": f"{topic}-group",
            "topic": topic,
            "queueId": str(queue_id),
            "extraInfo": extra_info,
            "offset": str(offset),
        },
    )


def test_a_remoting_pop_is_acked_with_the_5x_clients_extra_info_once(client):
    for i in range(3):
        assert send_v2(client, "popped", b"p%d" % i, i % 2).code == ResponseCode.SUCCESS
    answer = pop(client, "popped")
    assert answer.code == ResponseCode.SUCCESS, answer
    records = popped(answer)
    assert sorted(r.body for r in records) == [b"p0", b"p1", b"p2"]
    for record in records:
        assert record.reconsume_times == 0
        numbers = record.properties["POP_CK"].split(" ")
        assert numbers[:8] == extra_info_of_the_5x_client(answer, record).split(" ")
    assert pop(client, "popped").code == ResponseCode.PULL_NOT_FOUND  # all in flight
    for record in records:
        info = extra_info_of_the_5x_client(answer, record)
        assert ack_remoting(client, "popped", info).code == ResponseCode.SUCCESS
        again = ack_remoting(client, "popped", info)  # acked already: stale, as on gRPC
        assert again.code == ResponseCode.MESSAGE_ILLEGAL and STALE in again.remark
    assert pop(client, "popped", poll_ms=300).code == ResponseCode.PULL_NOT_FOUND


def test_a_message_popped_through_one_protocol_is_acked_through_the_other(node, client):
    _, messaging = node
    assert send_v2(client, "crossed", b"grpc-popped").code == ResponseCode.SUCCESS
    status, (message,), _ = receive(messaging, "crossed", group="crossed-group")
    assert status.code == pb.OK
    # The gRPC receipt handle as the extraInfo of a remoting ack.
    answer = ack_remoting(client, "crossed", message.system_properties.receipt_handle)
    assert answer.code == ResponseCode.SUCCESS, answer
    assert send_v2(client, "crossed", b"remoting-popped").code == ResponseCode.SUCCESS
    (record,) = popped(pop(client, "crossed"))
    handle = record.properties["POP_CK"].split(" ")[8]
    acked = ack(messaging, "crossed", [handle], group="crossed-group")
    assert acked.status.code == pb.OK, acked.status
    status, messages, _ = receive(messaging, "crossed", group="crossed-group")
    assert status.code == pb.MESSAGE_NOT_FOUND and not messages


def test_a_changed_invisible_time_names_a_new_delivery_and_redelivery_counts(client):
    """A change names a new delivery whose redelivery counts an attempt, unless the change
    is a suspend (RocketMQ 5.5's ``suspend`` header field), which keeps the attempt."""
    assert send_v2(client, "changed", b"later").code == ResponseCode.SUCCESS
    answer = pop(client, "changed")
    (record,) = popped(answer)
    first = extra_info_of_the_5x_client(answer, record)
    fields = {
        "consumerGroup": "changed-group",
        "topic": "changed",
        "queueId": str(record.queue_id),
        "extraInfo": first,
        "offset": str(record.queue_offset),
        "invisibleTime": "1000",
    }
    changed = client.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields)
    assert changed.code == ResponseCode.SUCCESS, changed
    assert changed.ext_fields["invisibleTime"] == "1000"
    stale = ack_remoting(client, "changed", first)  # the old delivery is gone
    assert stale.code == ResponseCode.MESSAGE_ILLEGAL and STALE in stale.remark
    # Visible again within a second: the same message, its second attempt.
    again = pop(client, "changed", poll_ms=5_000)
    (redelivered,) = popped(again)
    assert redelivered.body == b"later" and redelivered.reconsume_times == 1
    info = extra_info_of_the_5x_client(again, redelivered)
    # RocketMQ 5.5's suspend: this delivery is not counted, the next keeps the attempt.
    suspended = client.call(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        fields | {"extraInfo": info, "offset": str(redelivered.queue_offset), "suspend": "true"},
    )
    assert suspended.code == ResponseCode.SUCCESS, suspended
    third = pop(client, "changed", poll_ms=5_000)
    (kept,) = popped(third)
    assert kept.body == b"later" and kept.reconsume_times == 1
    info = extra_info_of_the_5x_client(third, kept)
    assert ack_remoting(client, "changed", info).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    ("mangle", "code", "remark"),
    [
        (lambda info: info.replace(info.split(" ")[3], "12345", 1), 13, STALE),
        (lambda info: " ".join(info.split(" ")[:3]), 13, "extraInfo has 3 fields"),
        (lambda info: info.replace(info.split(" ")[1], "soon", 1), 13, "popTime 'soon'"),
        (lambda info: "1.0.0.0123456789abcdef.deadbeef", 13, "receipt handle"),
    ],
    ids=["wrong-tag", "too-few-fields", "non-numeric", "forged-handle"],
)
def test_forged_stale_and_malformed_extra_info_are_refused_and_ack_nothing(
    client, mangle, code, remark
):
    assert send_v2(client, "forged", b"kept in flight").code == ResponseCode.SUCCESS
    answer = pop(client, "forged")
    (record,) = popped(answer)
    info = extra_info_of_the_5x_client(answer, record)
    refused = ack_remoting(client, "forged", mangle(info))
    assert refused.code == code and remark in refused.remark, refused
    assert ack_remoting(client, "forged", info).code == ResponseCode.SUCCESS  # still there


def test_pop_refusals_get_rocketmqs_codes(client):
    assert pop(client, "no-such-topic").code == ResponseCode.TOPIC_NOT_EXIST
    answer = pop(client, "popped", invisible_ms=10)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "invisible duration" in answer.remark
    answer = pop(client, "popped", expType="XPATH")
    assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "XPATH" in answer.remark
    answer = pop(client, "popped", invisibleTime="soon")
    assert answer.remark == "header field invisibleTime='soon' is not an integer"
    info = "0 0 60000 1 0 group-1 0 0"
    answer = ack_remoting(client, "no-such-topic", info)
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST


def batch_ack_body(topic: str, answer, offsets_by_queue: dict[int, list[int]]) -> bytes:
    """BATCH_ACK_MESSAGE's body as the 5.x client writes it: one entry per queue, bit i of
    the base64 ``BitSet.toByteArray()`` naming ``startOffset + i``."""
    h = answer.ext_fields
    acks = []
    for queue_id, offsets in offsets_by_queue.items():
        start = min(offsets)
        bits = bytearray((max(offsets) - start) // 8 + 1)
        for offset in offsets:
            bits[(offset - start) // 8] |= 1 << ((offset - start) % 8)
        acks.append(
            {
                "c": f"{topic}-group",
                "t": topic,
                "r": "0",
                "so": start,
                "q": queue_id,
                "rq": int(h["reviveQid"]),
                "pt": int(h["popTime"]),
                "it": int(h["invisibleTime"]),
                "b": base64.b64encode(bytes(bits)).decode(),
            }
        )
    return json.dumps({"brokerName": "group-1", "acks": acks}).encode()


def test_a_batch_ack_acks_each_offset_and_answers_each_one(client):
    for i in range(4):
        assert send_v2(client, "batched", b"b%d" % i, 0).code == ResponseCode.SUCCESS
    answer = pop(client, "batched")
    assert answer.code == ResponseCode.SUCCESS, answer
    assert sorted(r.queue_offset for r in popped(answer)) == [0, 1, 2, 3]
    # A malformed body is refused whole: nothing acked.
    broken = client.call(RequestCode.BATCH_ACK_MESSAGE, body=b'{"acks": [{"so": "x"}]}')
    assert broken.code == ResponseCode.SYSTEM_ERROR and "so (startOffset)" in broken.remark
    # Offsets 0, 1 and 3 acked; 9 was never popped: refused alone, the others acked.
    mixed = batch_ack_body("batched", answer, {0: [0, 1, 3, 9]})
    acked = client.call(RequestCode.BATCH_ACK_MESSAGE, body=mixed)
    assert acked.code == ResponseCode.MESSAGE_ILLEGAL, acked
    assert acked.remark.startswith("1 of 4 not acked; first: batched queue 0 offset 9")
    results = {r["offset"]: r for r in json.loads(acked.body)["results"]}
    assert {o: r["code"] for o, r in results.items()} == {0: 0, 1: 0, 3: 0, 9: 13}
    assert STALE in results[9]["remark"]
    # Acked already: each is stale now; offset 2 is still in flight and alone comes back.
    again = client.call(RequestCode.BATCH_ACK_MESSAGE, body=mixed)
    assert [r["code"] for r in json.loads(again.body)["results"]] == [13, 13, 13, 13]
    rest = client.call(
        RequestCode.BATCH_ACK_MESSAGE, body=batch_ack_body("batched", answer, {0: [2]})
    )
    assert rest.code == ResponseCode.SUCCESS, rest
    assert json.loads(rest.body)["results"] == [
        {"topic": "batched", "queueId": 0, "offset": 2, "code": 0, "remark": "OK"}
    ]
    assert pop(client, "batched", poll_ms=300).code == ResponseCode.PULL_NOT_FOUND


def test_the_proxys_pop_codes_are_answered_not_supported(client):
    # NOTIFICATION, POLLING_INFO, PEEK_MESSAGE: RocketMQ's proxy asks them of brokers.
    for code in (200054, 200055, 200052):
        answer = client.call(code, {"consumerGroup": "batched-group", "topic": "batched"})
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer
        assert answer.remark == f" request type {code} not supported"


def test_a_resent_dead_letter_is_popped_and_acked_on_the_remoting_port(node, client):
    """A dead letter resent to its group (``node/services/dead_letter_resend.py``) comes
    through POP_MESSAGE as the message of its topic, in the resent queue
    (``RESENT_QUEUE_ID``), and the 5.x client's extraInfo built from it acks it."""
    started, _ = node
    channel, _, admin = stubs(started.address)
    try:
        create_topic(admin, "resent", queues=1)
        create_group(admin, "resent-group", max_delivery_attempts=1)
        assert send_v2(client, "resent", b"again").code == ResponseCode.SUCCESS
        assert [r.body for r in popped(pop(client, "resent", invisible_ms=1000))] == [b"again"]

        def dead_letters():
            request = api.ListDeadLettersRequest(group="resent-group", from_offset=-1, limit=10)
            return admin.ListDeadLetters(request).entries

        # Its one attempt over, a pop after its invisibility dead-letters it.
        until(
            lambda: pop(client, "resent").code == ResponseCode.PULL_NOT_FOUND and dead_letters(),
            10,
            "the dead letter",
        )
        (dead,) = dead_letters()
        request = api.ResendDeadLettersRequest(
            group="resent-group", offsets=[dead.offset], from_offset=-1, to_offset=-1
        )
        assert list(admin.ResendDeadLetters(request).resent) == [dead.offset]
        answer = pop(client, "resent")
        (record,) = popped(answer)
        assert (record.body, record.topic, record.queue_id) == (b"again", "resent", RESENT_QUEUE_ID)
        info = extra_info_of_the_5x_client(answer, record)
        acked = ack_remoting(client, "resent", info, RESENT_QUEUE_ID, record.queue_offset)
        assert acked.code == ResponseCode.SUCCESS, acked
        again = ack_remoting(client, "resent", info, RESENT_QUEUE_ID, record.queue_offset)
        assert again.code == ResponseCode.MESSAGE_ILLEGAL and STALE in again.remark
        assert pop(client, "resent", poll_ms=300).code == ResponseCode.PULL_NOT_FOUND
    finally:
        channel.close()
