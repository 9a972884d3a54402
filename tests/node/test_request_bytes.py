"""The bytes gRPC calls hold while handled count against the node's one request budget, as
the remoting port's requests do (``node/grpc/request_bytes.py``, ``node/request_budget.py``):
a long poll whose request carries megabytes (protobuf keeps unknown fields) cannot pin the
node's memory by the thousand."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ferrymq.client import Admin
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.grpc.request_bytes import HeldRequests
from node.request_budget import RequestBudget
from tests.support.rpc import queue_of

MIB = 1 << 20
PER_CONNECTION = 8 * MIB
NODE_TOML = f"[messages]\nmax_request_bytes_per_connection = {PER_CONNECTION}\n"
RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"


def padded_receive(padding: int, wait_s: int = 20) -> bytes:
    """A ReceiveMessage request that waits ``wait_s`` and carries ``padding`` bytes in an
    unknown field (number 1000, length-delimited), which protobuf keeps."""
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=queue_of("waits", 0), batch_size=1
    )
    request.long_polling_timeout.seconds = wait_s
    length, varint = padding, b""
    while True:
        byte, length = length & 0x7F, length >> 7
        varint += bytes([byte | (0x80 if length else 0)])
        if not length:
            break
    return request.SerializeToString() + b"\xc2\x3e" + varint + b"x" * padding


def test_a_connections_long_polls_past_its_share_are_refused_not_held(nodes):
    node = nodes(NODE_TOML)
    with Admin(node.address) as admin:
        admin.create_topic("waits", 1)
        admin.create_group("G")
    options = [("grpc.max_send_message_length", 64 * MIB)]
    with grpc.insecure_channel(node.address, options=options) as channel:
        receive = channel.unary_stream(
            RECEIVE,
            request_serializer=lambda raw: raw,
            response_deserializer=rpc.ReceiveMessageResponse.FromString,
        )
        held = [receive(padded_receive(5 * MIB), timeout=30) for _ in range(2)]
        try:
            # The two wait (5 + 5 MiB held, past the 8 MiB share); the next is refused.
            until(lambda: _refused_now(receive), 10, "a refusal past the connection's share")
        finally:
            for call in held:
                call.cancel()
    with grpc.insecure_channel(node.address, options=options) as other:  # another connection
        receive = other.unary_stream(
            RECEIVE,
            request_serializer=lambda raw: raw,
            response_deserializer=rpc.ReceiveMessageResponse.FromString,
        )
        (answer, *_) = list(receive(padded_receive(MIB, wait_s=0), timeout=10))
        assert answer.status.code == pb.MESSAGE_NOT_FOUND


def _refused_now(receive) -> bool:
    try:
        list(receive(padded_receive(1024, wait_s=0), timeout=10))
    except grpc.RpcError as error:
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert "max_request_bytes_per_connection" in error.details()
        return True
    return False


class Aborted(Exception):
    pass


class Call:
    """What the wrapper reads of a call: its peer, and its abort."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return self._peer

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


def test_a_call_that_would_pass_the_nodes_bytes_is_refused_and_what_ends_is_given_back():
    budget = RequestBudget(max_bytes=3 * MIB, max_bytes_per_owner=2 * MIB)
    release = asyncio.Event()

    async def waiting(request, context):
        await release.wait()
        return "answered"

    handler = grpc.unary_unary_rpc_method_handler(waiting)
    wrapped = HeldRequests(budget).wrap("/x/Waits", handler).unary_unary

    class Request:
        def __init__(self, size: int) -> None:
            self.size = size

        def ByteSize(self) -> int:
            return self.size

    async def run() -> None:
        first = asyncio.ensure_future(wrapped(Request(2 * MIB), Call("ipv4:10.0.0.1:1")))
        second = asyncio.ensure_future(wrapped(Request(MIB // 2), Call("ipv4:10.0.0.2:1")))
        await asyncio.sleep(0)
        assert budget.total == 2 * MIB + MIB // 2
        refused = Call("ipv4:10.0.0.3:1")
        with pytest.raises(Aborted):
            await wrapped(Request(MIB), refused)
        code, details = refused.aborted
        assert (
            code is grpc.StatusCode.RESOURCE_EXHAUSTED and "[messages] max_request_bytes" in details
        )
        release.set()
        assert await first == await second == "answered"
        assert budget.total == 0 and budget.owners == 0

    asyncio.run(run())
