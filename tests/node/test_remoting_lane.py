"""A request code taken by a lane in the connection's callback (``Dispatch.lanes``; the
produce lane is ``node/remoting/produce_lane.py``): the connection offers each request of
the lane's code to it before any task, unless requests of the same connection are being
handled as tasks (so a connection's requests keep their order); what the lane declines
goes to the handler; a lane's answer, written at once or later from a callback, is
observed once and counts as in flight until it leaves; what the lane raises is answered
SYSTEM_ERROR. In-process listeners on uvloop (the node's loop) and the default loop."""

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

LANE, HELD = 25, 26


class Held:
    def __init__(self) -> None:
        self.cancelled = 0

    def cancel(self) -> None:
        self.cancelled += 1


class StubLane:
    """Takes a request by its body: ``now`` answered at once, ``later`` answered when the
    test releases it (as a confirming ACK would), ``decline`` left to the handler,
    ``raise`` raises, ``hold`` waits until cancelled."""

    code = LANE

    def __init__(self) -> None:
        self.offered: list[bytes] = []
        self.later: list = []  # what writes each ``later`` answer
        self.in_flight_seen: list[int] = []
        self.held: list[Held] = []

    def take(self, request, connection, answerer) -> bool:
        body = bytes(request.body)
        self.offered.append(body)
        if body == b"decline":
            return False
        if body == b"raise":
            raise RuntimeError("the lane failed")
        if body == b"hold":  # waits, as a parked fetch does, until cancelled
            self.held.append(Held())
            return connection.hold(self.held[-1])
        write = answerer(request, request.reply(ResponseCode.SUCCESS, "lane", body=body))
        if body == b"now":
            write()
        else:
            self.later.append(write)
        self.in_flight_seen.append(connection.in_flight)
        return True


class Handlers:
    def __init__(self) -> None:
        self.gate = asyncio.Event()  # set on the loop: the held handler returns
        self.observed: list[tuple[int, int | None]] = []

    async def handler(self, request, connection):
        return request.reply(ResponseCode.SUCCESS, "handler", body=request.body)

    async def held(self, request, connection):
        await self.gate.wait()
        return request.reply(ResponseCode.SUCCESS, "held")

    def observe(self, code: int, response: int | None, seconds: float) -> None:
        self.observed.append((code, response))


@contextlib.contextmanager
def serving(
    loop_kind: str, limits: TransportLimits | None = None
) -> Iterator[tuple[str, StubLane, Handlers, asyncio.AbstractEventLoop]]:
    lane, handlers = StubLane(), Handlers()
    dispatch = Dispatch(body_codes={LANE})
    dispatch.register_all([(LANE, handlers.handler), (HELD, handlers.held)])
    dispatch.add_lane(lane)
    listener = listening(dispatch, limits or TransportLimits(), loop_kind, observe=handlers.observe)
    with listener as (address, _, loop):
        try:
            yield address, lane, handlers, loop
        finally:
            loop.call_soon_threadsafe(handlers.gate.set)


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request) -> str:
    return request.param


def test_the_lane_answers_at_once_or_later_and_declines_to_the_handler(loop_kind):
    with (
        serving(loop_kind) as (address, lane, handlers, loop),
        RemotingClient(address) as client,
    ):
        answer = client.call(LANE, body=b"now")
        assert (answer.code, answer.remark, answer.body) == (ResponseCode.SUCCESS, "lane", b"now")
        declined = client.call(LANE, body=b"decline")
        assert (declined.remark, declined.body) == ("handler", b"decline")

        opaque = client.send(LANE, body=b"later")
        until(lambda: lane.later, 10, "the lane to take it")
        assert lane.in_flight_seen[-1] == 1  # waiting for its answer: in flight
        loop.call_soon_threadsafe(lane.later[0])  # as the confirming ACK's callback
        later = client.response()
        assert (later.opaque, later.remark) == (opaque, "lane")

        failed = client.call(LANE, body=b"raise")
        assert failed.code == ResponseCode.SYSTEM_ERROR and "the lane failed" in failed.remark
        assert lane.offered == [b"now", b"decline", b"later", b"raise"]
        until(lambda: len(handlers.observed) == 4, 10, "every answer observed")
        assert handlers.observed == [(LANE, ResponseCode.SUCCESS)] * 3 + [
            (LANE, ResponseCode.SYSTEM_ERROR)
        ]


def test_a_connection_with_requests_being_handled_does_not_offer_the_lane(loop_kind):
    """Behind a request handled as a task, the next one of the same connection goes to
    its handler too: the lane would take it before the one ahead of it."""
    with (
        serving(loop_kind) as (address, lane, handlers, loop),
        RemotingClient(address) as client,
        RemotingClient(address) as other,
    ):
        held = client.send(HELD)
        behind = client.send(LANE, body=b"now")
        answer = client.response()
        assert (answer.opaque, answer.remark) == (behind, "handler")
        assert other.call(LANE, body=b"now").remark == "lane"  # another connection: free
        assert lane.offered == [b"now"]
        loop.call_soon_threadsafe(handlers.gate.set)
        assert client.response().opaque == held
        assert client.call(LANE, body=b"now").remark == "lane"  # nothing ahead any more


def test_answers_the_lane_owes_count_against_the_connections_in_flight_limit(loop_kind):
    with (
        serving(loop_kind, TransportLimits(max_in_flight=2)) as (address, lane, _, loop),
        RemotingClient(address) as client,
    ):
        first, second = client.send(LANE, body=b"later"), client.send(LANE, body=b"later")
        busy = client.call(LANE, body=b"now")
        assert busy.code == ResponseCode.SYSTEM_BUSY and "2 requests" in busy.remark
        until(lambda: len(lane.later) == 2, 10, "both taken")
        for write in lane.later:
            loop.call_soon_threadsafe(write)
        assert {client.response().opaque, client.response().opaque} == {first, second}
        assert client.call(LANE, body=b"now").remark == "lane"


def test_what_a_lane_left_waiting_is_cancelled_once_when_its_connection_ends(loop_kind):
    """As a task's long poll is cancelled when its peer goes: a gone peer's parked fetch
    must not wait out its poll, holding its state, for an answer nobody reads."""
    with serving(loop_kind) as (address, lane, _, _loop):
        with RemotingClient(address) as client:
            client.send(LANE, body=b"hold")
            client.send(LANE, body=b"hold")
            until(lambda: len(lane.held) == 2, 10, "both held")
            assert not any(held.cancelled for held in lane.held)
        until(lambda: all(held.cancelled for held in lane.held), 10, "cancelled at the end")
        assert [held.cancelled for held in lane.held] == [1, 1]
