"""A request answered before its handler returns (``RemotingConnection.answer_ahead``):
how a SYNC send's answer leaves in the callback of the ACK that confirmed it. The answer
leaves once, observed once, with the request's bytes released; whatever the handler
returns or raises after it is not sent. In-process listeners on uvloop (the node's
loop) and the default loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.launcher.polling import until
from node.remoting.connection import TransportLimits
from node.remoting.dispatch import Dispatch
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
