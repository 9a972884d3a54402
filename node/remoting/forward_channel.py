"""A node's own connection to another node's remoting port, for the requests it forwards
(``node/remoting/forwarding.py``): frames out with opaques of its own, answers matched
back by opaque.

One connection per target, made when first needed and again after it failed; a failure
fails every request waiting on it at once (``ConnectionError``), and a request not
answered within its timeout raises ``TimeoutError``. At most ``MAX_PENDING`` requests
wait at once: the next one is refused (``ConnectionError``) rather than queued, since each
holds a client's request on the forwarding node.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from dataclasses import replace

from ferrymq.codec.dead_peer import SLOW_PEER_S, detect_dead_peer
from ferrymq.codec.errors import CodecError
from ferrymq.codec.remoting import FrameSplitter, RemotingCommand, decode, encode

CONNECT_TIMEOUT_S = 2.0
MAX_PENDING = 4096


class _Protocol(asyncio.Protocol):
    def __init__(self, channel: ForwardChannel) -> None:
        self.channel = channel
        self.splitter = FrameSplitter()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self.splitter.feed(data):
                answer = decode(frame)
                waiter = self.channel.pending.pop(answer.opaque, None)
                if waiter is not None and not waiter.done() and answer.is_response:
                    waiter.set_result(answer)
        except CodecError as error:
            self.channel.lost(self, ConnectionError(f"{self.channel.address}: {error}"))
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc) -> None:
        self.channel.lost(self, ConnectionError(f"{self.channel.address}: {exc or 'closed'}"))


class ForwardChannel:
    def __init__(self, address: str) -> None:
        self.address = address
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._opaques = itertools.count(1)

    async def call(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """``request`` as it is but for its opaque, and its answer (with this channel's
        opaque: the caller restores the client's)."""
        if len(self.pending) >= MAX_PENDING:
            raise ConnectionError(f"{MAX_PENDING} requests forwarded to {self.address} wait")
        protocol = await self._connected()
        opaque = next(self._opaques) & 0x7FFFFFFF
        waiter = asyncio.get_running_loop().create_future()
        self.pending[opaque] = waiter
        assert protocol.transport is not None
        protocol.transport.write(encode(replace(request, opaque=opaque)))
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        finally:
            self.pending.pop(opaque, None)

    async def _connected(self) -> _Protocol:
        if self._protocol is not None:
            return self._protocol
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Protocol:
        host, _, port = self.address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), host.strip("[]"), int(port)),
                CONNECT_TIMEOUT_S,
            )
        except (TimeoutError, OSError, ValueError) as error:
            raise ConnectionError(f"{self.address}: {error or 'connect timed out'}") from None
        # Forwarded sends pile up behind a starved master: its closed window is slowness.
        detect_dead_peer(transport.get_extra_info("socket"), unanswered_s=SLOW_PEER_S)
        self._protocol = protocol
        return protocol

    def lost(self, protocol: _Protocol, error: ConnectionError) -> None:
        if self._protocol is not protocol:
            return
        self._protocol = None
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(error)

    def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
