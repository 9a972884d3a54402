"""The SDK's connections to a node's remoting port: RocketMQ frames with binary headers
(SerializeType ROCKETMQ, ``ferrymq.codec.remoting``) carrying ferrymq's private codes.

``RemotingChannel`` is blocking (the sync API): one socket, used from one thread as the
SDK's objects are; ``call`` is a request and its answer, and ``send`` / ``receive`` let
a caller keep requests travelling while it works (the pull consumer's fetches, one
waiting on each queue); ``wait_readable`` waits on several channels at once,
``read_buffered`` / ``read_frame`` keep what came and ``answered`` says which did.
``AsyncRemotingChannel`` serves one event loop: requests are matched to answers by
opaque, so coalesced sends overlap on one connection. Either connects lazily and again
after a failure, or when the node closed it while idle (its ``[remoting]
idle_timeout_ms``: the blocking channel checks a connection unused for a while before it
writes on it); a failure is a ``FerryError(TRANSPORT)`` (``UNAVAILABLE``,
``DEADLINE_EXCEEDED``), which the SDK retries after refreshing the route, as it does a
gRPC transport failure.

Both follow the client's ``ClientSecurity``: with credentials every request carries
RocketMQ's ACL 1.0 signature; with TLS the connection is TLS, verified as the gRPC
channel's. A refusal (NO_PERMISSION) is raised as the gRPC door raises it: the node's
remark starts ``UNAUTHENTICATED:`` for bad credentials (``FerryError`` code name
UNAUTHENTICATED), else PERMISSION_DENIED; neither is retried.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import select
import socket
import ssl
import time
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from ferrymq.client.errors import MALFORMED_ANSWER, TRANSPORT, FerryError
from ferrymq.client.security import ClientSecurity
from ferrymq.client.socket_frames import SocketFrames
from ferrymq.codec import bytes_field
from ferrymq.codec.dead_peer import detect_dead_peer
from ferrymq.codec.remoting import (
    SERIALIZE_ROCKETMQ,
    CodecError,
    FrameSplitter,
    RemotingCommand,
    decode,
    encode_head,
)
from ferrymq.codec.remoting_codes import CLIENT_TIMEOUT_FIELD, FerryRequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data

# A connection unused this long is checked before a request is written on it: the node
# closes idle connections ([remoting] idle_timeout_ms), and a request written after that
# close would be lost (UNAVAILABLE). Below it, no check: one clock read a request.
CHECK_IDLE_AFTER_S = 0.5
BAD_CREDENTIALS_REMARK = "UNAUTHENTICATED:"  # node.authentication.Verification: its refusals
PLAIN = ClientSecurity()
CLIENT_VERSION = 407  # the 4.9.7 ordinal, as the broker answers


def unavailable(address: str, why: object, *, unsent: bool = False) -> FerryError:
    """A failed connection; ``unsent``: it failed before the request left (``FerryError``)."""
    return FerryError(TRANSPORT, "UNAVAILABLE", f"remoting {address}: {why}", unsent=unsent)


def deadline(address: str, timeout_s: float) -> FerryError:
    return FerryError(
        TRANSPORT, "DEADLINE_EXCEEDED", f"remoting {address}: no answer in {timeout_s:g} s"
    )


def with_client_timeout(
    code: int, fields: dict[str, str] | None, timeout_s: float
) -> dict[str, str] | None:
    """A produce's fields name the call's timeout: a node that forwards it to the master
    waits that long, and the master refuses it once that long has passed, unstored, so a
    send given up on is never stored behind the sends made after it."""
    if code != FerryRequestCode.FERRY_PRODUCE:
        return fields
    named = {CLIENT_TIMEOUT_FIELD: str(max(1, round(timeout_s * 1000)))}
    return named if fields is None else {**fields, **named}


def request_frame(
    code: int,
    opaque: int,
    fields: dict[str, str] | None,
    body: bytes,
    security: ClientSecurity = PLAIN,
) -> bytes:
    signed = security.remoting_fields(fields, body)
    command = RemotingCommand(
        code, opaque, 0, None, signed, body, "PYTHON", CLIENT_VERSION, SERIALIZE_ROCKETMQ
    )
    return encode_head(command) + body


def answer_body(address: str, answer: RemotingCommand) -> RemotingCommand:
    """The answer when the node served the code; a transport-level refusal otherwise (an
    older node without the code, a node refusing every request: use the gRPC port)."""
    if answer.code == ResponseCode.SUCCESS:
        return answer
    if answer.code == ResponseCode.SYSTEM_BUSY:  # the node's back-pressure: retried later
        raise FerryError(
            pb.TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS", f"remoting {address}: {answer.remark}"
        )
    try:
        name = ResponseCode(answer.code).name
    except ValueError:
        name = str(answer.code)
    refused = "UNAVAILABLE"
    if answer.code == ResponseCode.NO_PERMISSION:
        bad_credentials = (answer.remark or "").startswith(BAD_CREDENTIALS_REMARK)
        refused = "UNAUTHENTICATED" if bad_credentials else "PERMISSION_DENIED"
    raise FerryError(TRANSPORT, refused, f"remoting {address}: {name} {answer.remark}")


def produce_answer(answer: RemotingCommand) -> data.ProduceResponse:
    """The ProduceResponse in a FERRY_PRODUCE answer."""
    try:
        return data.ProduceResponse.FromString(answer.body)
    except DecodeError as error:
        raise FerryError(MALFORMED_ANSWER, "MALFORMED_ANSWER", f"produce answer: {error}") from None


@dataclass(slots=True)
class FetchAnswer:
    """A FERRY_FETCH answer: its FetchResponse's fields, the records a view of the frame
    (``ferrymq.codec.bytes_field``: no copy of them out of the answer). Read-only by
    convention, not ``frozen``: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, ~4 µs of a tailing reader's ~80 a message (bench/RESULTS.md,
    "The SDK's share of the end to end")."""

    code: int
    message: str
    records: memoryview
    count: int
    next_offset: int
    min_offset: int
    max_offset: int
    follows: bool  # another answer to the same fetch comes (``FetchRequest.follow``)


def fetch_answer(answer: RemotingCommand) -> FetchAnswer:
    """The FetchResponse in a FERRY_FETCH answer."""
    try:
        head_bytes, records = bytes_field.split(answer.body, bytes_field.FETCH_RECORDS_FIELD)
        head = data.FetchResponse.FromString(head_bytes)
    except (ValueError, DecodeError) as error:
        raise FerryError(MALFORMED_ANSWER, "MALFORMED_ANSWER", f"fetch answer: {error}") from None
    return FetchAnswer(
        head.code,
        head.message,
        records,
        head.count,
        head.next_offset,
        head.min_offset,
        head.max_offset,
        head.follows,
    )


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class RemotingChannel:
    """Blocking request/response to one node's remoting port."""

    def __init__(
        self, address: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.security = security or PLAIN
        self._tls = self.security.ssl_context()
        self._socket: socket.socket | None = None
        self._frames = SocketFrames()
        self._opaques = itertools.count(1)
        # Requests sent on this connection whose answers someone will ``receive``, and
        # those answers that came while another was being waited for (a prefetch
        # answered during a route refresh): kept, not skipped.
        self._awaited: set[int] = set()
        self._answers: dict[int, RemotingCommand] = {}
        # A followed fetch's answers that came behind the one kept, in order.
        self._behind: dict[int, list[RemotingCommand]] = {}
        self._used_at = 0.0

    def _open_socket(self) -> socket.socket:
        """The connection, made again if the node closed it while it was idle."""
        sock = self._socket
        now = time.monotonic()
        if (
            sock is not None
            and not self._awaited
            and now - self._used_at > CHECK_IDLE_AFTER_S
            and select.select([sock], [], [], 0)[0]
        ):
            # Nothing is awaited, yet something came: the node's close (or the answer to a
            # forgotten request). A new connection loses nothing either way.
            self.close()
            sock = None
        self._used_at = now
        return sock or self._connect()

    def _connect(self) -> socket.socket:
        host, port = _split(self.address)
        try:
            sock = socket.create_connection((host, port), timeout=self.timeout_s)
        except OSError as error:
            raise unavailable(self.address, error, unsent=True) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        detect_dead_peer(sock)  # a cut path fails in ~2 s, not at the call's deadline
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=host)
            except OSError as error:  # ssl.SSLError too: a failed handshake, as a node down
                sock.close()
                raise unavailable(self.address, error, unsent=True) from None
        self._socket = sock
        self._frames = SocketFrames()
        return sock

    def call(
        self,
        code: int,
        body: bytes = b"",
        fields: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> RemotingCommand:
        timeout_s = timeout_s or self.timeout_s
        return self.receive(self.send(code, body, fields, timeout_s), timeout_s)

    def send(
        self,
        code: int,
        body: bytes = b"",
        fields: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Write a request without waiting for its answer (``receive`` takes it): a
        consumer's next fetch travels while it decodes the last. Returns its opaque."""
        timeout_s = timeout_s or self.timeout_s
        sock = self._open_socket()
        opaque = next(self._opaques)
        try:
            # The socket keeps the channel's timeout; a call that needs another (a fetch
            # that long-polls) sets its own. (Two settimeout calls a request were a tenth
            # of the SDK's own time per send.)
            if sock.gettimeout() != timeout_s:
                sock.settimeout(timeout_s)
            fields = with_client_timeout(code, fields, timeout_s)
            sock.sendall(request_frame(code, opaque, fields, body, self.security))
        except (OSError, CodecError) as error:
            raise self._failed(error, timeout_s) from None
        self._awaited.add(opaque)
        return opaque

    def receive(self, opaque: int, timeout_s: float | None = None) -> RemotingCommand:
        """The answer to request ``opaque`` (sent on this connection). Answers to other
        requests still awaited are kept for their own ``receive``; answers nobody waits
        for (``forget``) are skipped."""
        timeout_s = timeout_s or self.timeout_s
        kept = self._answers.pop(opaque, None)
        if kept is not None:
            self._awaited.discard(opaque)
            if self._behind:
                self._next_behind(opaque)
            return answer_body(self.address, kept)
        sock = self._socket
        if sock is None or opaque not in self._awaited:
            # The connection failed since: the request went with it.
            raise unavailable(self.address, "the connection closed before the answer")
        try:
            if sock.gettimeout() != timeout_s:
                sock.settimeout(timeout_s)
            end = time.monotonic() + timeout_s
            while True:
                answer = decode(self._frames.next_frame(sock))
                if answer.opaque == opaque and answer.is_response:
                    self._awaited.discard(opaque)
                    break
                self._keep(answer)  # another's; or, given up on or a notice, nobody's
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
        except (OSError, CodecError) as error:
            raise self._failed(error, timeout_s) from None
        return answer_body(self.address, answer)

    def read_buffered(self) -> None:
        """Keep the answers whose bytes are here already (whole frames in the buffer, or
        bytes TLS has decrypted), each awaited one for its ``receive``; no system call
        but for TLS's."""
        sock = self._socket
        if sock is None:
            return
        tls = self._tls is not None
        try:  # a buffered frame over the size limit is a failed connection too
            while self._frames.holds_whole_frame() or (tls and _tls_pending(sock)):
                self._keep(decode(self._frames.next_frame(sock)))
        except (OSError, CodecError) as error:
            raise self._failed(error, self.timeout_s) from None

    def read_frame(self) -> None:
        """Read the next frame (call it when the socket has bytes: ``wait_readable``; the
        rest of a frame begun is read within the socket's timeout) and keep it if awaited,
        then what is buffered behind it (``read_buffered``)."""
        sock = self._socket
        if sock is None:
            return
        try:
            self._keep(decode(self._frames.next_frame(sock)))
        except (OSError, CodecError) as error:
            raise self._failed(error, self.timeout_s) from None
        self.read_buffered()

    def _keep(self, answer: RemotingCommand) -> None:
        """An answer someone will ``receive``, kept for it; any other is dropped. A
        followed fetch's answer that comes while the one before it is kept waits behind
        it."""
        if answer.is_response and answer.opaque in self._awaited:
            if answer.opaque in self._answers:
                self._behind.setdefault(answer.opaque, []).append(answer)
            else:
                self._answers[answer.opaque] = answer

    def _next_behind(self, opaque: int) -> None:
        behind = self._behind.get(opaque)
        if behind:
            self._answers[opaque] = behind.pop(0)
            if not behind:
                del self._behind[opaque]

    def await_more(self, opaque: int) -> None:
        """Request ``opaque`` was answered and says another answer follows (a followed
        FERRY_FETCH): keep that one for ``receive`` too."""
        if self._socket is not None:
            self._awaited.add(opaque)

    def answered(self, opaque: int) -> bool:
        """Whether request ``opaque``'s answer is here (``read_buffered`` and ``read_frame``
        keep it)."""
        return opaque in self._answers

    def awaits(self, opaque: int) -> bool:
        """Whether request ``opaque`` still has an answer to ``receive``: False once the
        connection it went on failed, or it was forgotten."""
        return opaque in self._awaited

    def fileno(self) -> int:
        """The connection's socket, for ``select`` (-1 when it is closed)."""
        return self._socket.fileno() if self._socket is not None else -1

    def _failed(self, error: OSError | CodecError, timeout_s: float) -> FerryError:
        """A socket failure closes the connection and is raised as the SDK's transport
        error: DEADLINE_EXCEEDED for the call's own timeout, UNAVAILABLE otherwise, the
        kernel ending the connection included (``detect_dead_peer``: ETIMEDOUT, which
        Python raises as a TimeoutError too), so that the SDK avoids that node where a
        deadline would have sent the next request down the same cut path. Each caller's
        ``try`` catches what reaches here: a context manager cost four Python calls a
        request, and a tailing reader makes two requests a message."""
        self.close()
        if isinstance(error, TimeoutError) and error.errno != errno.ETIMEDOUT:
            return deadline(self.address, timeout_s)
        return unavailable(self.address, error)

    def forget(self, opaque: int) -> None:
        """Nobody will ``receive`` request ``opaque``: its answer is skipped when it
        comes (a dropped prefetch)."""
        self._awaited.discard(opaque)
        self._answers.pop(opaque, None)
        self._behind.pop(opaque, None)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._awaited.clear()
        self._answers.clear()
        self._behind.clear()


def _tls_pending(sock: socket.socket) -> bool:
    """Bytes TLS has decrypted and holds: ``select`` does not see them."""
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


def wait_readable(channels: list[RemotingChannel], timeout_s: float) -> list[RemotingChannel]:
    """The ``channels`` with bytes to read, once one has some or ``timeout_s`` passed
    (call ``read_buffered`` on each first: what is buffered already is not seen here). A
    channel whose socket closed meanwhile is skipped."""
    by_socket = {channel.fileno(): channel for channel in channels}
    by_socket.pop(-1, None)
    if not by_socket:
        return []
    readable, _, _ = select.select(list(by_socket), [], [], max(0.0, timeout_s))
    return [by_socket[fd] for fd in readable]


class _Protocol(asyncio.Protocol):
    def __init__(self, channel: AsyncRemotingChannel) -> None:
        self.channel = channel
        self.splitter = FrameSplitter()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            detect_dead_peer(sock)

    def data_received(self, data: bytes) -> None:
        pending = self.channel.pending
        try:
            for frame in self.splitter.feed(data):
                answer = decode(frame)
                future = pending.pop(answer.opaque, None)
                if future is not None and not future.done() and answer.is_response:
                    future.set_result(answer)
        except CodecError as error:
            self.channel.lost(self, unavailable(self.channel.address, error))
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc) -> None:
        self.channel.lost(self, unavailable(self.channel.address, exc or "connection closed"))


class AsyncRemotingChannel:
    """Requests to one node's remoting port from one event loop, answered by opaque."""

    def __init__(
        self, address: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.security = security or PLAIN
        self._tls = self.security.ssl_context()
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._opaques = itertools.count(1)

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
        loop = asyncio.get_running_loop()
        host, port = _split(self.address)
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Protocol(self),
                    host,
                    port,
                    ssl=self._tls,
                    server_hostname=host if self._tls is not None else None,
                ),
                self.timeout_s,
            )
        except (TimeoutError, OSError) as error:
            raise unavailable(self.address, error or "connect timed out", unsent=True) from None
        self._protocol = protocol
        return protocol

    def lost(self, protocol: _Protocol, error: FerryError) -> None:
        if self._protocol is protocol:
            self._protocol = None
            pending, self.pending = self.pending, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(error)

    async def call(
        self,
        code: int,
        body: bytes = b"",
        fields: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> RemotingCommand:
        timeout_s = timeout_s or self.timeout_s
        protocol = await self._connected()
        opaque = next(self._opaques)
        future = asyncio.get_running_loop().create_future()
        self.pending[opaque] = future
        assert protocol.transport is not None
        fields = with_client_timeout(code, fields, timeout_s)
        protocol.transport.write(request_frame(code, opaque, fields, body, self.security))
        try:
            answer = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise deadline(self.address, timeout_s) from None
        finally:
            self.pending.pop(opaque, None)
        return answer_body(self.address, answer)

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
