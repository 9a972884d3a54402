"""Admin calls a node makes to another node's client port on behalf of its own caller: the
parts of a request that live in another broker group's store (an offset reset of a topic
whose queues span groups, ``node/services/offset_reset.py``).

The call carries the caller's own signature headers (``Caller.credentials``), so the node
that serves it checks the same user's rights itself (a RocketMQ 5 signature is valid on
any node for the clock-skew window). It goes to the master routing names now; one channel
per address, kept until the node stops (admin calls are rare: a handful of channels).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc

PEER_CALL_TIMEOUT_S = 10.0  # one broker group's part of an admin request


class PeerAdmin:
    def __init__(self, channel_for: Callable[[str], grpc.aio.Channel]) -> None:
        """``channel_for(address)``: a channel to a node's client port (TLS when this
        node's port has it)."""
        self.channel_for = channel_for
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> admin_pb2_grpc.AdminStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self.channel_for(address)
        return admin_pb2_grpc.AdminStub(channel)

    async def reset_offsets(
        self,
        address: str,
        request: api.ResetOffsetsRequest,
        credentials: tuple[tuple[str, str], ...],
    ) -> api.ResetOffsetsResponse:
        """The answer of the node at ``address``; ``ConnectionError`` when it cannot be
        reached or does not answer in time."""
        try:
            return await self._stub(address).ResetOffsets(
                request, timeout=PEER_CALL_TIMEOUT_S, metadata=credentials
            )
        except grpc.aio.AioRpcError as error:
            if error.code() in (
                grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.UNAUTHENTICATED,
            ):
                raise PermissionError(error.details() or error.code().name) from None
            raise ConnectionError(f"{address}: {error.code().name} {error.details()}") from None

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(None)
