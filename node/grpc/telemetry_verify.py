"""A stored message consumed directly by a RocketMQ 5 consumer over its Telemetry stream
(``node/services/direct_consume.py``): the node writes ``verify_message_command`` {nonce,
message} on the stream, the client runs its listener and writes back a
``verify_message_result`` {nonce} with a status: OK (its listener answered SUCCESS),
FAILED_TO_CONSUME_MESSAGE (FAILURE, or it threw), NOT_IMPLEMENTED (a client without a
listener, or one that does not do this).

Which official clients answer (read from their sources): the Java, C# and C++
PushConsumers run their listener; every other Java and C# client and the Go client answer
NOT_IMPLEMENTED; the Node.js client answers NOT_IMPLEMENTED with the nonce in a
``verify_message_command`` (read here too); the Python client ignores the command, so the
node's wait times out. A stream whose settings are a simple consumer's is registered as
unable and never asked.

One ``StreamVerifications`` per stream (at most ``PENDING_MAX`` of its commands wait), its
nonces in the node's ``PendingVerifications``, whose futures any stream's reader resolves:
the Go client writes its answer on a new stream of its own.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import secrets

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.grpc.telemetry_outbox import TelemetryOutbox
from node.grpc.wire import to_wire_message
from node.services.caller import Caller
from node.services.direct_consume import ClientAnswer, DirectConsumer, Outcome

PROTOCOL = "grpc"
PENDING_MAX = 16  # per stream
NODE_PENDING_MAX = 1024
LISTENING_CLIENTS = (pb.PUSH_CONSUMER, pb.LITE_PUSH_CONSUMER)
OUTCOMES = {
    pb.OK: Outcome.CONSUMED,
    pb.FAILED_TO_CONSUME_MESSAGE: Outcome.FAILED,
    pb.NOT_IMPLEMENTED: Outcome.NOT_SUPPORTED,
}


def verify_command(nonce: str, stored: StoredMessage) -> rpc.TelemetryCommand:
    return rpc.TelemetryCommand(
        verify_message_command=rpc.VerifyMessageCommand(
            nonce=nonce, message=to_wire_message(stored)
        )
    )


def answer_of(status: pb.Status) -> ClientAnswer:
    name = pb.Code.Name(status.code) if status.code in pb.Code.values() else str(status.code)
    return ClientAnswer(OUTCOMES.get(status.code, Outcome.FAILED), name, status.message)


class PendingVerifications:
    """Every verification on this node waiting for its answer, by nonce. A client may
    answer on another of its Telemetry streams than the one that carried the command (the
    Go client writes its answer through a session per address, a new stream), so the answer
    is taken from any stream here; a nonce is 128 random bits, which only the client that
    got the command knows. At most ``NODE_PENDING_MAX`` wait.

    Thread-safety: owned by the node's event loop."""

    def __init__(self) -> None:
        self._waiters: dict[str, asyncio.Future[pb.Status | None]] = {}  # None: closed

    def open(self) -> tuple[str, asyncio.Future[pb.Status | None]] | None:
        """A new nonce and the future its answer resolves; None when too many wait."""
        if len(self._waiters) >= NODE_PENDING_MAX:
            return None
        nonce = secrets.token_hex(16)
        self._waiters[nonce] = asyncio.get_running_loop().create_future()
        return nonce, self._waiters[nonce]

    def forget(self, nonce: str) -> None:
        self._waiters.pop(nonce, None)

    def end(self, nonce: str, status: pb.Status | None) -> None:
        waiter = self._waiters.get(nonce)
        if waiter is not None and not waiter.done():
            waiter.set_result(status)

    def answered(self, command: rpc.TelemetryCommand) -> bool:
        """Take a client's answer to a verification (False: ``command`` is none)."""
        which = command.WhichOneof("command")
        if which == "verify_message_result":
            nonce = command.verify_message_result.nonce
        elif which == "verify_message_command":  # the Node.js client's answer
            nonce = command.verify_message_command.nonce
        else:
            return False
        self.end(nonce, command.status)
        return True


class StreamVerifications:
    """The verifications one Telemetry stream carried, waiting for their answers."""

    def __init__(self, outbox: TelemetryOutbox, pending: PendingVerifications) -> None:
        self.outbox = outbox
        self.pending = pending
        self._nonces: set[str] = set()

    def consumer(self, client_type: int, caller: Caller) -> DirectConsumer:
        """What the stream's client can do, by the client type its settings state."""
        if client_type in LISTENING_CLIENTS:
            return DirectConsumer(PROTOCOL, self.deliver, streamed=True, caller=caller)
        kind = pb.ClientType.Name(client_type) if client_type in pb.ClientType.values() else ""
        unable = f"a {kind or client_type} client has no listener to run"
        return DirectConsumer(PROTOCOL, None, unable, streamed=True, caller=caller)

    async def deliver(self, stored: StoredMessage, group: str, timeout_s: float) -> ClientAnswer:
        opened = self.pending.open() if len(self._nonces) < PENDING_MAX else None
        if opened is None:
            return ClientAnswer(Outcome.TIMED_OUT, "", "too many verifications already wait")
        nonce, waiter = opened
        self._nonces.add(nonce)
        try:
            if not self.outbox.offer(verify_command(nonce, stored)):
                return ClientAnswer(Outcome.TIMED_OUT, "", "its Telemetry stream is full or gone")
            status = await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            return ClientAnswer(Outcome.TIMED_OUT, "", f"no answer in {timeout_s:g} s")
        finally:
            self._nonces.discard(nonce)
            self.pending.forget(nonce)
        if status is None:
            return ClientAnswer(Outcome.TIMED_OUT, "", "its Telemetry stream closed")
        return answer_of(status)

    def answered(self, command: rpc.TelemetryCommand) -> bool:
        """A client's answer read on this stream (it may be to another stream's command)."""
        return self.pending.answered(command)

    def close(self) -> None:
        """The stream ended: the waits for its commands end now."""
        for nonce in list(self._nonces):
            self.pending.end(nonce, None)
