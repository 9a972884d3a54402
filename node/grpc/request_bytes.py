"""The bytes a gRPC call's request holds while it is handled, against the node's one
budget (``node/request_budget.py``), which the remoting port's requests share.

A call holds its request (a long poll for up to a minute, a send until its replicas
confirm); with 4,096 calls at once and 64 MiB messages, nothing else bounded what that
adds up to. Each unary and server-streaming call holds its request's serialized size from
before it is forwarded or served until it ends; the owner is its connection (the peer's
address and port). A call that would take the node past ``[messages] max_request_bytes``,
or whose connection already holds ``max_request_bytes_per_connection``, is refused with
``RESOURCE_EXHAUSTED`` before any service code runs (gRPC cannot stop reading one
connection, as the remoting port does). Session streams (Telemetry) hold small commands
and a bounded outbox: passed through.

Cost: one ``ByteSize()`` (C) and two dict updates a call.

Thread-safety: the wrapped handlers run on the node's event loop, the budget's owner.
"""

from __future__ import annotations

import grpc

from node.client_port import client_peer
from node.grpc.method_wrapping import rewrapped
from node.request_budget import RequestBudget


class HeldRequests:
    """The method wrapper (``node/grpc/method_wrapping.py``)."""

    def __init__(self, budget: RequestBudget) -> None:
        self.budget = budget

    def _refusal(self, owner: str, size: int) -> str | None:
        """Why a call of ``size`` bytes from ``owner`` is refused now, or None (then held)."""
        budget = self.budget
        if budget.over(owner):
            return (
                f"this connection's calls hold {budget.held(owner)} bytes, past its limit of "
                f"{budget.max_bytes_per_owner} ([messages] max_request_bytes_per_connection): "
                "retry once some have ended"
            )
        if not budget.acquire(owner, size):
            return (
                f"the node's calls hold {budget.total} bytes, {size} more would pass its limit "
                f"of {budget.max_bytes} ([messages] max_request_bytes): retry later"
            )
        return None

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        refusal, budget = self._refusal, self.budget

        async def held(request, context):
            """Hold the request's bytes, or abort the call."""
            owner, size = client_peer(context.peer()), request.ByteSize()
            refused = refusal(owner, size)
            if refused is not None:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            return owner, size

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def unary(request, context):
                owner, size = await held(request, context)
                try:
                    return await behavior(request, context)
                finally:
                    budget.release(owner, size)

            return rewrapped(handler, unary)
        if handler.unary_stream is not None:
            streamed = handler.unary_stream

            async def unary_stream(request, context):
                owner, size = await held(request, context)
                try:
                    async for response in streamed(request, context):
                        yield response
                finally:
                    budget.release(owner, size)

            return rewrapped(handler, unary_stream)
        return handler  # a session stream: its commands are small, its outbox bounded
