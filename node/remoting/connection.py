"""One client connection on the remoting port: frames in, handlers run, responses out.

An ``asyncio.Protocol`` (not streams: one callback per read, no reader task per
connection). What it guarantees:

- A frame's announced length is checked before any of it is buffered
  (``FrameSplitter``); a frame over the limit, a length below a frame's minimum, a header
  whose opaque cannot be read: the connection is closed (an answer could reach the wrong
  caller). A header that is malformed after its opaque was read is answered SYSTEM_ERROR
  with a remark that says what is wrong, and the connection goes on.
- Each request runs as its own task (``node/remoting/dispatch.py`` has the handler
  contract), so a long poll does not hold up the next frame; at most
  ``max_in_flight`` at once per connection, more are answered SYSTEM_BUSY.
- A request of a lane's code (``Dispatch.lanes``: the produce and fetch lanes) is offered
  to the lane in the read's callback, before any task, unless requests of this connection
  are being handled as tasks (its requests keep their order); what the lane declines goes
  to the handler. The answers the lane owes count as in flight until they leave; what a
  lane left waiting (``hold``: a parked fetch) is cancelled when the peer goes, as a
  task's long poll is.
- Unknown codes are answered REQUEST_CODE_NOT_SUPPORTED naming the code; a oneway request
  gets no answer, whatever happens.
- Writes are bounded: above ``write_high_bytes`` unsent, the connection stops reading
  (no new requests from a peer that does not read its answers); above
  ``write_max_bytes`` it is closed, so a slow reader costs a bounded amount of memory.
- With ``GATHER_ANSWERS_IN_FLIGHT`` requests of a connection in flight, the first
  answer made in a turn of the event loop leaves at once and the ones after it together
  at the turn's end (``_flush``): many answered together cost two system calls, not one
  each. With fewer in flight, every answer leaves at once.
- Requests are bounded by their bytes while handled (``node/request_budget.py``): a body
  its code does not read is dropped first (``Dispatch.keeps_body``); past
  ``max_request_bytes_per_connection`` held, the connection is not read until it holds
  less than half (the peer's writes back up); a request that would take the node past
  ``max_request_bytes`` is answered SYSTEM_BUSY and dropped.
- Idle and silent connections end: the listener's sweep (``server.py``) calls ``sweep``
  about once a second, so the hot path only sets a flag; a connection without a whole
  frame ``first_frame_timeout_s`` after it was accepted (its TLS handshake included: the
  listener's handshake timeout is the same), or with nothing received, nothing in flight
  and no answer leaving for ``idle_timeout_s``, is closed.
- Every line a peer can cause at will (a refusal, a dropped or timed-out connection) goes
  through ``QuietLog``: one per kind per 10 s, with a count of those left out.
- When the peer goes, its running handlers are cancelled (a long poll stops waiting)
  and the node's own requests to it fail at once.
- The node's own requests to the client (``request``, ``send_oneway``) get opaques of
  their own; a response is matched to its request by opaque, and an answer to no pending
  request is dropped.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ferrymq.codec.remoting import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    INT32_MAX,
    SERIALIZE_JSON,
    FrameError,
    FrameSplitter,
    HeaderFieldError,
    RemotingCommand,
    decode,
    encode_head,
)
from ferrymq.codec.remoting_codes import ResponseCode
from node.remoting.dispatch import Dispatch
from node.remoting.quiet_log import FailureLog, QuietLog
from node.request_budget import RequestBudget

log = logging.getLogger("ferrymq.remoting")

# A body this small is copied into one write with its head; larger ones go as they are.
COPY_BODY_BELOW = 64 << 10
# Requests of one connection in flight from which the answers a turn of the loop makes
# after its first are written together at the turn's end (the 4.x Java client keeps
# hundreds in flight; the SDK's batches, 16).
GATHER_ANSWERS_IN_FLIGHT = 32


class Cancellable(Protocol):
    def cancel(self) -> None: ...


@dataclass(frozen=True)
class TransportLimits:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    # Unsent answers: above high, stop reading this peer's requests; below low, read again.
    write_high_bytes: int = 4 << 20
    write_low_bytes: int = 1 << 20
    # Answers already made while reading was paused can still add up; past this, the
    # peer is not reading: closed.
    write_max_bytes: int = 64 << 20
    max_in_flight: int = 1024  # requests being handled at once on one connection
    max_pending: int = 1024  # the node's own requests to one client awaiting answers
    # Connections open at once, on the node and from one client address (a flood from
    # one address cannot take them all; clients behind one NAT address share its cap).
    max_connections: int = 10_000
    max_connections_per_address: int = 1_000
    # Closed: a connection that sent nothing, had no request in flight and no answer
    # leaving this long (RocketMQ's server default), and one without a whole frame this
    # long after it was accepted (a TLS handshake included).
    idle_timeout_s: float = 120.0
    first_frame_timeout_s: float = 10.0
    # Bytes of the requests being handled (bodies their code does not read dropped): past
    # the connection's, it is not read until it holds less than half; past the node's,
    # a request is answered SYSTEM_BUSY.
    max_request_bytes_per_connection: int = 64 << 20
    max_request_bytes: int = 512 << 20


MALFORMED_CODE = -1  # what a request whose header cannot be read is observed as
# (request code, response code or None for no answer, seconds to answer): once per request.
Observer = Callable[[int, int | None, float], None]


def _ignore(request_code: int, response_code: int | None, elapsed_s: float) -> None:
    return None


class RemotingConnection(asyncio.Protocol):
    def __init__(
        self,
        dispatch: Dispatch,
        limits: TransportLimits,
        failures: FailureLog,
        on_open: Callable[[RemotingConnection], bool],
        on_close: Callable[[RemotingConnection], None],
        observe: Observer | None = None,
        *,
        budget: RequestBudget | None = None,
        quiet: QuietLog | None = None,
        accepted_at: float = 0.0,
    ) -> None:
        """``on_open(connection)`` decides whether the listener takes it (False: closed at
        once); ``budget`` is the node's (``node/request_budget.py``); ``accepted_at``: the
        loop's time at accept (a TLS handshake comes between it and ``connection_made``)."""
        self.dispatch = dispatch
        self._observe = observe or _ignore
        self.limits = limits
        self._failures = failures
        self._on_open = on_open
        self._on_close = on_close
        self._budget = budget or RequestBudget(
            limits.max_request_bytes, limits.max_request_bytes_per_connection
        )
        self._quiet = quiet or QuietLog(log)
        self._splitter = FrameSplitter(limits.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[asyncio.Task, int] = {}  # request being handled -> bytes held
        self._answered_ahead: set[asyncio.Task] = set()  # answered before returning
        self._lane_waiting = 0  # requests the lane took and has not answered yet
        self._held: set[Cancellable] = set()  # what lanes left waiting (``hold``)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # Whether this turn of the loop gathers answers (its first left at once), and the
        # frames gathered, written together at the turn's end by ``_flush``.
        self._turn_open = False
        self._outgoing: list[bytes] = []
        self._outgoing_bytes = 0
        self._opaques = itertools.count(1)
        self._close_callbacks: list[Callable[[RemotingConnection], None]] = []
        self.closed = False
        self.peer_host = ""
        self.peer_port = 0
        # What handlers remember about this client (its client id, the groups it joined).
        self.attributes: dict[str, object] = {}
        # Its caller per method while it presents no credentials (``RemotingCallers``).
        self.anonymous_callers: dict[str, object] = {}
        # Reading stops while the peer does not read its answers or while its requests
        # hold more than their limit; it starts again when neither is so.
        self.reading_paused = False
        self._write_paused = False
        self._bytes_paused = False
        # For the listener's sweep (``sweep``): loop times, and what happened since the
        # last sweep, so that a request costs a flag, never a clock read.
        self.accepted_at = accepted_at
        self.active_at = 0.0
        self._heard = False  # bytes arrived since the last sweep
        self._framed = False  # a whole, readable frame arrived
        self._unsent = 0  # answer bytes not yet sent, at the last sweep

    @property
    def peer_address(self) -> str:
        return f"{self.peer_host}:{self.peer_port}"

    @property
    def in_flight(self) -> int:
        return len(self._tasks) + self._lane_waiting

    def hold(self, waiting: Cancellable) -> bool:
        """A lane left ``waiting`` for this connection's answer: it is cancelled if the
        connection ends first (``release`` once answered). False: the connection has
        ended already, and nothing is held."""
        if self.closed:
            return False
        self._held.add(waiting)
        return True

    def release(self, waiting: Cancellable) -> None:
        self._held.discard(waiting)

    def keeps_up(self) -> bool:
        """Whether the peer reads this connection's answers: it is open, not closing, and
        its unsent answers, those gathered for the turn's end included, are below
        ``write_high_bytes`` (where it stops reading requests). A lane's followed fetch
        answers again only then, so what it writes unasked stays bounded as what is
        asked is."""
        transport = self._transport
        if self.closed or self._write_paused or transport is None or transport.is_closing():
            return False
        unsent = transport.get_write_buffer_size() + self._outgoing_bytes
        return unsent < self.limits.write_high_bytes

    def answer_more(self, response: RemotingCommand) -> bool:
        """Write a lane's answer that is not its request's last (a followed FERRY_FETCH):
        the request stays in flight until the last comes through its ``answerer``."""
        return self._write_answer(self._encoded(response))

    def add_close_callback(self, callback: Callable[[RemotingConnection], None]) -> None:
        """``callback(connection)`` runs once when the connection ends."""
        self._close_callbacks.append(callback)

    # ---- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  (uvloop's is no subclass)
        self._loop = asyncio.get_running_loop()
        self.active_at = self._loop.time()
        self.accepted_at = self.accepted_at or self.active_at
        raw = transport.get_extra_info("socket")
        if raw is not None and raw.family in (socket.AF_INET, socket.AF_INET6):
            # Answers must not wait for the peer's delayed ACK (asyncio sets it; say so).
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer_host, self.peer_port = str(peer[0]), int(peer[1])
        transport.set_write_buffer_limits(  # type: ignore[attr-defined]
            high=self.limits.write_high_bytes, low=self.limits.write_low_bytes
        )
        if not self._on_open(self):  # the listener logs why
            self.abort()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._heard = True
        try:
            frames = self._splitter.feed(data)
        except FrameError as error:
            self._drop(error)
            return
        for frame in frames:
            self._frame(frame)
            if self.closed:
                return

    def eof_received(self) -> bool:
        if self._splitter.buffered:
            self._quiet.log(
                "unfinished",
                logging.INFO,
                "remoting peer %s closed with %d bytes of an unfinished frame",
                self.peer_address,
                self._splitter.buffered,
            )
        return False  # close the transport

    def pause_writing(self) -> None:
        # The peer does not read its answers: take no more requests until it does.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        paused = self._write_paused or self._bytes_paused
        transport = self._transport
        if paused == self.reading_paused or transport is None or self.closed:
            return
        self.reading_paused = paused
        if paused:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def connection_lost(self, error: Exception | None) -> None:
        self.closed = True
        for task in self._tasks:
            task.cancel()  # a long poll of a gone peer stops waiting
        held, self._held = self._held, set()
        for waiting in held:
            waiting.cancel()  # and so does a lane's
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError(f"remoting peer {self.peer_address} left"))
        self._pending.clear()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # one failed clean-up must not skip the others
                log.exception("remoting connection close callback failed")
        self._on_close(self)

    # ---- the listener's sweep ----------------------------------------------------------
    def sweep(self, now: float) -> None:
        """Close the connection if it had no whole frame within the first frame's
        deadline, or has been idle past the idle timeout (``now``: the loop's time)."""
        if self.closed:
            return
        limits = self.limits
        if not self._framed and now - self.accepted_at >= limits.first_frame_timeout_s:
            self._close_quietly(
                "first-frame",
                "no whole request in the %g s after it was accepted",
                limits.first_frame_timeout_s,
            )
            return
        transport = self._transport
        unsent = transport.get_write_buffer_size() if transport is not None else 0
        if self._heard or self._tasks or self._lane_waiting or unsent != self._unsent:
            self._heard = False
            self._unsent = unsent
            self.active_at = now
        elif now - self.active_at >= limits.idle_timeout_s:
            self._close_quietly(
                "idle",
                "idle for %.0f s (nothing received, no request in flight, no answer leaving)",
                now - self.active_at,
            )

    def excuse(self, now: float) -> None:
        """The loop did not run for a while (the process was stopped, or stalled): the
        silence was not the peer's, so its clocks start again."""
        self.active_at = now
        if not self._framed:
            self.accepted_at = now

    def _close_quietly(self, kind: str, why: str, *args: object) -> None:
        self._quiet.log(
            kind,
            logging.INFO,
            "closing remoting connection from %s: " + why,
            self.peer_address,
            *args,
        )
        self.abort()

    # ---- frames in -------------------------------------------------------------------
    def _frame(self, frame: bytes) -> None:
        try:
            command = decode(frame, self.limits.max_header_bytes)
        except FrameError as error:
            if error.opaque is None:
                self._drop(error)
            else:
                self._answer_malformed(frame, error)
            return
        self._framed = True
        if command.flag & FLAG_RESPONSE:
            waiter = self._pending.pop(command.opaque, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(command)
            return
        handler = self.dispatch.handler_for(command.code)
        if handler is None:
            self._observe(command.code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 0.0)
            self._answer(
                command,
                command.reply(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {command.code} not supported",
                ),
            )
            return
        in_flight = len(self._tasks) + self._lane_waiting
        if in_flight >= self.limits.max_in_flight:
            self._busy(
                command,
                f"{in_flight} requests of this connection are being handled, the "
                "limit: retry later",
            )
            return
        if self._taken_by_lane(command):
            return
        body = command.body
        if body and not self.dispatch.keeps_body(command.code):
            # No handler of this code reads it: not held while the request waits.
            command = dataclasses.replace(command, body=b"")
        size = len(frame) - len(body) + len(command.body)
        budget = self._budget
        if not budget.acquire(self, size):
            self._busy(
                command,
                f"the node's requests being handled hold {budget.total} bytes, {size} more "
                f"would pass its limit of {budget.max_bytes} ([messages] max_request_bytes): "
                "retry later",
            )
            return
        assert self._loop is not None
        task = self._loop.create_task(self._handle(handler, command))
        self._tasks[task] = size
        task.add_done_callback(self._release)  # a task cancelled before it ran included
        if not self._bytes_paused and budget.over(self):
            self._bytes_paused = True  # read again once it holds less than half
            self._update_reading()

    def _taken_by_lane(self, command: RemotingCommand) -> bool:
        """Whether the dispatch's lane took ``command`` (it answers through ``answerer``,
        at once or from a callback, observed as ``_handle`` observes an answer); False:
        the handler takes it. Not offered while requests of this connection are tasks:
        its requests keep their order. What the lane raises is answered as a handler's
        failure."""
        lane = self.dispatch.lanes.get(command.code)
        if lane is None or self._tasks:
            return False
        started = time.perf_counter()
        self._lane_waiting += 1

        def answerer(request: RemotingCommand, response: RemotingCommand) -> Callable[[], None]:
            frame = None if request.flag & FLAG_ONEWAY else self._encoded(response)

            def write() -> None:  # once per request: the lane runs one of its answers
                if frame is not None:
                    self._write_answer(frame)
                self._lane_waiting -= 1
                self._observe(request.code, response.code, time.perf_counter() - started)

            return write

        try:
            taken = lane.take(command, self, answerer)
        except Exception as error:
            self._lane_waiting -= 1
            self._observe(command.code, ResponseCode.SYSTEM_ERROR, time.perf_counter() - started)
            self._answer(command, self.failure_answer(command, error))
            return True
        if not taken:
            self._lane_waiting -= 1
        return taken

    def failure_answer(self, request: RemotingCommand, error: Exception) -> RemotingCommand:
        """What a handler or a lane that raised ``error`` answers: SYSTEM_ERROR naming it;
        the failure is logged (``FailureLog``: the first of its kind whole)."""
        self._failures.report(request.code, error)
        return request.reply(ResponseCode.SYSTEM_ERROR, f"{type(error).__name__}: {error}"[:1024])

    def _release(self, task: asyncio.Task | None) -> None:
        """The request of ``task`` holds nothing any more (once, whichever comes first:
        its answer or the task's end)."""
        size = self._tasks.pop(task, None)  # type: ignore[arg-type]
        if size is None:
            return
        self._budget.release(self, size)
        if self._bytes_paused and self._budget.relieved(self):
            self._bytes_paused = False
            self._update_reading()

    def _busy(self, command: RemotingCommand, remark: str) -> None:
        self._observe(command.code, ResponseCode.SYSTEM_BUSY, 0.0)
        self._answer(command, command.reply(ResponseCode.SYSTEM_BUSY, remark))

    async def _handle(self, handler, command: RemotingCommand) -> None:
        started = time.perf_counter()
        task = asyncio.current_task()
        try:
            try:
                response = await handler(command, self)
            except HeaderFieldError as error:
                response = command.reply(ResponseCode.SYSTEM_ERROR, str(error))
            except Exception as error:
                response = self.failure_answer(command, error)
            # Released before the answer leaves: a client that has its answer may send the
            # next request at once, and must find the bytes free.
            self._release(task)
            if task in self._answered_ahead:
                return  # its answer left already (``answer_ahead``)
            self._observe(
                command.code,
                None if response is None else response.code,
                time.perf_counter() - started,
            )
            if response is not None:
                self._answer(command, response)
        finally:
            self._answered_ahead.discard(task)  # type: ignore[arg-type]

    def answer_ahead(
        self, request: RemotingCommand
    ) -> Callable[[RemotingCommand], Callable[[], None]]:
        """For the handler of ``request``, called in its task: a way to answer before the
        handler returns, from a callback -- a SYNC send's, the moment the in-sync replicas
        hold it (``ReplicationMaster.wait_replicated``), where the task would take a turn
        of the loop and its callers' returns first. ``answer_ahead(request)(response)``
        encodes the answer now, while the replicas work, and returns what writes it. It
        leaves as ``_handle`` sends an answer (the request's bytes released first,
        observed once); what the handler returns or raises after it is not sent. Writing
        it a second time does nothing."""
        task = asyncio.current_task()
        assert task is not None and task in self._tasks, "answer_ahead outside a request"
        started = time.perf_counter()

        def encoded(response: RemotingCommand) -> Callable[[], None]:
            frame = None if request.flag & FLAG_ONEWAY else self._encoded(response)

            def answer() -> None:
                if task in self._answered_ahead or task.done():
                    return
                self._answered_ahead.add(task)
                self._release(task)
                self._observe(request.code, response.code, time.perf_counter() - started)
                if frame is not None:
                    self._write_answer(frame)

            return answer

        return encoded

    def answered_ahead(self) -> bool:
        """For a handler, in its task: whether its answer left already (``answer_ahead``),
        so what it would return need not be built."""
        return asyncio.current_task() in self._answered_ahead

    def _answer_malformed(self, frame: bytes, error: FrameError) -> None:
        """A frame whose opaque is known but whose header is not: answered unless it says
        it is oneway (a binary header's flag sits at bytes 13..16 of the frame's header)."""
        self._observe(MALFORMED_CODE, ResponseCode.SYSTEM_ERROR, 0.0)
        oneway = False
        if frame[:1] == b"\x01" and len(frame) >= 17:
            oneway = bool(int.from_bytes(frame[13:17], "big", signed=True) & FLAG_ONEWAY)
        if not oneway:
            assert error.opaque is not None
            self.send(
                RemotingCommand(
                    ResponseCode.SYSTEM_ERROR,
                    error.opaque,
                    FLAG_RESPONSE,
                    f"malformed request: {error}",
                )
            )

    def _answer(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if not request.flag & FLAG_ONEWAY:
            self.send(response)

    def _drop(self, error: FrameError) -> None:
        self._quiet.log(
            "frame",
            logging.WARNING,
            "closing remoting connection from %s: %s",
            self.peer_address,
            error,
        )
        self.abort()

    # ---- frames out ------------------------------------------------------------------
    def send(self, command: RemotingCommand) -> bool:
        """Write one frame, at once or with the turn's gathered answers (``_flush``);
        False when the connection is gone (or just closed because its peer does not
        read)."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return False
        return self._write_answer(self._encoded(command))

    def _encoded(self, command: RemotingCommand) -> list[bytes]:
        """``command``'s frame as the parts of one write (the body apart when large)."""
        try:
            head = encode_head(command)
        except ValueError as error:
            # A response that does not fit its header form: say so in JSON instead.
            log.error("remoting response to %s not encodable: %s", self.peer_address, error)
            head = encode_head(
                RemotingCommand(
                    ResponseCode.SYSTEM_ERROR,
                    command.opaque,
                    command.flag,
                    f"response not encodable: {error}",
                    serialize_type=SERIALIZE_JSON,
                )
            )
            command = RemotingCommand(ResponseCode.SYSTEM_ERROR)
        body = command.body
        return [head + body] if len(body) < COPY_BODY_BELOW else [head, body]

    def _write_answer(self, frame: list[bytes]) -> bool:
        """``send``'s write of an encoded frame."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return False
        if not self._turn_open:
            # The turn's first answer leaves at once, so its peer can start on it. With
            # many requests in flight, the ones after it in the same turn leave together
            # at the turn's end; with few, each leaves at once (a closed-loop client with
            # a few requests in flight waits on each).
            if len(self._tasks) + self._lane_waiting >= GATHER_ANSWERS_IN_FLIGHT:
                self._turn_open = True
                assert self._loop is not None
                self._loop.call_soon(self._flush)
            for part in frame:
                transport.write(part)
        else:
            self._outgoing.extend(frame)
            self._outgoing_bytes += sum(map(len, frame))
        if transport.get_write_buffer_size() + self._outgoing_bytes > self.limits.write_max_bytes:
            self._quiet.log(
                "unread",
                logging.WARNING,
                "closing remoting connection from %s: %d bytes of answers unread",
                self.peer_address,
                transport.get_write_buffer_size() + self._outgoing_bytes,
            )
            self.abort()
            return False
        return True

    def _flush(self) -> None:
        """Write what this turn of the loop answered after its first answer, in one call:
        the answers that one replication acknowledgement releases leave in two system
        calls, not one each."""
        self._turn_open = False
        outgoing, self._outgoing = self._outgoing, []
        self._outgoing_bytes = 0
        transport = self._transport
        if not outgoing or self.closed or transport is None or transport.is_closing():
            return
        if len(outgoing) == 1:
            transport.write(outgoing[0])
        else:
            transport.writelines(outgoing)

    async def request(self, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send the node's own request to this client and wait for its answer.
        ``TimeoutError`` after ``timeout_s``; ``ConnectionError`` if the peer is gone or
        leaves meanwhile, or too many requests to it await answers."""
        if self.closed:
            raise ConnectionError(f"remoting peer {self.peer_address} is gone")
        if len(self._pending) >= self.limits.max_pending:
            raise ConnectionError(
                f"{len(self._pending)} requests to {self.peer_address} await answers"
            )
        assert self._loop is not None
        opaque = self._next_opaque()
        waiter: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = waiter
        try:
            if not self.send(_with(command, opaque, command.flag & ~(FLAG_RESPONSE | FLAG_ONEWAY))):
                raise ConnectionError(f"remoting peer {self.peer_address} is gone")
            return await asyncio.wait_for(waiter, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    def send_oneway(self, command: RemotingCommand) -> bool:
        """Send the node's own request to this client, expecting no answer."""
        return self.send(_with(command, self._next_opaque(), FLAG_ONEWAY))

    def _next_opaque(self) -> int:
        opaque = next(self._opaques)
        if opaque > INT32_MAX:
            self._opaques = itertools.count(2)
            opaque = 1
        return opaque

    def close(self) -> None:
        """Close once what was answered is written (the transport sends what it holds)."""
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self.closed = True
        self._outgoing = []
        self._outgoing_bytes = 0
        if self._transport is not None:
            self._transport.abort()


def _with(command: RemotingCommand, opaque: int, flag: int) -> RemotingCommand:
    return RemotingCommand(
        command.code,
        opaque,
        flag,
        command.remark,
        command.ext_fields,
        command.body,
        command.language,
        command.version,
        command.serialize_type,
    )
