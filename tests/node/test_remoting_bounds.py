"""What one remoting client may hold of a node, and what it gets past each bound
(node/remoting/connection.py, server.py, node/request_budget.py): request bytes per
connection (reading stops) and per node (SYSTEM_BUSY), bodies a request's code does not
read (dropped before the request is held), idle and silent connections, connections per
node and per client address, and the log lines a peer can cause at will.

In-process listeners with test handlers, on uvloop (the node's loop) and the default
loop; the node's ``[remoting]`` settings that set these bounds are proved in
``test_remoting_bounds_node.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ferrymq.codec.remoting import RemotingCommand, encode
from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.launcher.polling import until
from node.remoting.connection import TransportLimits
from node.remoting.dispatch import Dispatch
from node.remoting.server import RemotingServer
from node.tls import ClientTls, remoting_ssl_context
from tests.support import ROOT
from tests.support.remoting_client import RemotingClient
from tests.support.remoting_listener import listening
from tests.support.tls_certs import make_pki

ECHO, POLL, HOLD = 20, 21, 22  # ECHO and HOLD read their bodies, POLL does not
LIMITS = TransportLimits(max_frame_bytes=1 << 20)
PIECE = 768 << 10  # a request body: under the frame limit, over a read (256 KiB)


class Handlers:
    def __init__(self) -> None:
        self.gate = asyncio.Event()  # set (on the loop) by ``Serving.release``
        self.polls: list[int] = []  # the body size each poll was handed
        self.holding = 0

    async def echo(self, request, connection):
        return request.reply(ResponseCode.SUCCESS, body=request.body)

    async def poll(self, request, connection):
        """A long poll: waits ``seconds``, or until released."""
        self.polls.append(len(request.body))
        seconds = request.text("seconds", "")
        if seconds:
            await asyncio.sleep(float(seconds))
        else:
            await self.gate.wait()
        return request.reply(ResponseCode.SUCCESS, "polled")

    async def hold(self, request, connection):
        """A request that keeps its body until released (a send waiting for replicas)."""
        self.holding += 1
        await self.gate.wait()
        return request.reply(ResponseCode.SUCCESS, str(len(request.body)))


@dataclass
class Serving:
    address: str
    handlers: Handlers
    remoting: RemotingServer
    loop: asyncio.AbstractEventLoop

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.handlers.gate.set)

    def connections(self) -> list:
        return list(self.remoting.connections)


@contextlib.contextmanager
def serving(
    limits: TransportLimits, loop_kind: str, ssl_context: ssl.SSLContext | None = None
) -> Iterator[Serving]:
    """A listener on its own thread and loop."""
    handlers = Handlers()
    dispatch = Dispatch(body_codes={ECHO, HOLD})
    dispatch.register_all([(ECHO, handlers.echo), (POLL, handlers.poll), (HOLD, handlers.hold)])
    with listening(dispatch, limits, loop_kind, ssl_context) as (address, remoting, loop):
        try:
            yield Serving(address, handlers, remoting, loop)
        finally:
            loop.call_soon_threadsafe(handlers.gate.set)


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request) -> str:
    return request.param


# ---- request bytes ---------------------------------------------------------------------
def test_a_long_poll_holds_none_of_its_body_while_it_waits(loop_kind):
    """48 pulls with 16 MiB bodies pinned 800 MiB of one connection: a code whose
    handler does not read the body is handed none, and the request holds only its header."""
    with serving(LIMITS, loop_kind) as node, RemotingClient(node.address) as client:
        poll = client.send(POLL, {}, bytes(512 << 10))
        until(lambda: node.handlers.polls, what="the poll to start")
        assert node.handlers.polls == [0], "the long poll was handed its body"
        assert 0 < node.remoting.budget.total < 1024  # its header, not its body
        # A code whose handler reads its body still gets it whole.
        assert client.call(ECHO, {}, b"kept" * 1000).body == b"kept" * 1000
        node.release()
        assert client.receive().opaque == poll
        until(lambda: node.remoting.budget.total == 0, what="the poll's bytes to be released")


def test_a_connection_holding_more_than_its_limit_is_not_read_until_it_holds_less(loop_kind):
    """Six requests of 768 KiB that wait, then one more, sent at once: past 2 MiB held the
    connection is not read (the peer's writes back up: TCP back-pressure, as RocketMQ's
    flow control); once the held requests end it is read again and everything answered."""
    limits = replace(LIMITS, max_request_bytes_per_connection=2 << 20)
    with serving(limits, loop_kind) as node, RemotingClient(node.address, timeout_s=20) as client:
        frames = b"".join(
            encode(RemotingCommand(HOLD, opaque=i, body=bytes(PIECE))) for i in range(1, 7)
        )
        sender = threading.Thread(
            target=client.send_raw, args=(frames + encode(RemotingCommand(ECHO, opaque=7)),)
        )
        sender.start()
        (connection,) = until(node.connections, what="the connection")
        until(
            lambda: node.handlers.holding == 6 or connection.reading_paused,
            what="reading to stop, or every request to be taken",
        )
        assert node.handlers.holding < 6, "every request was read: nothing stopped reading"
        held = node.remoting.budget.held(connection)
        assert held > limits.max_request_bytes_per_connection
        assert held <= limits.max_request_bytes_per_connection + 2 * PIECE
        node.release()
        answers = [client.receive() for _ in range(7)]
        assert sorted(a.opaque for a in answers) == list(range(1, 8))
        assert {a.code for a in answers} == {ResponseCode.SUCCESS}
        sender.join(10)
        until(lambda: node.remoting.budget.total == 0, what="every request's bytes released")
        assert not connection.reading_paused


def test_past_the_nodes_request_bytes_a_request_is_answered_busy_naming_the_limit(loop_kind):
    """The node's total is shared by its connections: a request that would take it past
    the limit is answered SYSTEM_BUSY (what RocketMQ's flow control answers) and dropped;
    a smaller one that fits, and the same one once bytes are released, are served."""
    limits = replace(LIMITS, max_request_bytes=2 << 20, max_request_bytes_per_connection=8 << 20)
    with (
        serving(limits, loop_kind) as node,
        RemotingClient(node.address) as first,
        RemotingClient(node.address) as second,
    ):
        held = [first.send(HOLD, {}, bytes(PIECE)) for _ in range(2)]
        until(lambda: node.handlers.holding == 2, what="two requests held")
        refused = first.send(HOLD, {}, bytes(PIECE))
        small = first.send(ECHO, {}, b"small")
        answer = first.receive()
        assert answer.opaque == refused, "the request past the node's limit was taken"
        assert answer.code == ResponseCode.SYSTEM_BUSY
        assert "max_request_bytes" in answer.remark and str(2 << 20) in answer.remark
        assert first.receive().opaque == small
        assert second.call(HOLD, {}, bytes(PIECE)).code == ResponseCode.SYSTEM_BUSY
        assert node.handlers.holding == 2
        node.release()
        assert sorted(first.receive().opaque for _ in held) == sorted(held)
        assert second.call(HOLD, {}, bytes(PIECE)).code == ResponseCode.SUCCESS


def test_every_handler_module_that_reads_a_body_is_known():
    """Bodies are dropped for codes outside ``BODY_CODES`` (node/remoting/dispatch.py): a
    handler module that starts reading ``request.body`` must add its codes there (this
    list fails until it is looked at)."""
    from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode
    from node.remoting.dispatch import BODY_CODES

    readers = {
        path.name
        for path in (Path(ROOT) / "node" / "remoting").glob("*.py")
        if "request.body" in path.read_text()
    }
    assert readers == {
        "admin_codes.py",
        "broker_clients.py",
        "broker_locks.py",
        "broker_pop.py",
        "broker_send.py",
        "client_config.py",
        "ferry_data.py",
        "fetch_lane.py",  # FERRY_FETCH's, as ferry_data.py's handler
        "produce_lane.py",  # FERRY_PRODUCE's, as ferry_data.py's handler
        "signature.py",  # every signed request: a dropped body is signed as empty
    }, "a handler module started or stopped reading request.body: update BODY_CODES"
    assert {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
        RequestCode.CHECK_CLIENT_CONFIG,
        RequestCode.BATCH_ACK_MESSAGE,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        FerryRequestCode.FERRY_PRODUCE,
        FerryRequestCode.FERRY_FETCH,
    } == BODY_CODES


# ---- idle and silent connections ------------------------------------------------------
def test_an_idle_connection_is_closed_unless_a_request_of_it_is_in_flight(loop_kind):
    limits = replace(LIMITS, idle_timeout_s=0.3)
    with (
        serving(limits, loop_kind) as node,
        RemotingClient(node.address, timeout_s=5) as idle,
        RemotingClient(node.address, timeout_s=5) as polling,
    ):
        assert idle.call(ECHO).code == ResponseCode.SUCCESS
        started = time.monotonic()
        poll = polling.send(POLL, {"seconds": "1"})
        assert idle.closed_by_peer(), "a connection idle past the timeout was kept open"
        assert time.monotonic() - started >= 0.25
        answer = polling.receive()  # its long poll outlived the timeout: kept open
        assert answer.opaque == poll and answer.code == ResponseCode.SUCCESS
        assert polling.closed_by_peer()  # then idle in turn


def test_a_connection_without_a_whole_frame_soon_after_connecting_is_closed(loop_kind):
    frame = encode(RemotingCommand(ECHO, opaque=1, body=b"whole"))
    limits = replace(LIMITS, first_frame_timeout_s=0.3)
    with (
        serving(limits, loop_kind) as node,
        RemotingClient(node.address, timeout_s=5) as silent,
        RemotingClient(node.address, timeout_s=5) as partial,
        RemotingClient(node.address, timeout_s=5) as served,
    ):
        partial.send_raw(frame[:10])  # bytes, but never a whole frame
        assert served.call(ECHO).code == ResponseCode.SUCCESS
        assert silent.closed_by_peer(), "a connection that sent nothing was kept open"
        assert partial.closed_by_peer(), "a connection that sent half a frame was kept open"
        assert served.call(ECHO).code == ResponseCode.SUCCESS  # its first frame came in time


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_a_tls_handshake_that_never_finishes_is_closed_at_the_first_frame_deadline(loop_kind, pki):
    server_tls = remoting_ssl_context(ClientTls("required", pki.server_cert, pki.server_key))
    limits = replace(LIMITS, first_frame_timeout_s=0.3)
    with (
        serving(limits, loop_kind, server_tls) as node,
        RemotingClient(node.address, timeout_s=5) as stalled,  # sends no ClientHello
        RemotingClient(
            node.address, ssl_context=ssl.create_default_context(cafile=pki.ca)
        ) as secure,
    ):
        assert secure.call(ECHO, {}, b"over tls").body == b"over tls"
        assert stalled.closed_by_peer(), "a connection that never finished its handshake"
        assert secure.call(ECHO).code == ResponseCode.SUCCESS


# ---- connections per node and per address ---------------------------------------------
def test_connections_past_the_address_and_node_limits_are_closed_at_once_and_logged_quietly(
    loop_kind, caplog
):
    limits = replace(LIMITS, max_connections=4, max_connections_per_address=2)
    with (
        caplog.at_level(logging.INFO, logger="ferrymq.remoting"),
        serving(limits, loop_kind) as node,
        contextlib.ExitStack() as stack,
    ):

        def connect(source: str) -> RemotingClient:
            return stack.enter_context(RemotingClient(node.address, timeout_s=5, source=source))

        first = [connect("127.0.0.1") for _ in range(2)]
        assert all(c.call(ECHO).code == ResponseCode.SUCCESS for c in first)
        assert connect("127.0.0.1").closed_by_peer(), "a third connection from one address"
        others = [connect("127.0.0.2") for _ in range(2)]
        assert all(c.call(ECHO).code == ResponseCode.SUCCESS for c in others)
        assert connect("127.0.0.3").closed_by_peer(), "a fifth connection to the node"
        first[0].close()
        until(lambda: len(node.remoting.connections) == 3, what="the closed one to leave")
        assert connect("127.0.0.1").call(ECHO).code == ResponseCode.SUCCESS
        for _ in range(20):  # one client refused in a loop: no flood of lines
            assert connect("127.0.0.3").closed_by_peer()
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("max_connections_per_address" in line for line in refusals), refusals
    assert any("max_connections)" in line for line in refusals), refusals
    assert len(refusals) <= 3, refusals


# ---- frames that cannot be read: closed, with a line that says why, quietly -----------
NESTED = b"[" * 100_000  # a JSON header nested far past Python's recursion limit


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">iI", 4 + len(NESTED), len(NESTED)) + NESTED,
        struct.pack(">i", (1 << 20) + 1),  # over the frame limit
        struct.pack(">iI", 6, 2 << 24 | 2) + b"{}",  # serialize type 2
    ],
    ids=["nested-json-header", "oversize", "serialize-type-2"],
)
def test_unreadable_frames_close_their_connection_with_no_traceback_and_no_flood(
    loop_kind, caplog, frame
):
    """One client reconnecting in a loop with a frame that cannot be read: each
    connection is closed, the log gets a line or two that say why, never a traceback."""
    with caplog.at_level(logging.INFO), serving(LIMITS, loop_kind) as node:
        for _ in range(30):
            with RemotingClient(node.address, timeout_s=5) as bad:
                bad.send_raw(frame)
                assert bad.closed_by_peer()
        with RemotingClient(node.address) as other:
            assert other.call(ECHO).code == ResponseCode.SUCCESS
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    closing = [
        r.getMessage() for r in caplog.records if "closing remoting connection" in r.getMessage()
    ]
    assert 1 <= len(closing) <= 2, closing
    if frame.endswith(b"[["):
        assert "nested" in closing[0], closing
