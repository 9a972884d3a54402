"""The remoting listener of a node: RocketMQ's 4.x TCP protocol on ``[ports] remoting``.

``bind`` opens the listening socket (port 0: one the OS picks) without serving, so the
node can register the address it really listens on before any request arrives;
``serve`` starts accepting once every handler is registered. With TLS configured the
port speaks TLS with the node's certificate (``node/tls.py``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from node.remoting.connection import FailureLog, Observer, RemotingConnection, TransportLimits
from node.remoting.dispatch import Dispatch

log = logging.getLogger("ferrymq.remoting")
BACKLOG = 1024


class RemotingServer:
    def __init__(
        self,
        dispatch: Dispatch,
        limits: TransportLimits | None = None,
        observe: Observer | None = None,
    ) -> None:
        """``observe(request code, response code, seconds)`` runs once per request
        (``node/metrics_remoting.py``)."""
        self.dispatch = dispatch
        self._observe = observe
        self.limits = limits or TransportLimits()
        self.connections: set[RemotingConnection] = set()
        self._failures = FailureLog()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def bind(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen on ``host:port`` (not serving yet); the port bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connection,
            host,
            port,
            ssl=ssl_context,
            reuse_address=True,  # beside a launcher's hold on the port (node/port_holds.py)
            backlog=BACKLOG,
            start_serving=False,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def serve(self) -> None:
        assert self._server is not None, "bind first"
        await self._server.start_serving()

    def _connection(self) -> RemotingConnection:
        return RemotingConnection(
            self.dispatch,
            self.limits,
            self._failures,
            self._opened,
            self.connections.discard,
            self._observe,
        )

    def _opened(self, connection: RemotingConnection) -> bool:
        if len(self.connections) >= self.limits.max_connections:
            return False
        self.connections.add(connection)
        return True

    async def close(self) -> None:
        """Stop listening and drop every connection (their handlers are cancelled)."""
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.abort()
        await self._server.wait_closed()
        self._server = None
