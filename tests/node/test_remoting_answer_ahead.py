"""A request answered before its handler returns (``RemotingConnection.answer_ahead``):
how a SYNC send's answer leaves in the callback of the ACK that confirmed it. The answer
leaves once, observed once, with the request's bytes released; whatever the handler
returns or raises after it is not sent. In-process listeners on uvloop (the node's
loop) and the default loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from ferrymq.codec.remoting_codes import FerryRequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data
from node.remoting.connection import TransportLimits
from node.remoting.dispatch import Dispatch
from node.remoting.ferry_data import FerryDataHandlers
from node.services.caller import Caller, Door
from node.services.reads import fetch_outcome
from tests.support.remoting_client import RemotingClient
from tests.support.remoting_listener import listening

ECHO, AHEAD, AHEAD_THEN_RAISE = 20, 23, 24


class Handlers:
    def __init__(self) -> None:
        self.gate = asyncio.Event()  # set on the loop: the handlers return
        self.observed: list[tuple[int, int | None]] = []
        self.in_flight_after_answer: list[int] = []
        self.answered_ahead: list[bool] = []

    async def echo(self, request, connection):
        return request.reply(ResponseCode.SUCCESS, body=request.body)

    async def ahead(self, request, connection):
        encoded = connection.answer_ahead(request)
        answer = encoded(request.reply(ResponseCode.SUCCESS, "ahead"))
        other = encoded(request.reply(ResponseCode.SYSTEM_ERROR, "a second answer: not sent"))

        def from_a_callback() -> None:  # as an ACK's intake runs it
            answer()
            answer()
            other()
            self.in_flight_after_answer.append(connection.in_flight)

        asyncio.get_running_loop().call_soon(from_a_callback)
        await self.gate.wait()  # the handler goes on after its answer left
        self.answered_ahead.append(connection.answered_ahead())
        if request.code == AHEAD_THEN_RAISE:
            raise RuntimeError("after the answer: not sent")
        return request.reply(ResponseCode.SYSTEM_ERROR, "returned: not sent")

    def observe(self, code: int, response: int | None, seconds: float) -> None:
        self.observed.append((code, response))


@contextlib.contextmanager
def serving(loop_kind: str) -> Iterator[tuple[str, Handlers, asyncio.AbstractEventLoop]]:
    handlers = Handlers()
    dispatch = Dispatch(body_codes={ECHO})
    dispatch.register_all(
        [(ECHO, handlers.echo), (AHEAD, handlers.ahead), (AHEAD_THEN_RAISE, handlers.ahead)]
    )
    listener = listening(dispatch, TransportLimits(), loop_kind, observe=handlers.observe)
    with listener as (address, _, loop):
        try:
            yield address, handlers, loop
        finally:
            loop.call_soon_threadsafe(handlers.gate.set)


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request) -> str:
    return request.param


@pytest.mark.parametrize("code", [AHEAD, AHEAD_THEN_RAISE])
def test_an_answer_ahead_leaves_once_before_the_handler_returns(loop_kind, code):
    with serving(loop_kind) as (address, handlers, loop), RemotingClient(address) as client:
        opaque = client.send(code)
        answer = client.response()  # while the handler still waits on its gate
        assert (answer.opaque, answer.code, answer.remark) == (
            opaque,
            ResponseCode.SUCCESS,
            "ahead",
        )
        # Its bytes were released as the answer left (noted just after, on the loop).
        assert until(lambda: handlers.in_flight_after_answer, 10, "the note") == [0]
        loop.call_soon_threadsafe(handlers.gate.set)
        # The handler's step that returns or raises after the append below ends before the
        # loop reads the next request: what it returned or raised is never sent, so the
        # next answer on the connection is the next request's.
        until(lambda: handlers.answered_ahead, 10, "the handler to go on")
        echoed = client.send(ECHO, body=b"next")
        following = client.response()
        assert (following.opaque, following.body) == (echoed, b"next")
        assert handlers.observed == [(code, ResponseCode.SUCCESS), (ECHO, ResponseCode.SUCCESS)]
        assert handlers.answered_ahead == [True]


class ParkedFetches:
    """The read service's ``fetch`` as seen by FERRY_FETCH's handler: it answers through
    ``ahead`` (as the reput's tail read does), then returns another outcome when released."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.returned: list[bool] = []

    async def fetch(
        self, caller, topic, group, queue_id, offset, count, size, tags, wait_s, ahead, follow=0
    ):
        asyncio.get_running_loop().call_soon(
            ahead, fetch_outcome(pb.OK, records=[b"given"], count=1, next_offset=offset + 1)
        )
        await self.gate.wait()
        self.returned.append(True)
        return fetch_outcome(pb.MESSAGE_NOT_FOUND, next_offset=offset)


def test_a_fetch_answered_from_a_callback_is_answered_once_with_that_answer():
    """FERRY_FETCH's handler hands the read service a way to answer from a callback
    (``node/tail_reads.py``): that answer leaves while the handler waits, and what the
    read returns after it is not sent."""
    reads = ParkedFetches()
    handlers = FerryDataHandlers(SimpleNamespace(reads=reads))
    caller = Caller(Door.REMOTING, "remoting:FERRY_FETCH", None)
    dispatch = Dispatch(body_codes={ECHO, FerryRequestCode.FERRY_FETCH})

    async def fetch(request, connection):
        return await handlers.fetch(request, connection, caller)

    async def echo(request, connection):
        return request.reply(ResponseCode.SUCCESS, body=request.body)

    dispatch.register_all([(FerryRequestCode.FERRY_FETCH, fetch), (ECHO, echo)])
    request = data.FetchRequest(topic="t", group="G", queue_id=0, offset=7, wait_ms=1000)
    listener = listening(dispatch, TransportLimits(), "uvloop")
    with listener as (address, _, loop), RemotingClient(address) as client:
        opaque = client.send(FerryRequestCode.FERRY_FETCH, body=request.SerializeToString())
        answer = client.response()  # while the read still waits
        fetched = data.FetchResponse.FromString(answer.body)
        assert (answer.opaque, fetched.code, fetched.next_offset) == (opaque, pb.OK, 8)
        assert fetched.records == b"given"
        loop.call_soon_threadsafe(reads.gate.set)
        until(lambda: reads.returned, 10, "the read to return")
        echoed = client.send(ECHO, body=b"next")
        following = client.response()  # the returned outcome was never sent
        assert (following.opaque, following.body) == (echoed, b"next")
