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

One ``StreamVerifications`` per stream: its pending nonces, each a future the stream's
reader resolves; at most ``PENDING_MAX`` wait on one stream.

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
PENDING_MAX = 16
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


class StreamVerifications:
    """The verifications waiting for answers on one Telemetry stream."""

    def __init__(self, outbox: TelemetryOutbox) -> None:
        self.outbox = outbox
        self._pending: dict[str, asyncio.Future[pb.Status | None]] = {}  # None: closed

    def consumer(self, client_type: int, caller: Caller) -> DirectConsumer:
        """What the stream's client can do, by the client type its settings state."""
        if client_type in LISTENING_CLIENTS:
            return DirectConsumer(PROTOCOL, self.deliver, streamed=True, caller=caller)
        kind = pb.ClientType.Name(client_type) if client_type in pb.ClientType.values() else ""
        unable = f"a {kind or client_type} client has no listener to run"
        return DirectConsumer(PROTOCOL, None, unable, streamed=True, caller=caller)

    async def deliver(self, stored: StoredMessage, group: str, timeout_s: float) -> ClientAnswer:
        if len(self._pending) >= PENDING_MAX:
            return ClientAnswer(
                Outcome.TIMED_OUT, "", f"{PENDING_MAX} verifications already wait on its stream"
            )
        nonce = secrets.token_hex(16)
        waiter = asyncio.get_running_loop().create_future()
        self._pending[nonce] = waiter
        try:
            if not self.outbox.offer(verify_command(nonce, stored)):
                return ClientAnswer(Outcome.TIMED_OUT, "", "its Telemetry stream is full or gone")
            status = await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            return ClientAnswer(Outcome.TIMED_OUT, "", f"no answer in {timeout_s:g} s")
        finally:
            self._pending.pop(nonce, None)
        if status is None:
            return ClientAnswer(Outcome.TIMED_OUT, "", "its Telemetry stream closed")
        return answer_of(status)

    def answered(self, command: rpc.TelemetryCommand) -> bool:
        """Take the client's answer to a verification (False: ``command`` is none)."""
        which = command.WhichOneof("command")
        if which == "verify_message_result":
            nonce = command.verify_message_result.nonce
        elif which == "verify_message_command":  # the Node.js client's answer
            nonce = command.verify_message_command.nonce
        else:
            return False
        waiter = self._pending.get(nonce)
        if waiter is not None and not waiter.done():
            waiter.set_result(command.status)
        return True

    def close(self) -> None:
        """The stream ended: every wait ends now."""
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_result(None)
