"""TLS and plaintext on one client port, as Apache RocketMQ's proxy serves them.

Why: the official Java and Go 5.x clients speak TLS unless told otherwise, the Python
client and 4.x clients plaintext; a node that serves one of the two refuses every client
of the other with its defaults. The first byte a client sends tells them apart: a TLS
connection opens with a handshake record (``0x16``); a gRPC connection's HTTP/2 preface
starts ``P``, a remoting frame with its length's high byte (0 below 16 MiB).

``SniffingListener`` owns the listening socket, waits (up to ``first_byte_timeout_s``)
for each connection's first byte without taking it, and hands the socket on with what it
speaks. The remoting door takes such a socket into its own connections, with TLS or not
(``node/remoting/server.py``). gRPC's server cannot take a socket accepted elsewhere, so
the gRPC door listens on loopback and ``GrpcRelay`` carries each client connection's bytes
to it, decrypting TLS on the way; ``client_peer`` names the client behind a relayed
connection, so what is per client (request budgets, address rules, forwarding proofs)
still is.

``take_over`` hands an accepted socket to the event loop: under uvloop the transport then
owns the descriptor alone (see its docstring: a double close it prevents).

``certificate_files``: with no certificate configured, one made on first start (a
self-signed P-256 certificate, 10 years) and kept in ``<data>/tls/``, which a restarted
node presents again. Clients that verify certificates need a configured one.

Thread-safety: everything runs on the node's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable

from store.kept_files import write_atomically

log = logging.getLogger("ferrymq.client_port")
TLS_HANDSHAKE = 0x16
BACKLOG = 1024
# A gRPC client sends its preface at once; one silent this long is closed (and with it a
# connection that opened a TLS handshake and stalled).
FIRST_BYTE_TIMEOUT_S = 10.0
# gRPC peer strings of the relay's loopback connections -> the client's own.
_relayed: dict[str, str] = {}


def client_peer(peer: str) -> str:
    """The peer a gRPC context names (``context.peer()``), or the client behind it when
    the connection was relayed."""
    return _relayed.get(peer, peer)


def grpc_peer(address: tuple) -> str:
    """A socket address written as gRPC writes peers (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    host, port = address[0], address[1]
    if ":" in host:
        return f"ipv6:[{host}]:{port}"
    return f"ipv4:{host}:{port}"


Accepted = Callable[[socket.socket, bool], Awaitable[None]]
# (client host, connections from it waiting for their first byte, all waiting) -> whether
# to take one more from it: a door's own connection limits, applied at accept.
Admit = Callable[[str, int, int], bool]


def waiting_at_most(total: int, per_host: int) -> Admit:
    """An ``Admit`` that bounds only the connections waiting for their first byte."""
    return lambda host, from_host, waiting: from_host < per_host and waiting < total


async def take_over(
    loop: asyncio.AbstractEventLoop,
    protocol_factory: Callable[[], asyncio.BaseProtocol],
    connection: socket.socket,
    **tls,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """``loop.connect_accepted_socket``, after which (uvloop) the socket object lets go of
    the descriptor: libuv closes it when the transport closes.

    Why: uvloop keeps the socket object beside its transport, and a transport not reading
    (its reading paused) that becomes garbage unclosed is freed by the garbage collector,
    whose finalizers close the socket's descriptor and then the transport's ``uv_close``
    closes the same number again: by then it may be another thread's file. The chaos runs
    found it so: the store's flusher thread failed an ``os.close`` with EBADF, and an
    LD_PRELOAD tracer caught the event loop's ``uv_close`` from ``UVHandle.__dealloc__``
    in a collection closing the flusher's descriptor. asyncio's own loop closes the
    socket object with its transport: there the socket keeps it."""
    uvloop_owns = type(loop).__module__.startswith("uvloop")
    try:
        return await loop.connect_accepted_socket(protocol_factory, connection, **tls)
    finally:
        if uvloop_owns:
            connection.detach()  # uvloop opened it first thing: it closes it in any case


class SniffingListener:
    """One listening port for TLS and plaintext clients (see the module's docstring)."""

    def __init__(self, accepted: Accepted, first_byte_timeout_s: float, admit: Admit) -> None:
        """``accepted(socket, tls)`` takes each connection once its first byte is in;
        ``admit`` decides at accept whether one more may wait for it (else it is closed
        at once: a client cannot hold the port with silent connections)."""
        self._accepted = accepted
        self.first_byte_timeout_s = first_byte_timeout_s
        self._admit = admit
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._waiting: set[asyncio.Task] = set()
        self._waiting_from: dict[str, int] = {}
        self.port = 0

    def bind(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (not accepting yet); the port bound."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        # Beside a launcher's hold on the port (node/port_holds.py).
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
        listening.listen(BACKLOG)
        listening.setblocking(False)
        self._socket = listening
        self.port = listening.getsockname()[1]
        return self.port

    def serve(self) -> None:
        assert self._socket is not None, "bind first"
        self._accepting = asyncio.ensure_future(self._accept_forever(self._socket))

    async def _accept_forever(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(listening)
            except OSError as e:  # EMFILE and the like: the next accept may work
                log.warning("client port accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            try:
                host = connection.getpeername()[0]
            except OSError:  # gone already
                connection.close()
                continue
            if not self._admit(host, self._waiting_from.get(host, 0), len(self._waiting)):
                connection.close()
                continue
            self._waiting_from[host] = self._waiting_from.get(host, 0) + 1
            task = asyncio.ensure_future(self._sniff(connection, host))
            self._waiting.add(task)
            task.add_done_callback(self._waiting.discard)

    async def _sniff(self, connection: socket.socket, host: str) -> None:
        try:
            first = await asyncio.wait_for(_first_byte(connection), self.first_byte_timeout_s)
        except (TimeoutError, OSError):
            first = None
        finally:
            left = self._waiting_from[host] - 1
            if left:
                self._waiting_from[host] = left
            else:
                del self._waiting_from[host]
        if first is None:  # closed before a byte, or silent too long
            connection.close()
            return
        try:
            await self._accepted(connection, first == TLS_HANDSHAKE)
        except OSError as e:  # a failed handshake (a scanner, a wrong client): theirs
            connection.close()
            log.debug("client port: connection from %s dropped: %s", host, e)
        except Exception:
            connection.close()
            log.exception("client port: a connection could not be taken")

    async def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        for task in list(self._waiting):
            task.cancel()
        if self._socket is not None:
            self._socket.close()
            self._socket = None


async def _first_byte(connection: socket.socket) -> int | None:
    """The first byte the peer sent, left in the socket (None: it closed first)."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    fd = connection.fileno()
    loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
    try:
        await readable
    finally:
        loop.remove_reader(fd)
    peeked = connection.recv(1, socket.MSG_PEEK)
    return peeked[0] if peeked else None


class _Pipe(asyncio.Protocol):
    """One side of a relayed connection: what it reads, the other side writes; when the
    other side's writes back up, this side stops reading."""

    def __init__(self, closed: Callable[[], None] = lambda: None) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Pipe | None = None
        self._closed = closed
        self._held: list[bytes] = []  # read before the other side was joined

    def connection_made(self, transport) -> None:
        self.transport = transport

    def join(self, other: _Pipe) -> None:
        self.other = other
        for data in self._held:
            other.transport.write(data)
        self._held.clear()

    def data_received(self, data: bytes) -> None:
        if self.other is None:
            self._held.append(data)
        else:
            self.other.transport.write(data)

    def eof_received(self) -> bool:
        other = self.other.transport if self.other is not None else None
        if other is not None and other.can_write_eof():
            other.write_eof()
            return True  # half-closed: the other way may still carry the answer
        if other is not None:
            other.close()
        return False

    def connection_lost(self, exc) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()
        self._closed()

    def pause_writing(self) -> None:
        if self.other is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None:
            self.other.transport.resume_reading()


class GrpcRelay:
    """Carries client connections to the gRPC server listening on loopback at
    ``backend_port``, decrypting those that speak TLS with ``tls``."""

    def __init__(self, backend_port: int, tls: ssl.SSLContext, handshake_timeout_s: float) -> None:
        self.backend_port = backend_port
        self.tls = tls
        self.handshake_timeout_s = handshake_timeout_s
        self.open = 0  # relayed connections open now

    async def accepted(self, connection: socket.socket, speaks_tls: bool) -> None:
        loop = asyncio.get_running_loop()
        client = grpc_peer(connection.getpeername())
        backend_side, _ = await loop.create_connection(_Pipe, "127.0.0.1", self.backend_port)
        backend_pipe: _Pipe = backend_side.get_protocol()
        relayed_as = grpc_peer(backend_side.get_extra_info("sockname"))
        _relayed[relayed_as] = client
        self.open += 1

        def closed() -> None:
            _relayed.pop(relayed_as, None)
            self.open -= 1

        extra = {"ssl": self.tls, "ssl_handshake_timeout": self.handshake_timeout_s}
        # The pipe the factory made (uvloop returns its TLS protocol in its place).
        client_pipe = _Pipe(closed)
        try:
            await take_over(loop, lambda: client_pipe, connection, **(extra if speaks_tls else {}))
        except BaseException:
            backend_side.close()
            closed()
            raise
        backend_pipe.join(client_pipe)
        client_pipe.join(backend_pipe)


def certificate_files(data_dir: str, node_id: str, host: str) -> tuple[str, str]:
    """(certificate, key) PEM paths in ``<data>/tls/``: made on the first call, then kept."""
    directory = os.path.join(data_dir, "tls")
    cert_path = os.path.join(directory, "node-cert.pem")
    key_path = os.path.join(directory, "node-key.pem")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ferrymq {node_id}")])
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    with contextlib.suppress(ValueError):
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # The key first, the certificate last: a certificate on disk means both are whole.
    write_atomically(key_path, key_pem, 0o600)
    write_atomically(cert_path, certificate.public_bytes(serialization.Encoding.PEM))
    log.info("made a self-signed TLS certificate for the client ports: %s", cert_path)
    return cert_path, key_path
