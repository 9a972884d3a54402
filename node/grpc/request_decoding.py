"""Malformed request bodies answer INVALID_ARGUMENT, not UNKNOWN.

grpc.aio decodes a request with the handler's ``request_deserializer`` before any servicer
code runs: bytes that are not the request message raise there, and grpc logs a traceback
and answers UNKNOWN, as it does for a bug in the node. ``tolerate_malformed`` gives every
handler a deserializer that cannot raise; a request it could not decode reaches the wrapped method
as a ``MalformedRequest``, which answers INVALID_ARGUMENT naming the request type. In a
request stream (Telemetry) the stream ends at the malformed message, the servicer finishes
as if the client had closed it, and the call ends with INVALID_ARGUMENT.

Thread-safety: the wrapped handlers run on the node's event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError


@dataclass(frozen=True)
class MalformedRequest:
    """What a request decoded to when its bytes were not the request message."""

    method: str
    error: str

    def detail(self) -> str:
        return f"malformed request for {self.method}: {self.error}"


def tolerant(deserializer: Callable[[bytes], object], method: str) -> Callable[[bytes], object]:
    def decode(raw: bytes) -> object:
        try:
            return deserializer(raw)
        except DecodeError as error:
            return MalformedRequest(method, str(error))

    return decode


def tolerate_malformed(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` with a deserializer that cannot raise, answering INVALID_ARGUMENT for
    a request it could not decode (``node/method_wrapping.py`` applies it)."""
    if handler.request_deserializer is None:
        return handler
    return _wrap(method, handler)


def _wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    decode = tolerant(handler.request_deserializer, method)
    serialize = handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _unary_unary(handler.unary_unary), decode, serialize
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _unary_stream(handler.unary_stream), decode, serialize
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _stream_unary(handler.stream_unary), decode, serialize
        )
    return grpc.stream_stream_rpc_method_handler(
        _stream_stream(handler.stream_stream), decode, serialize
    )


def _unary_unary(behavior):
    async def answer(request, context):
        if isinstance(request, MalformedRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail())
        return await behavior(request, context)

    return answer


def _unary_stream(behavior):
    async def answer(request, context):
        if isinstance(request, MalformedRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail())
        async for response in behavior(request, context):
            yield response

    return answer


class UntilRefused:
    """A request stream that ends at its first refused request and remembers why. A
    wrapper aborts the call with ``refusal`` once the handler has finished, in the
    handler's own task: a handler may read its requests in a task of its own (Telemetry
    does), and an abort raised there never reaches the client, whose stream then hangs
    until its deadline. ``check(request)`` is the refusal's detail, or None to pass the
    request on."""

    def __init__(self, requests: AsyncIterator, check: Callable[[object], str | None]) -> None:
        self.requests = requests
        self.check = check
        self.refusal: str | None = None

    async def stream(self) -> AsyncIterator:
        async for request in self.requests:
            refusal = self.check(request)
            if refusal is not None:
                self.refusal = refusal
                return
            yield request


def _malformed(request: object) -> str | None:
    return request.detail() if isinstance(request, MalformedRequest) else None


def _stream_unary(behavior):
    async def answer(requests, context):
        checked = UntilRefused(requests, _malformed)
        response = await behavior(checked.stream(), context)
        if checked.refusal is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, checked.refusal)
        return response

    return answer


def _stream_stream(behavior):
    async def answer(requests, context):
        checked = UntilRefused(requests, _malformed)
        async for response in behavior(checked.stream(), context):
            yield response
        if checked.refusal is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, checked.refusal)

    return answer
