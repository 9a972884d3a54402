"""Compressed bodies from RocketMQ 4.x producers on a real node: the COMPRESSED sysFlag
travels with the record, a remoting pull returns the record as stored, a gRPC consumer
and the SDK get the plain body; a body flagged compressed that does not inflate (or
inflates too far, or is not zlib) is refused with a remark that says why."""

from __future__ import annotations

import time
import zlib
from hashlib import md5

import pytest

from ferrymq.client import PullConsumer
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, properties_text
from tests.support.rpc import create_topic, pull, stubs

PLAIN = b"a compressible line of text. " * 400  # 11.6 KB: the Java client compresses it
JAVA_ZLIB = 0x1 | 0x300  # COMPRESSED and compression type 3 (zlib), as the Java client sets


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-zip") / "node"))
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, "Z", queues=1)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    yield started, messaging
    channel.close()
    started.sigterm()


def send(client, body: bytes, sys_flag: int, unique_key: str):
    return client.call(
        RequestCode.SEND_MESSAGE,
        {
            "producerGroup": "p",
            "topic": "Z",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": str(sys_flag),
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": properties_text({"UNIQ_KEY": unique_key, "TAGS": "zip"}),
        },
        body,
    )


def test_a_compressed_body_is_stored_as_sent_and_read_plain_over_grpc_and_the_sdk(node):
    started, messaging = node
    with RemotingClient(started.remoting) as client:
        answer = send(client, zlib.compress(PLAIN, 5), JAVA_ZLIB, "Z-1")
        assert answer.code == ResponseCode.SUCCESS, answer
        assert send(client, zlib.compress(b"go", 9), 0x1, "Z-2").code == ResponseCode.SUCCESS
        pulled = client.call(
            RequestCode.PULL_MESSAGE,
            {"consumerGroup": "G", "topic": "Z", "queueId": "0", "queueOffset": "0"}
            | {"maxMsgNums": "32", "sysFlag": "4", "subscription": "*"},
        )
    record = decode(pulled.body, 0)
    assert record.sys_flag & JAVA_ZLIB == JAVA_ZLIB
    assert zlib.decompress(record.body) == PLAIN and len(record.body) < len(PLAIN)
    status, messages, _ = pull(messaging, "Z", 0, 0)
    assert status.code == pb.OK
    assert [m.body for m in messages] == [PLAIN, b"go"]
    assert messages[0].system_properties.body_digest.checksum == md5(PLAIN).hexdigest().upper()
    with PullConsumer(started.address, "G", start="beginning") as consumer:
        consumer.assign("Z", [0])
        read: list = []
        until(lambda: read.extend(consumer.poll(0.5)) or len(read) >= 2)
    assert [(m.message_id, m.body) for m in read] == [("Z-1", PLAIN), ("Z-2", b"go")]


def test_a_body_flagged_compressed_must_inflate(node):
    started, _ = node
    cases = [
        (zlib.compress(PLAIN), 0x101, "LZ4 compressed bodies are not served, only zlib"),
        (zlib.compress(PLAIN), 0x201, "ZSTD compressed bodies are not served, only zlib"),
        (b"not zlib at all", 0x1, "compressed body is not zlib data"),
        (zlib.compress(PLAIN)[:-9], 0x1, "compressed body is truncated zlib data"),
        (zlib.compress(bytes(5 << 20)), 0x1, "compressed body inflates beyond 4194304 bytes"),
    ]
    with RemotingClient(started.remoting) as client:
        before = client.call(RequestCode.GET_MAX_OFFSET, {"topic": "Z", "queueId": "0"})
        for body, sys_flag, remark in cases:
            answer = send(client, body, sys_flag, "bad")
            assert answer.code == ResponseCode.MESSAGE_ILLEGAL, (remark, answer)
            assert answer.remark.startswith(remark), answer.remark
        after = client.call(RequestCode.GET_MAX_OFFSET, {"topic": "Z", "queueId": "0"})
    assert after.ext_fields["offset"] == before.ext_fields["offset"]  # nothing stored
