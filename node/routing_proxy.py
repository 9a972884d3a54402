"""The node's routing, kept by its routing host (``node/routing_host.py``, a process of its
own): the reads and writes of a ``RoutingReplica`` (``routing/replica.py``), so the rest of
the node does not know where the replica runs.

Reads are local: the host streams every command its replica applies (and every snapshot
that replaced its state), and the proxy applies them to a copy, in Raft order, as any
replica does; the routing state machine is deterministic. Writes (``submit``,
``catch_up``) go to the host and come back as an ``Outcome``, after the ``Applied`` that
put them in the copy: what a caller submitted it can read at once.

The proxy's side of the channel runs on the node's liveness loop (``node/liveness.py``):
it reads what the host sends, and every ``SAMPLE_INTERVAL_S`` sends the node's heartbeat
figures, which are also the host's proof that this process runs. The lease's renewals are
in ``lease`` (``node/lease_cell.py``), memory the host writes.

Thread-safety: ``read``, ``state``, ``submit`` and ``catch_up`` may be called from any
thread or event loop; ``on_applied`` and ``on_restored`` run on the liveness loop's
thread; ``start`` runs on the thread that lives as long as the node (the host is told to
die with it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from node.heartbeat import HeartbeatTimes
from node.lease_cell import LeaseCell
from node.liveness import LivenessLoop
from node.routing_channel import (
    Applied,
    CatchUpRequest,
    Failed,
    HandLeadership,
    Outcome,
    RenewNow,
    Restored,
    Sample,
    Setup,
    Start,
    Status,
    Submit,
    frame,
    read_message,
)
from routing.commands import CommandResult, NodeHeartbeat
from routing.replica import CommandTooLarge, RaftStatus, RoutingUnavailable
from routing.state import RoutingState

log = logging.getLogger("ferrymq.routing_proxy")
T = TypeVar("T")
SAMPLE_INTERVAL_S = 0.1
# The host answers every request within its timeout; past it (and this margin) the host is
# taken for stuck and the outcome for unknown.
ANSWER_MARGIN_S = 2.0
START_MARGIN_S = 10.0  # a new interpreter importing pysyncobj, on a loaded host
STOP_TIMEOUT_S = 5.0


class RoutingProxy:
    def __init__(
        self,
        setup: Setup,
        liveness: LivenessLoop,
        *,
        sample: Callable[[], NodeHeartbeat],
        on_applied: Callable[[object, CommandResult], None],
        on_restored: Callable[[], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.setup = setup
        self.self_address = setup.self_address
        self.voters = list(setup.voters)
        self.liveness = liveness
        self.sample = sample  # the node's heartbeat as of now (liveness loop)
        self.on_applied = on_applied
        self.on_restored = on_restored
        # When routing last committed a heartbeat of this node, written by the host.
        self.lease = LeaseCell(renewed_at=time.monotonic())
        self.on_lost = on_lost  # (why): the host ended unasked; the node must stop
        self.heartbeat_times = HeartbeatTimes()  # the host's, refreshed with each Status
        self._lock = threading.Lock()
        self._state = RoutingState()
        self._status: Status | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._ids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._unsent: list[bytes] = []  # written before the channel was open
        self._closing = False
        self._ended: str | None = None  # why the host is gone
        self.process: subprocess.Popen | None = None

    # ---- lifetime ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the host and join routing through it (``wait_ready`` says when)."""
        ours, theirs = socket.socketpair()
        # The host imports this node's own modules, wherever the node was started from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "node.routing_host",
                str(theirs.fileno()),
                str(os.getpid()),
                str(self.lease.fd),
            ],
            pass_fds=(theirs.fileno(), self.lease.fd),
            env={**os.environ, "PYTHONPATH": path},
            # A session of its own is a scheduling group of its own (Linux autogroups):
            # sharing the node's, the host waited behind the node's busy threads for
            # each of its wakeups, and a Raft round trip takes several.
            start_new_session=True,
        )
        theirs.close()
        self.liveness.start(lambda: self._serve(ours))

    def start_liveness(self) -> None:
        """Begin heartbeats and the controller: the node serves."""
        self._send(Start())

    def close(self) -> None:
        """Stop the host (it leaves Raft in order) and wait for it; blocks the caller."""
        self._closing = True
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # ---- reads -------------------------------------------------------------------------
    def read(self, reader: Callable[[RoutingState], T]) -> T:
        """Run ``reader`` on the local copy under the lock (keep it short)."""
        with self._lock:
            return reader(self._state)

    @property
    def state(self) -> RoutingState:
        """The local copy, for single-record reads (records are replaced, never changed)."""
        return self._state

    def is_leader(self) -> bool:
        status = self._status
        return status is not None and status.is_leader

    def leads_with_quorum(self) -> bool:
        status = self._status
        return status is not None and status.leads_with_quorum

    def status(self) -> RaftStatus:
        status = self._status
        if status is not None:
            return status.raft
        return RaftStatus(
            self.self_address or "", self.self_address is not None, "", 0, 0, 0, False, ()
        )

    async def wait_ready(self, timeout_s: float) -> None:
        """Until the host's replica caught up with a leader; ``RoutingUnavailable`` with
        the host's reason when it could not (it waits ``Setup.join_timeout_s``)."""
        try:
            await asyncio.wait_for(asyncio.wrap_future(self._ready), timeout_s + START_MARGIN_S)
        except TimeoutError:
            raise RoutingUnavailable(
                f"the routing host did not join routing within {timeout_s:.0f} s"
            ) from None

    # ---- writes ------------------------------------------------------------------------
    async def submit(self, command: object, timeout_s: float = 5.0) -> CommandResult:
        """As ``RoutingReplica.submit``: the result, once the copy here holds it."""
        return await self._request(lambda rid: Submit(rid, command, timeout_s), timeout_s)

    async def catch_up(self, timeout_s: float = 1.0) -> None:
        """As ``RoutingReplica.catch_up``: everything routing committed before the call
        is in the copy here when it returns."""
        await self._request(lambda rid: CatchUpRequest(rid, timeout_s), timeout_s)

    def renew_now(self) -> None:
        """Heartbeat without waiting for the interval; callable from any thread."""
        self.liveness.call_soon(self._renew_now)

    def hand_leadership_to(self, voter: str) -> None:
        if voter == self.self_address or voter not in self.voters:
            raise ValueError(f"{voter} is not another voter of {self.voters}")
        self._send(HandLeadership(voter))

    async def _request(self, message: Callable[[int], object], timeout_s: float):
        if self._ended is not None:
            raise RoutingUnavailable(f"{self._ended}: nothing was changed")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Outcome] = loop.create_future()
        request_id = next(self._ids)
        self._pending[request_id] = (loop, answer)
        try:
            self._send(message(request_id))
            outcome = await asyncio.wait_for(answer, timeout_s + ANSWER_MARGIN_S)
        except TimeoutError:
            raise RoutingUnavailable(
                f"the routing host did not answer within {timeout_s + ANSWER_MARGIN_S:.1f} s; "
                "the change may still be applied",
                outcome_unknown=True,
            ) from None
        finally:
            self._pending.pop(request_id, None)
        if outcome.error == "too_large":
            raise CommandTooLarge(outcome.detail)
        if outcome.error:
            raise RoutingUnavailable(outcome.detail, outcome_unknown=outcome.error == "unknown")
        return outcome.result

    # ---- the channel (liveness loop) ---------------------------------------------------
    def _send(self, message: object) -> None:
        """From any thread: pickled here, written on the liveness loop in call order."""
        data = frame(message)
        self.liveness.call_soon(lambda: self._write(data))

    def _write(self, data: bytes) -> None:
        if self._writer is None:
            self._unsent.append(data)
        else:
            self._writer.write(data)

    def _renew_now(self) -> None:
        self._write(frame(Sample(self.sample(), time.monotonic())))
        self._write(frame(RenewNow()))

    async def _serve(self, sock: socket.socket) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        writer.write(frame(self.setup))
        for data in self._unsent:
            writer.write(data)
        self._unsent.clear()
        self._writer = writer
        sampling = asyncio.ensure_future(self._sample_forever())
        try:
            while True:
                self._receive(await read_message(reader))
        except (asyncio.IncompleteReadError, ConnectionError):
            self._host_ended("the routing host ended")
        finally:
            sampling.cancel()
            writer.close()

    async def _sample_forever(self) -> None:
        while True:
            self._write(frame(Sample(self.sample(), time.monotonic())))
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def _receive(self, message: object) -> None:
        if isinstance(message, Applied):
            with self._lock:
                self._state.apply(message.command)
            self._listen(self.on_applied, message.command, message.result)
        elif isinstance(message, Restored):
            with self._lock:
                self._state = pickle.loads(message.state)
            self._listen(self.on_restored)
        elif isinstance(message, Outcome):
            loop, answer = self._pending.get(message.request_id, (None, None))
            if loop is not None:
                loop.call_soon_threadsafe(_resolve, answer, message)
        elif isinstance(message, Status):
            self._status = message
            self.heartbeat_times.__dict__.update(message.heartbeat_times.__dict__)
            if message.ready and not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(message, Failed):
            if not self._ready.done():
                self._ready.set_exception(RoutingUnavailable(message.detail))
        else:
            log.error("unexpected message on the routing channel: %r", message)

    def _listen(self, listener: Callable, *args) -> None:
        try:
            listener(*args)
        except Exception:  # a listener's bug must not stop the channel
            log.exception("routing listener failed")

    def _host_ended(self, why: str) -> None:
        self._ended = why
        if not self._ready.done():
            self._ready.set_exception(RoutingUnavailable(why))
        for loop, answer in list(self._pending.values()):
            lost = Outcome(0, error="unknown", detail=f"{why} before answering")
            loop.call_soon_threadsafe(_resolve, answer, lost)
        if not self._closing:
            log.error("%s: this node stops", why)
            self.on_lost(why)


def _resolve(answer: asyncio.Future, outcome: Outcome) -> None:
    if not answer.done():
        answer.set_result(outcome)
