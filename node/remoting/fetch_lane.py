"""The fetch lane: the SDK's common FERRY_FETCH taken in the connection's callback, with
no task (docs/native-lane.md, "Stage 3 from here", step 3: the fetch's handling and
parking, in Python first, as the produce lane was; the specification its native code
will follow).

A FERRY_FETCH handled as a task paid for the task and for its coroutines each time it
ran: its first look, its wait on the queue's waiters, its wake-up after the tail read
had answered it, its return. A tailing reader sends one per message, and the master's
CPU a message bounds the end to end (docs/native-lane.md, "The end to end split between
the nodes and the SDK"). The lane reads the request as ``FerryDataHandlers.fetch`` does
and hands it to ``ReadService.fetch_now``, which applies the read service's own rules and
waits in callbacks (``WaitingFetch``).

It decides nothing itself. It declines, before anything is read from the store,
credentials that do not verify, a request forwarded by another node or to be forwarded,
a body that does not read, a read with tags, and whatever ``fetch_now`` declines (a
refusal, a topic to catch up with, an offset reset to tell); the request then goes
through the handler, which gives the precise answer. A read it left waiting is cancelled
when its connection ends (``RemotingConnection.hold``).

A fetch that asks to ``follow`` (up to ``FETCH_FOLLOW_MAX`` more answers with records) is
not asked again by a tailing reader once a message: after an answer with records, the
lane reads on from its ``next_offset`` as a fetch with that offset would, the read
service's rules applied again (``ReadService.fetch_read_now``), and says so in the answer
(``follows``). It answers a last time, without ``follows``, once its answers are spent,
once a read finds nothing in its wait, and whenever the connection's peer does not read
its answers (``RemotingConnection.keeps_up``): what is written to a connection stays
bounded by one answer a request, as without ``follow``. The answer is written before
the next read's rules run, so they are not on the reader's path; when that read is not
the common case, a last answer with nothing (MESSAGE_NOT_FOUND at the same offset)
follows, and the reader's next fetch is answered precisely by the handler. A next read
with records already there (a backlog) starts in the loop's next turn: one answer a turn,
as when the reader asked for each.

Thread-safety: the node's event loop.
"""

from __future__ import annotations

import asyncio

from google.protobuf.message import DecodeError

from ferrymq.codec.remoting import FLAG_ONEWAY, RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from node.long_polling import poll_budget_s
from node.remoting.authentication import RemotingCallers, method_of
from node.remoting.ferry_data import fetch_reply
from node.remoting.produce_lane import Answerer
from node.services.caller import Caller
from node.services.reads import (
    FETCH_FOLLOW_MAX,
    FetchOutcome,
    ReadRequest,
    ReadService,
    WaitingFetch,
    fetch_outcome,
)


class FetchLane:
    code = FerryRequestCode.FERRY_FETCH

    def __init__(self, reads: ReadService, callers: RemotingCallers) -> None:
        self._reads = reads
        self._callers = callers
        self._method = method_of(FerryRequestCode.FERRY_FETCH)

    def take(self, request: RemotingCommand, connection, answerer: Answerer) -> bool:
        """Whether the lane took ``request`` (answered, or to be answered through
        ``answerer``); False: nothing was read, the handler takes it."""
        taken = self._take(request, connection, answerer)
        self._reads.metrics.fetch_lane(taken)
        return taken

    def _take(self, request: RemotingCommand, connection, answerer: Answerer) -> bool:
        caller = self._callers.lane_caller(request, connection, self._method)
        if caller is None:
            return False
        try:
            fetch = api.FetchRequest.FromString(request.body)
        except DecodeError:
            return False
        if fetch.tags or not 0 <= fetch.follow <= FETCH_FOLLOW_MAX:
            return False
        follows = 0 if request.flag & FLAG_ONEWAY else fetch.follow
        ends = _LaneFetchEnds(request, connection, answerer, self._reads, caller, fetch, follows)
        return self._reads.fetch_now(
            caller,
            fetch.topic,
            fetch.group,
            fetch.queue_id,
            fetch.offset,
            fetch.max_messages,
            fetch.max_bytes,
            ends.wait_s,
            ends,
        )


class _LaneFetchEnds:
    """``FetchEnds`` of one FERRY_FETCH the lane took: its answers through the
    connection's ``answerer``, its wait held by the connection; while it has ``follows``
    left, an answer with records is followed by the next read."""

    __slots__ = (
        "_answerer",
        "_caller",
        "_connection",
        "_fetch",
        "_follows",
        "_reads",
        "_request",
        "wait_s",
    )

    def __init__(
        self,
        request: RemotingCommand,
        connection,
        answerer: Answerer,
        reads: ReadService,
        caller: Caller,
        fetch: api.FetchRequest,
        follows: int,
    ) -> None:
        self._request = request
        self._connection = connection
        self._answerer = answerer
        self._reads = reads
        self._caller = caller
        self._fetch = fetch
        self._follows = follows
        self.wait_s = poll_budget_s(fetch.wait_ms / 1000, None)

    def answer(self, outcome: FetchOutcome) -> ReadRequest | None:
        if not (self._follows and outcome.records and self._connection.keeps_up()):
            self._answerer(self._request, fetch_reply(self._request, outcome))()
            return None
        # Written before the next read's rules run: they are on the reader's path if not.
        self._follows -= 1
        self._connection.answer_more(fetch_reply(self._request, outcome, follows=True))
        following = self._next_read(outcome)
        if following is None:  # not the common case: the reader asks again, and hears why
            self._answerer(self._request, fetch_reply(self._request, _nothing_after(outcome)))()
        elif outcome.next_offset < outcome.max_offset:
            # More is there: one answer a turn of the loop, as fetches asked one at a
            # time were, not a backlog's answers in one callback.
            asyncio.get_running_loop().call_soon(self._start, following)
        else:  # at the queue's end: the waiting fetch waits on as the next read
            return following
        return None

    def _start(self, following: ReadRequest) -> None:
        try:
            self._reads.start_fetch(following, self)
        except Exception as error:  # the next read's first look: its last answer says it
            self.fail(error)

    def _next_read(self, outcome: FetchOutcome) -> ReadRequest | None:
        """The read after ``outcome``'s, as the read service takes a fetch from its
        ``next_offset`` now (None: not the common case)."""
        fetch = self._fetch
        return self._reads.fetch_read_now(
            self._caller,
            fetch.topic,
            fetch.group,
            fetch.queue_id,
            outcome.next_offset,
            fetch.max_messages,
            fetch.max_bytes,
            self.wait_s,
        )

    def fail(self, error: Exception) -> None:
        self._answerer(self._request, self._connection.failure_answer(self._request, error))()

    def hold(self, read: WaitingFetch) -> bool:
        return self._connection.hold(read)

    def release(self, read: WaitingFetch) -> None:
        self._connection.release(read)


def _nothing_after(outcome: FetchOutcome) -> FetchOutcome:
    """A followed fetch's last answer when its next read is not taken: nothing from
    ``outcome``'s ``next_offset``, with the bounds of ``outcome``'s look."""
    return fetch_outcome(
        pb.MESSAGE_NOT_FOUND,
        next_offset=outcome.next_offset,
        min_offset=outcome.min_offset,
        max_offset=outcome.max_offset,
    )
