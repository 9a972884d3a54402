"""Bad input on a real node's remoting port: each gets a precise answer or a closed
connection, what is stored stays as it was, and the node keeps serving everyone else.

(The transport's own cases, on a listener with test handlers, are in
``test_remoting_transport.py``; random and generated input in ``test_fuzz_rpc.py``.)"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting import SERIALIZE_ROCKETMQ, RemotingCommand, encode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.metrics import scrape, value
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_topic, stubs

BODY = b"\xa5" * 60_000  # 18 of them: about 1 MiB, what one pull answers at most


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # /metrics on a port of its own: the slow-reader test reads the connection gauge.
    started = start_node(
        str(tmp_path_factory.mktemp("bad-input") / "node"), "[ports]\nmetrics = 0\n"
    )
    channel, _, admin = stubs(started.address)
    create_topic(admin, "kept", queues=1)
    create_topic(admin, "big", queues=1)
    create_topic(admin, "waited", queues=1)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    with RemotingClient(started.remoting) as client:
        for i in range(5):
            assert send_v2(client, "kept", b"kept-%d" % i).code == ResponseCode.SUCCESS
        for _ in range(18):
            assert send_v2(client, "big", BODY).code == ResponseCode.SUCCESS
    yield started
    channel.close()
    started.sigterm()


def pull_fields(topic: str, offset: int = 0, suspend_ms: int = 0) -> dict[str, str]:
    return {
        "consumerGroup": "G",
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "6" if suspend_ms else "4",  # suspend, subscription
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }


def bodies(answer) -> list[bytes]:
    found, position = [], 0
    while position < len(answer.body):
        record = decode(answer.body, position)
        found.append(record.body)
        position += record.size
    return found


def assert_kept_intact(node) -> None:
    """The messages stored before are all there, whole, and the node answers."""
    with RemotingClient(node.remoting) as client:
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("kept"))
        assert answer.code == ResponseCode.SUCCESS, answer
        assert bodies(answer) == [b"kept-%d" % i for i in range(5)]


def raw_frame(header: bytes, serialize_type: int = 0, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), serialize_type << 24 | len(header))


@pytest.mark.parametrize(
    ("fields", "remark"),
    [
        ({"queueId": "0"}, "header field topic is missing"),
        ({"topic": "kept"}, "header field queueId is missing"),
        ({"topic": "kept", "queueId": "zero"}, "header field queueId='zero' is not an integer"),
        ({"topic": "kept", "queueId": "9" * 12}, "is outside"),
        ({"topic": "kept", "queueId": " 0"}, "is not an integer"),
    ],
)
def test_missing_and_non_numeric_header_fields_in_both_forms(node, fields, remark):
    with RemotingClient(node.remoting) as client:
        for form in (0, SERIALIZE_ROCKETMQ):
            answer = client.call(RequestCode.GET_MAX_OFFSET, fields, serialize_type=form)
            assert answer.code == ResponseCode.SYSTEM_ERROR and remark in answer.remark, answer
        assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "kept", "queueId": "0"}).code == 0
    assert_kept_intact(node)


def test_unknown_codes_are_answered_not_supported_and_the_connection_goes_on(node):
    with RemotingClient(node.remoting) as client:
        for code in (0, 999, 200_999):
            answer = client.call(code, {"topic": "kept"})
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert answer.remark == f" request type {code} not supported"
        assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "kept", "queueId": "0"}).code == 0


@pytest.mark.parametrize(
    "frame",
    [
        raw_frame(b"{}", serialize_type=2) + b"{}",  # a serialize type RocketMQ does not have
        struct.pack(">i", 17 << 20) + b"\x00" * 64,  # over the 16 MiB frame limit
        struct.pack(">i", -5),  # a negative length
        raw_frame(b"x" * 8) + b"not json",  # a JSON header that does not parse
    ],
    ids=["serialize-type-2", "oversize", "negative-length", "header-not-json"],
)
def test_frames_that_cannot_be_answered_close_only_their_connection(node, frame):
    with RemotingClient(node.remoting) as other, RemotingClient(node.remoting) as bad:
        bad.send_raw(frame)
        assert bad.closed_by_peer()
        assert other.call(RequestCode.GET_MAX_OFFSET, {"topic": "kept", "queueId": "0"}).code == 0
    assert_kept_intact(node)


def test_a_header_nested_past_the_recursion_limit_closes_with_no_traceback_and_no_flood(node):
    """It raised RecursionError out of the connection: a traceback in the node's log per
    frame, unbounded. Now the connection is closed and, one client reconnecting in a loop,
    the log gets at most a line or two saying why."""
    nested = b"[" * 100_000
    frame = raw_frame(nested) + nested
    with open(node.log_path, encoding="utf-8", errors="replace") as log:
        log.seek(0, 2)
        for _ in range(20):
            with RemotingClient(node.remoting) as bad:
                bad.send_raw(frame)
                assert bad.closed_by_peer()
        with RemotingClient(node.remoting) as other:
            probe = other.call(RequestCode.GET_MAX_OFFSET, {"topic": "kept", "queueId": "0"})
            assert probe.code == ResponseCode.SUCCESS
        written = log.read()
    assert "Traceback" not in written and "RecursionError" not in written, written[-3000:]
    # At most a line or two (none when the tests before opened the 10 s window of this
    # kind of line; the line itself: test_remoting_bounds.py).
    closing = [line for line in written.splitlines() if "closing remoting connection" in line]
    assert len(closing) <= 2, closing
    assert all("nested too deeply" in line for line in closing), closing
    assert_kept_intact(node)


def test_a_truncated_frame_then_a_disconnect_stores_nothing(node):
    frame = encode(
        RemotingCommand(
            RequestCode.SEND_MESSAGE_V2,
            opaque=9,
            ext_fields={"a": "p", "b": "kept", "e": "0", "i": ""},
            body=b"never whole",
        )
    )
    with RemotingClient(node.remoting) as client:
        client.send_raw(frame[:-3])  # the body's last bytes never come
    assert_kept_intact(node)  # five messages, not six


def test_a_client_leaving_mid_long_poll_leaves_the_next_message_to_the_next_poll(node):
    leaving = RemotingClient(node.remoting)
    opaque = leaving.send(RequestCode.PULL_MESSAGE, pull_fields("waited", suspend_ms=20_000))
    assert opaque
    leaving.close()  # mid long poll: its handler is cancelled, its wait dropped
    with RemotingClient(node.remoting) as waiting, RemotingClient(node.remoting) as producer:
        started = time.monotonic()
        waiting.send(RequestCode.PULL_MESSAGE, pull_fields("waited", suspend_ms=20_000))
        assert send_v2(producer, "waited", b"for the one still there").code == 0
        answer = waiting.receive()
        assert answer.code == ResponseCode.SUCCESS
        assert bodies(answer) == [b"for the one still there"]
        assert time.monotonic() - started < 10  # woken by the message, not by the timeout


def test_a_client_that_never_reads_its_answers_is_closed_and_others_are_served(node):
    """200 pulls of about 1 MiB each sent at once by a client with a tiny receive window
    that reads nothing: past 64 MiB of unsent answers the node closes it."""
    host, _, port = node.remoting.rpartition(":")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect((host, int(port)))
    requests = b"".join(
        encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque=i, ext_fields=pull_fields("big")))
        for i in range(1, 201)
    )
    reader.sendall(requests)
    with RemotingClient(node.remoting) as other:
        deadline = time.monotonic() + 30
        while True:  # the node keeps answering others while it decides
            probe = other.call(RequestCode.GET_MAX_OFFSET, {"topic": "big", "queueId": "0"})
            assert probe.code == ResponseCode.SUCCESS
            if value(scrape(node.metrics), "ferrymq_remoting_connections") == 1:
                break  # only ``other`` is left open
            assert time.monotonic() < deadline, "a peer that does not read was kept open"
    assert _ends(reader), "the node's side of the connection is still open"
    reader.close()
    with RemotingClient(node.remoting) as client:
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("big"))
        assert bodies(answer) == [BODY] * 17  # 1 MiB a pull: what fits, whole and unchanged
    assert_kept_intact(node)


def _ends(connection: socket.socket) -> bool:
    """Whether ``connection`` ends (EOF or reset) once what was sent on it is read."""
    connection.settimeout(5)
    try:
        while connection.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True
