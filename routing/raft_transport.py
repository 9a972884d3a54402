"""pysyncobj's TCP transport with a bound on what a peer can make the Raft thread buffer.

pysyncobj (0.3.x) frames each message as a 4-byte signed length, then the message (pickle,
zlib, then Fernet with the cluster secret). Its connection appends everything the socket
holds to one buffer and only then looks at the length; the message is decrypted once all
of it has arrived. So anyone who can reach the Raft port could announce 2 GiB and send
junk: the Raft thread would keep buffering it (each read copies the whole buffer again)
and wait, long before decryption could refuse a byte of it.

``BoundedTcpConnection`` reads the length at the head of its buffer before every read from
the socket. A length outside ``0..bound`` drops the connection at once (logged); a whole
message at the head is handed on before anything more is read. A connection therefore
never holds more than one message of at most the bound plus one read
(``SyncObjConf.recvBufferSize``, 64 KiB). The bound is ``PREAUTH_MESSAGE_BYTES`` until the
peer's first message has been decrypted (the key exchange: a 32-byte random key, about
150 bytes on the wire), ``MAX_MESSAGE_BYTES`` after.

Why ``MAX_MESSAGE_BYTES`` is enough: the largest messages pysyncobj sends here are
- ``append_entries`` with entries: they are gathered until their total reaches
  ``appendEntriesBatchSizeBytes`` (64 KiB), so a message holds less than 64 KiB plus one
  more entry; one entry is one routing command, refused by ``RoutingReplica.submit``
  above ``MAX_COMMAND_BYTES`` (256 KiB) pickled; a lone entry of 64 KiB or more would go
  in parts of 64 KiB;
- a snapshot, sent in parts of ``logCompactionBatchSize`` (64 KiB);
- a command forwarded to the leader (one command) and the result sent back (one record of
  the routing state: the largest, a user with 256 ACL entries, is a few tens of KiB).
So a message is under 64 KiB + 256 KiB + a few hundred bytes of fields before zlib (which
can add 0.1 %) and Fernet (57 bytes and padding, then base64: 4/3): about 430 KiB.
``MAX_MESSAGE_BYTES`` is 1 MiB, twice that.

pysyncobj builds its connections itself (its server's accept handler, ``addNode``), so
``BoundedTcpTransport`` gives each new connection this class before its first read; the
subclass adds no state, only the check on the read path.
"""

from __future__ import annotations

import logging
import struct
import time

from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

log = logging.getLogger("ferrymq.routing")
MAX_COMMAND_BYTES = 256 << 10
MAX_MESSAGE_BYTES = 1 << 20
PREAUTH_MESSAGE_BYTES = 4096
LOG_EVERY_S = 10.0  # a refusal is logged at most this often (an attacker could repeat it)
_LENGTH = struct.Struct("i")  # pysyncobj's: native byte order, signed
_last_logged = [0.0]


class BoundedTcpConnection(TcpConnection):
    """A pysyncobj connection that refuses a message longer than the bound before it
    buffers it (see the module docstring)."""

    @property
    def keys_exchanged(self) -> bool:
        """Whether this peer's first message decrypted (both random keys are known)."""
        return self.sendRandKey is not None and self.recvRandKey is not None

    def _TcpConnection__processRead(self) -> bool:  # pysyncobj's private read step
        buffered = self._TcpConnection__readBuffer
        if len(buffered) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffered)
            bound = MAX_MESSAGE_BYTES if self.keys_exchanged else PREAUTH_MESSAGE_BYTES
            if not 0 <= length <= bound:
                _log_refusal(self, length, bound)
                self.disconnect()
                return False
            if len(buffered) >= _LENGTH.size + length:
                return False  # a whole message waits: pysyncobj parses it before reading on
        return super()._TcpConnection__processRead()


def _log_refusal(connection: TcpConnection, length: int, bound: int) -> None:
    now = time.monotonic()
    if now - _last_logged[0] < LOG_EVERY_S:
        return
    _last_logged[0] = now
    try:
        peer = connection._TcpConnection__socket.getpeername()
    except OSError:
        peer = "?"
    log.warning(
        "Raft: dropped a connection from %s announcing a message of %d bytes (the limit "
        "is %d here): not a ferrymq node, or not one of this version",
        peer,
        length,
        bound,
    )


def _bounded(connection: TcpConnection) -> None:
    if type(connection) is TcpConnection:
        connection.__class__ = BoundedTcpConnection


class BoundedTcpTransport(TCPTransport):
    """pysyncobj's TCP transport whose every connection is a ``BoundedTcpConnection``."""

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:
        _bounded(conn)  # accepted a moment ago: nothing read from it yet
        super()._onNewIncomingConnection(conn)

    def addNode(self, node) -> None:
        super().addNode(node)
        connection = self._connections.get(node)
        if connection is not None:
            _bounded(connection)  # made here, not connected yet
