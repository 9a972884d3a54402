"""The remoting listener of a node: RocketMQ's 4.x TCP protocol on ``[ports] remoting``.

``bind`` opens the listening socket (port 0: one the OS picks) without serving, so the
node can register the address it really listens on before any request arrives;
``serve`` starts accepting once every handler is registered. The port speaks TLS with the
node's certificate, plaintext, or both (``[security] client_tls``, ``node/tls.py``).

What the listener bounds (``TransportLimits``, from ``[remoting]``: ``transport_limits``):

- connections open at once, on the node and from one client address: one past either is
  closed as soon as it is taken (with TLS, once its handshake is done), with a log line
  (one per reason per 10 s: a client refused in a loop cannot flood the log). A TLS
  handshake in progress is bounded by time only: it must finish within the first frame's
  deadline (``ssl_handshake_timeout``);
- idle and silent connections: one sweep on the loop (about once a second, the shortest
  timeout's tenth when shorter) asks each connection to close itself if it had no whole
  frame in time or has been idle too long (``RemotingConnection.sweep``); per request
  the connection only sets a flag;
- request bytes held while handled, per connection and for the node: one
  ``RequestBudget`` shared by every connection (``node/request_budget.py``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from node.client_port import SniffingListener, take_over
from node.config import RemotingOptions
from node.remoting.connection import Observer, RemotingConnection, TransportLimits
from node.remoting.dispatch import Dispatch
from node.remoting.quiet_log import FailureLog, QuietLog
from node.request_budget import RequestBudget

log = logging.getLogger("ferrymq.remoting")
BACKLOG = 1024
# A sweep later than its interval by more than this means the loop did not run (the
# process was stopped, or stalled): nobody is closed for that silence.
LATE_SWEEP_S = 1.0


def transport_limits(options: RemotingOptions) -> TransportLimits:
    """The listener's limits from the node's ``[remoting]`` settings."""
    return TransportLimits(
        max_connections=options.max_connections,
        max_connections_per_address=options.max_connections_per_address,
        idle_timeout_s=options.idle_timeout_ms / 1000,
        first_frame_timeout_s=options.first_frame_timeout_ms / 1000,
    )


class RemotingServer:
    def __init__(
        self,
        dispatch: Dispatch,
        limits: TransportLimits | None = None,
        observe: Observer | None = None,
        budget: RequestBudget | None = None,
    ) -> None:
        """``observe(request code, response code, seconds)`` runs once per request
        (``node/metrics_remoting.py``); ``budget``: the node's request bytes, when another
        door shares them (else one of this listener's own, from ``limits``)."""
        self.dispatch = dispatch
        self._observe = observe
        self.limits = limits or TransportLimits()
        self.budget = budget or RequestBudget(
            self.limits.max_request_bytes, self.limits.max_request_bytes_per_connection
        )
        self.connections: set[RemotingConnection] = set()
        self._per_address: dict[str, int] = {}
        self._failures = FailureLog(log)
        self._quiet = QuietLog(log)
        self._server: asyncio.AbstractServer | None = None
        self._sniffing: SniffingListener | None = None  # TLS and plaintext on the port
        self._tls: dict = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._swept_at = 0.0
        self.port = 0

    async def bind(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        plaintext_too: bool = False,
    ) -> int:
        """Listen on ``host:port`` (not serving yet); the port bound. With
        ``ssl_context`` the port speaks TLS, whose handshake must finish within the first
        frame's deadline; with ``plaintext_too`` as well, each connection's first byte
        says which it speaks (``node/client_port.py``)."""
        loop = asyncio.get_running_loop()
        tls: dict = {}
        if ssl_context is not None:
            tls = {"ssl": ssl_context, "ssl_handshake_timeout": self.limits.first_frame_timeout_s}
        if ssl_context is not None and plaintext_too:
            self._tls = tls
            self._sniffing = SniffingListener(
                self._take, self.limits.first_frame_timeout_s, self._admit
            )
            self.port = self._sniffing.bind(host, port)
            return self.port
        self._server = await loop.create_server(
            self._connection,
            host,
            port,
            reuse_address=True,  # beside a launcher's hold on the port (node/port_holds.py)
            backlog=BACKLOG,
            start_serving=False,
            **tls,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _take(self, sock, speaks_tls: bool) -> None:
        """A connection the sniffing listener accepted, into this server's connections."""
        loop = asyncio.get_running_loop()
        await take_over(loop, self._connection, sock, **(self._tls if speaks_tls else {}))

    async def serve(self) -> None:
        if self._sniffing is not None:
            self._sniffing.serve()
        else:
            assert self._server is not None, "bind first"
            await self._server.start_serving()
        loop = asyncio.get_running_loop()
        self._swept_at = loop.time()
        self._sweeper = loop.call_later(self.sweep_interval_s, self._sweep)

    @property
    def sweep_interval_s(self) -> float:
        shortest = min(self.limits.idle_timeout_s, self.limits.first_frame_timeout_s)
        return min(max(shortest / 10, 0.01), 1.0)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = now - self._swept_at > self.sweep_interval_s + LATE_SWEEP_S
        self._swept_at = now
        for connection in list(self.connections):
            if late:
                connection.excuse(now)
            else:
                connection.sweep(now)
        self._sweeper = loop.call_later(self.sweep_interval_s, self._sweep)

    def _connection(self) -> RemotingConnection:
        return RemotingConnection(
            self.dispatch,
            self.limits,
            self._failures,
            self._opened,
            self._closed,
            self._observe,
            budget=self.budget,
            quiet=self._quiet,
            accepted_at=asyncio.get_running_loop().time(),  # called at accept, on the loop
        )

    def _admit(self, host: str, waiting_from_host: int, waiting: int) -> bool:
        """The limits at accept, counting connections still waiting for their first byte
        (TLS and plaintext on the port): whether one more from ``host`` may be taken."""
        return self._within_limits(
            host,
            len(self.connections) + waiting,
            self._per_address.get(host, 0) + waiting_from_host,
        )

    def _within_limits(self, host: str, open_now: int, open_from_host: int) -> bool:
        limits = self.limits
        if open_now >= limits.max_connections:
            self._quiet.log(
                "refused-node",
                logging.WARNING,
                "remoting connection from %s refused: %d connections are open, the limit "
                "([remoting] max_connections)",
                host,
                open_now,
            )
            return False
        if open_from_host >= limits.max_connections_per_address:
            self._quiet.log(
                "refused-address",
                logging.WARNING,
                "remoting connection from %s refused: %d connections from %s are open, the "
                "limit per address ([remoting] max_connections_per_address)",
                host,
                open_from_host,
                host,
            )
            return False
        return True

    def _opened(self, connection: RemotingConnection) -> bool:
        host = connection.peer_host
        open_from_host = self._per_address.get(host, 0)
        if not self._within_limits(host, len(self.connections), open_from_host):
            return False
        self.connections.add(connection)
        self._per_address[host] = open_from_host + 1
        return True

    def _closed(self, connection: RemotingConnection) -> None:
        if connection not in self.connections:
            return  # refused: never counted
        self.connections.discard(connection)
        host = connection.peer_host
        left = self._per_address.get(host, 0) - 1
        if left > 0:
            self._per_address[host] = left
        else:
            self._per_address.pop(host, None)

    async def close(self) -> None:
        """Stop listening and drop every connection (their handlers are cancelled)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._sniffing is not None:
            await self._sniffing.close()
            self._sniffing = None
            for connection in list(self.connections):
                connection.abort()
            return
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.abort()
        await self._server.wait_closed()
        self._server = None
