"""Who calls, on the gRPC port: each method is wrapped once, at registration
(``method_wrapping.py``), with the verification of the RocketMQ 5 signature headers
(``node/authentication.py``); what the verified user may do is the services' decision
(``node/services/permissions.py``), made on the request they then execute.

A call without valid credentials is answered before any service code runs: the RocketMQ 5
MessagingService in its response status, as the Java proxy does (``UNAUTHORIZED``, 40100,
which the official clients raise as ``UnauthorizedException``); ferrymq's Admin and Data
services abort with gRPC ``UNAUTHENTICATED``. A verified user is kept for the call
(``AUTHENTICATED_USER``, a context variable: each call runs in a task of its own) and read
by ``caller_of``, which every servicer method uses to build its ``Caller``.

Refusals by a service (``AccessDenied``) are answered by the servicers: MessagingService
in the status (``FORBIDDEN``, 40300), Admin and Data with ``PERMISSION_DENIED``
(``refuse_call``).
"""

from __future__ import annotations

from contextvars import ContextVar

import grpc

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.authentication import Verification
from node.client_port import client_peer
from node.grpc.method_wrapping import rewrapped
from node.rpc_status import AccessDenied
from node.services.caller import Caller, Door
from routing.acl import User

MESSAGING = "/apache.rocketmq.v2.MessagingService/"
AUTHENTICATED_USER: ContextVar[User | None] = ContextVar("ferrymq_user", default=None)


def caller_of(context, door: Door, method: str) -> Caller:
    """The ``Caller`` of a gRPC call (its peer: ``ipv4:10.0.0.5:41000``; a forwarded call's
    context names the client's own, ``node/grpc/forwarding.py``)."""
    host, port = peer_of(client_peer(context.peer()) if context is not None else "")
    return Caller(door, method, AUTHENTICATED_USER.get(), host, port)


def peer_of(peer: str) -> tuple[str, int]:
    """The host and port of a gRPC peer (``ipv4:10.0.0.5:41000``, ``ipv6:[::1]:41000``)."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer, 0
    host, _, port = address.rpartition(":")
    if not host:
        return address, 0
    return host, int(port) if port.isdigit() else 0


async def refuse_call(context, denied: AccessDenied) -> None:
    """Abort an Admin or Data call a service refused."""
    code = (
        grpc.StatusCode.PERMISSION_DENIED
        if denied.authenticated
        else grpc.StatusCode.UNAUTHENTICATED
    )
    await context.abort(code, str(denied))


class CallAuthentication:
    """The method wrapper: verify the call, keep its user, or answer the refusal."""

    def __init__(self, verification: Verification) -> None:
        self.verification = verification

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        verify = self.verification.of_metadata
        short = method.rsplit("/", 1)[-1]
        in_status = method.startswith(MESSAGING)
        response_class = getattr(rpc, f"{short}Response", None)

        def verified(context) -> AccessDenied | None:
            metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            try:
                AUTHENTICATED_USER.set(verify(short, metadata))
            except AccessDenied as denied:
                return denied
            return None

        async def refused(denied: AccessDenied, context):
            if in_status and response_class is not None:
                return response_class(status=pb.Status(code=denied.code, message=str(denied)))
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(denied))

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def unary(request, context):
                denied = verified(context)
                if denied is not None:
                    return await refused(denied, context)
                return await behavior(request, context)

            return rewrapped(handler, unary)
        if handler.unary_stream is not None:
            behavior = handler.unary_stream

            async def unary_stream(request, context):
                denied = verified(context)
                if denied is not None:
                    yield await refused(denied, context)
                    return
                async for response in behavior(request, context):
                    yield response

            return rewrapped(handler, unary_stream)
        if handler.stream_stream is not None:
            behavior = handler.stream_stream

            async def stream_stream(request_iterator, context):
                denied = verified(context)
                if denied is not None:  # the session stream has no status to answer in
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(denied))
                async for response in behavior(request_iterator, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise TypeError(f"{method}: unsupported handler kind for authentication")
