"""The produce lane: the SDK's common FERRY_PRODUCE taken in the connection's callback,
with no task (stage 3 of docs/native-lane.md, in Python: the specification the native
lane will follow).

A FERRY_PRODUCE handled as a task went through the door's layers before its records
reached the log (the caller's adapter, the handler, the send service, the replicated
store, the append combiner), and its task ran again after its answer; under single sends
that was ~85 µs of the master's Python before the first DATA frame left, and ~300 µs of
its CPU per send. The lane appends the request's records as the frame is read and makes
its answer before the slaves acknowledge; the confirming ACK's callback writes it.

It decides nothing itself: ``take`` reads the request as ``FerryDataHandlers.produce``
does, and ``SendService.produce_now`` applies the send service's own rules. For anything
that is not the common case (credentials that do not verify, a request forwarded by
another node or to be forwarded, a body that does not read, any rule that would refuse a
record, a topic this node has not heard of, a FIFO topic, a flush to wait for, puts of
this turn before it) it declines before anything is written, and the request goes
through the handler, which gives the precise answer. The connection declines for it
while requests of the same connection are being handled as tasks, so a connection's
requests are appended in the order they arrived.

Thread-safety: the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode
from node.message_rules import born_host_bytes
from node.remoting.authentication import RemotingCallers, method_of
from node.remoting.ferry_data import produce_answer, produce_run, read_produce
from node.services.send import MAX_PRODUCE_RECORDS, ProduceOutcome, SendService

# (request, its answer) -> what writes the answer, encoded now: the connection's.
Answerer = Callable[[RemotingCommand, RemotingCommand], Callable[[], None]]


class ProduceLane:
    code = FerryRequestCode.FERRY_PRODUCE

    def __init__(self, send: SendService, callers: RemotingCallers) -> None:
        self._send = send
        self._callers = callers
        self._method = method_of(FerryRequestCode.FERRY_PRODUCE)

    def take(self, request: RemotingCommand, connection, answerer: Answerer) -> bool:
        """Whether the lane took ``request`` (appended, answered or to be answered through
        ``answerer``); False: nothing was written, the handler takes it."""
        taken = self._take(request, connection, answerer)
        self._send.metrics.produce_lane(taken)
        return taken

    def _take(self, request: RemotingCommand, connection, answerer: Answerer) -> bool:
        if not self._send.takes_now():
            return False  # the requests after a turn's first: combined, read once
        caller = self._callers.lane_caller(request, connection, self._method)
        if caller is None:
            return False

        def answer(outcome: ProduceOutcome) -> Callable[[], None]:
            return answerer(request, produce_answer(request, outcome))

        send = self._send
        topics = send.lane_topics()
        if topics:  # a topic this lane took before: read in one C pass
            run = produce_run(
                request.body,
                born_host_bytes(caller.address),
                topics,
                send.admission.body_limit,
                MAX_PRODUCE_RECORDS,
            )
            if run is not None:
                return send.produce_run_now(run, answer)
        try:
            sent = read_produce(request, caller)
        except (ValueError, DecodeError):
            return False
        return send.produce_now(caller, sent, answer)
