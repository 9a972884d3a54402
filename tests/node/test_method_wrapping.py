"""Methods wrapped once at registration (``node/method_wrapping.py``): every method of a
service gets the wrappers, the first outermost, calls run through them on a real grpc.aio
server, and a method nobody registered is still UNIMPLEMENTED."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ferrymq.protocol.ferrymq import data_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.grpc.method_wrapping import add_wrapped


class Data(data_pb2_grpc.DataServicer):
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def Produce(self, request, context):
        self.calls.append("servicer")
        return api.ProduceResponse(code=20000, offsets=[7])


def recording(name: str, calls: list[str], wrapped_methods: list[str]):
    def wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        wrapped_methods.append(f"{name} {method}")
        behavior = handler.unary_unary

        async def unary(request, context):
            calls.append(name)
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary, handler.request_deserializer, handler.response_serializer
        )

    return wrap


def test_each_method_is_wrapped_once_in_order_and_calls_pass_through_the_wrappers():
    calls: list[str] = []
    wrapped: list[str] = []

    async def scenario():
        server = grpc.aio.server()
        add_wrapped(
            server,
            data_pb2_grpc.add_DataServicer_to_server,
            Data(calls),
            [recording("outer", calls, wrapped), recording("inner", calls, wrapped)],
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                data = data_pb2_grpc.DataStub(channel)
                for _ in range(3):
                    answer = await data.Produce(api.ProduceRequest(topic="t", count=1))
                    assert list(answer.offsets) == [7]
                unknown = channel.unary_unary("/ferrymq.Nowhere/Method")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await unknown(b"")
                assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
        finally:
            await server.stop(None)

    asyncio.run(scenario())
    # Built once per method at registration, the inner wrapper first...
    assert wrapped == [
        f"{name} /ferrymq.data.v1.Data/{method}"
        for method in ("Fetch", "Produce")
        for name in ("inner", "outer")
    ]
    # ...and every call passes through both, the first outermost.
    assert calls == ["outer", "inner", "servicer"] * 3


def test_a_registration_function_that_registers_no_handlers_is_refused():
    with pytest.raises(TypeError, match="registered no method handlers"):
        add_wrapped(object(), lambda servicer, server: None, object(), [])
