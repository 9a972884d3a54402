"""The remoting transport (node/remoting/connection.py, server.py) in-process, with
handlers that echo, wait, fail and ask the client: request/response by opaque, oneway,
bad input of every kind, slow and gone peers, the node's own requests to a client."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time

import pytest
import uvloop

from ferrymq.codec.remoting import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    decode_frame,
    encode,
)
from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.launcher.polling import until
from node.remoting.connection import TransportLimits
from node.remoting.dispatch import Dispatch
from node.remoting.server import RemotingServer
from tests.support.remoting_client import RemotingClient

ECHO, SLOW, FAIL, FIELD, ASK, BIG = 10, 11, 12, 13, 14, 15
LIMITS = TransportLimits(
    max_frame_bytes=1 << 20,
    write_high_bytes=64 << 10,
    write_low_bytes=16 << 10,
    write_max_bytes=1 << 20,
    max_in_flight=8,
)


class Handlers:
    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.asked: list[RemotingCommand | Exception] = []

    async def echo(self, request, connection):
        return request.reply(
            ResponseCode.SUCCESS, ext_fields=dict(request.ext_fields), body=request.body
        )

    async def slow(self, request, connection):
        try:
            await asyncio.sleep(float(request.text("seconds")))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return request.reply(ResponseCode.SUCCESS, "slept")

    async def fail(self, request, connection):
        raise RuntimeError("boom")

    async def field(self, request, connection):
        return request.reply(ResponseCode.SUCCESS, str(request.int32("queueId")))

    async def ask(self, request, connection):
        try:
            answer = await connection.request(
                RemotingCommand(40, ext_fields={"consumerGroup": "G"}), float(request.text("wait"))
            )
        except (TimeoutError, ConnectionError) as error:
            self.asked.append(error)
            return request.reply(ResponseCode.SYSTEM_ERROR, type(error).__name__)
        self.asked.append(answer)
        return request.reply(ResponseCode.SUCCESS, answer.remark)

    async def big(self, request, connection):
        return request.reply(ResponseCode.SUCCESS, body=bytes(4 << 20))


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
def server(request):
    """A listener on its own thread and loop (the node's uvloop, and the default one)."""
    handlers = Handlers()
    dispatch = Dispatch(body_codes={ECHO})  # the one handler that reads its body
    for code, handler in [
        (ECHO, handlers.echo),
        (SLOW, handlers.slow),
        (FAIL, handlers.fail),
        (FIELD, handlers.field),
        (ASK, handlers.ask),
        (BIG, handlers.big),
    ]:
        dispatch.register(code, handler)
    loop = uvloop.new_event_loop() if request.param == "uvloop" else asyncio.new_event_loop()
    remoting = RemotingServer(dispatch, LIMITS)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> int:
        port = await remoting.bind("127.0.0.1", 0)
        await remoting.serve()
        return port

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    yield f"127.0.0.1:{port}", handlers, remoting
    asyncio.run_coroutine_threadsafe(remoting.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_requests_are_answered_by_opaque_in_both_header_forms(server):
    address, _, _ = server
    with RemotingClient(address) as client:
        for serialize_type in (0, SERIALIZE_ROCKETMQ):
            answer = client.call(ECHO, {"k": "v"}, b"body", serialize_type=serialize_type)
            assert answer.code == 0 and answer.ext_fields == {"k": "v"} and answer.body == b"body"
            assert answer.serialize_type == serialize_type and answer.flag == FLAG_RESPONSE
        # Several in flight, answered each to its own opaque.
        sent = [client.send(ECHO, {"n": str(i)}) for i in range(5)]
        answers = {a.opaque: a.ext_fields["n"] for a in (client.receive() for _ in sent)}
        assert answers == {opaque: str(i) for i, opaque in enumerate(sent)}


def test_an_unknown_code_is_answered_not_supported_naming_it(server):
    with RemotingClient(server[0]) as client:
        answer = client.call(4321)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "4321" in answer.remark


def test_a_failing_handler_is_answered_system_error_and_logged_once(server, caplog):
    with caplog.at_level(logging.ERROR, logger="ferrymq.remoting"), RemotingClient(server[0]) as c:
        for _ in range(3):
            answer = c.call(FAIL)
            assert answer.code == ResponseCode.SYSTEM_ERROR and "boom" in answer.remark
        assert c.call(ECHO).code == 0  # the connection goes on
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) <= 1  # once per (code, type) for the whole server


def test_missing_and_non_numeric_header_fields_get_a_precise_remark(server):
    with RemotingClient(server[0]) as client:
        assert client.call(FIELD, {}).remark == "header field queueId is missing"
        answer = client.call(FIELD, {"queueId": "seven"})
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "header field queueId='seven' is not an integer"
        assert client.call(FIELD, {"queueId": "7"}).remark == "7"


def test_a_oneway_request_gets_no_answer(server):
    with RemotingClient(server[0]) as client:
        client.send(ECHO, {"n": "oneway"}, flag=FLAG_ONEWAY)
        client.send(4321, flag=FLAG_ONEWAY)  # not even for an unknown code
        answer = client.call(ECHO, {"n": "two-way"})
        assert answer.ext_fields == {"n": "two-way"}


def test_a_slow_request_does_not_hold_up_the_next_frame(server):
    with RemotingClient(server[0]) as client:
        slow = client.send(SLOW, {"seconds": "1.5"})
        started = time.monotonic()
        answer = client.call(ECHO, {"n": "quick"})
        assert time.monotonic() - started < 1.0 and answer.ext_fields == {"n": "quick"}
        assert client.receive().opaque == slow


def test_more_requests_in_flight_than_the_limit_are_answered_busy(server):
    with RemotingClient(server[0]) as client:
        for _ in range(LIMITS.max_in_flight):
            client.send(SLOW, {"seconds": "1"})
        answer = client.call(ECHO)
        assert answer.code == ResponseCode.SYSTEM_BUSY and "limit" in answer.remark


def test_a_client_leaving_mid_long_poll_ends_its_handler(server):
    address, handlers, remoting = server
    handlers.cancelled.clear()
    client = RemotingClient(address)
    client.send(SLOW, {"seconds": "30"})
    until(lambda: any(c.in_flight for c in list(remoting.connections)), timeout_s=10)
    client.close()
    assert handlers.cancelled.wait(10)
    with RemotingClient(address) as other:
        assert other.call(ECHO).code == 0


def test_an_oversize_frame_closes_the_connection_before_its_body_is_read(server):
    with RemotingClient(server[0]) as client:
        client.send_raw(struct.pack(">i", (1 << 20) + 1) + b"x" * 100)
        assert client.closed_by_peer()
    with RemotingClient(server[0]) as other:
        assert other.call(ECHO).code == 0


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">iI", 6, 2 << 24 | 2) + b"{}",  # serialize type 2
        struct.pack(">iI", 12, 8) + b"not json",  # header not JSON: no opaque to answer
        struct.pack(">iI", 8, 99) + b"{}{}",  # header length past the frame
        struct.pack(">i", 1),  # shorter than a frame can be
    ],
)
def test_frames_that_cannot_be_answered_close_the_connection(server, frame):
    with RemotingClient(server[0]) as client:
        client.send_raw(frame)
        assert client.closed_by_peer()


def test_a_malformed_header_with_a_known_opaque_is_answered_and_the_connection_goes_on(server):
    header = b'{"opaque":42,"code":"ten"}'
    with RemotingClient(server[0]) as client:
        client.send_raw(struct.pack(">iI", 4 + len(header), len(header)) + header)
        answer = client.receive()
        assert answer.opaque == 42 and answer.code == ResponseCode.SYSTEM_ERROR
        assert "code='ten' is not an integer" in answer.remark
        assert client.call(ECHO).code == 0


def test_a_truncated_frame_waits_for_its_rest_and_blocks_nobody(server):
    frame = encode(RemotingCommand(ECHO, opaque=5, body=b"whole"))
    with RemotingClient(server[0]) as partial, RemotingClient(server[0]) as other:
        partial.send_raw(frame[:10])
        assert other.call(ECHO).code == 0
        partial.send_raw(frame[10:])
        assert partial.receive().body == b"whole"
        partial.send_raw(frame[:7])  # then the peer leaves mid-frame
    with RemotingClient(server[0]) as again:
        assert again.call(ECHO).code == 0


def test_the_node_asks_a_client_over_its_own_connection(server):
    address, handlers, _ = server
    handlers.asked.clear()
    with RemotingClient(address) as client:
        final = client.send(ASK, {"wait": "5"})
        asked = client.receive()
        assert not asked.is_response and asked.code == 40  # opaques of its own numbering
        client.send(0, flag=FLAG_RESPONSE, opaque=asked.opaque, fields={})
        # The client's answer carries no remark: the handler echoes it (None).
        answer = client.receive()
        assert answer.opaque == final and answer.code == 0
        assert isinstance(handlers.asked[-1], RemotingCommand)
        # An unanswered request times out; an answer to nothing is dropped.
        client.send(0, flag=FLAG_RESPONSE, opaque=987654)
        final = client.send(ASK, {"wait": "0.2"})
        client.receive()  # the request, left unanswered
        answer = client.receive()
        assert answer.opaque == final and answer.remark == "TimeoutError"


def test_a_peer_that_does_not_read_is_closed_and_others_are_served(server):
    """Answers of 4 MiB to a peer with a tiny receive window: past ``write_max_bytes``
    unsent, the node closes the connection instead of holding them."""
    address, _, remoting = server
    before = set(remoting.connections)
    host, _, port = address.rpartition(":")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        reader.connect((host, int(port)))
        reader.sendall(b"".join(encode(RemotingCommand(BIG, opaque=i)) for i in range(8)))
        time.sleep(0.5)  # reading nothing meanwhile
        reader.settimeout(20)
        received = 0
        try:
            while data := reader.recv(4096):
                received += len(data)
                time.sleep(0.001)
        except ConnectionResetError:
            pass
        assert received < 8 * (4 << 20), "every answer was delivered: nothing was cut off"
        until(lambda: not set(remoting.connections) - before, timeout_s=10)
        with RemotingClient(address) as other:
            assert other.call(ECHO).code == 0
    finally:
        reader.close()


class RecordingTransport:
    """A transport that keeps what each write call was given (one list per call)."""

    def __init__(self) -> None:
        self.calls: list[list[bytes]] = []
        self.closed = False

    def write(self, data) -> None:
        self.calls.append([bytes(data)])

    def writelines(self, items) -> None:
        self.calls.append([bytes(item) for item in items])

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
@pytest.mark.parametrize("held", [40, 4])
def test_answers_made_in_one_turn_of_the_loop_leave_together_when_many_are_in_flight(
    loop_kind, held
):
    """Requests in one read, answered together once a shared event is set (as one
    replication acknowledgement releases many sends). With ``GATHER_ANSWERS_IN_FLIGHT``
    or more in flight the first answer leaves at once and one write carries the others,
    in the order they were made; with fewer, each leaves at once. Answers still waiting
    for the turn's end when the connection is closed leave before it closes."""
    from node.remoting.connection import GATHER_ANSWERS_IN_FLIGHT, RemotingConnection
    from node.remoting.quiet_log import FailureLog

    assert 4 < GATHER_ANSWERS_IN_FLIGHT < 40

    async def scenario() -> list:
        gates = [asyncio.Event(), asyncio.Event()]

        async def hold(request, connection):
            await gates[request.opaque // 1000].wait()
            return request.reply(ResponseCode.SUCCESS, str(request.opaque))

        dispatch = Dispatch()
        dispatch.register(ECHO, hold)
        connection = RemotingConnection(
            dispatch, TransportLimits(), FailureLog(), lambda c: True, lambda c: None
        )
        transport = RecordingTransport()
        connection.connection_made(transport)
        for gate in (0, 1):
            requests = (RemotingCommand(ECHO, opaque=gate * 1000 + i) for i in range(held))
            connection.data_received(b"".join(encode(request) for request in requests))
            await asyncio.sleep(0)
            gates[gate].set()
            if gate == 1:  # closed in the turn that answers them
                asyncio.get_running_loop().call_soon(connection.close)
        await until_async(lambda: transport.closed)
        return transport.calls

    async def until_async(condition) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, "the connection was not closed"
            await asyncio.sleep(0.001)

    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    try:
        calls = loop.run_until_complete(scenario())
    finally:
        loop.close()
    expected = [1, held - 1] if held >= 40 else [1] * held
    assert [len(call) for call in calls] == expected * 2, "writes of the answers"
    remarks = [decode_frame(frame).remark for call in calls for frame in call]
    assert remarks == [str(gate * 1000 + i) for gate in (0, 1) for i in range(held)]


def test_a_connection_keeps_up_while_its_unsent_answers_are_below_the_high_mark():
    """A followed fetch answers again unasked only while ``keeps_up``: answers gathered
    for the turn's end are unsent too (they are not in the transport's buffer yet, so
    its pause does not see them), and a paused or closed connection does not keep up."""
    from node.remoting.connection import RemotingConnection
    from node.remoting.quiet_log import FailureLog

    class Buffered(RecordingTransport):
        size = 0

        def get_write_buffer_size(self) -> int:
            return self.size

    async def scenario() -> None:
        connection = RemotingConnection(
            Dispatch(),
            TransportLimits(write_high_bytes=1000, write_low_bytes=100),
            FailureLog(),
            lambda c: True,
            lambda c: None,
        )
        transport = Buffered()
        connection.connection_made(transport)
        assert connection.keeps_up()
        transport.size = 999
        assert connection.keeps_up()
        transport.size = 500
        connection._outgoing_bytes = 500  # gathered for the turn's end
        assert not connection.keeps_up()
        connection._outgoing_bytes = 0
        assert connection.keeps_up()
        connection.pause_writing()
        assert not connection.keeps_up()
        connection.resume_writing()
        assert connection.keeps_up()
        connection.close()
        assert not connection.keeps_up()

    asyncio.run(scenario())
