"""A small HTTP/1.1 server on the node's event loop, for the console's browser traffic.

Why not a framework: the console answers a handful of GET and JSON requests from its own
page. What it must be is hard to abuse from a browser-facing port, and every bound here is
one line: a request head of at most ``HEAD_MAX_BYTES`` (``MAX_HEADERS`` lines), a body of at
most ``BODY_MAX_BYTES`` sent with ``Content-Length`` (no chunked bodies: 411 or 501), a head
that arrives within ``HEAD_TIMEOUT_S`` of the connection's last answer, a body within
``BODY_TIMEOUT_S``, at most ``MAX_CONNECTIONS`` connections (one more is closed at once) and
``MAX_REQUESTS_PER_CONNECTION`` requests on one. Keep-alive is HTTP/1.1's default; a
malformed request gets a 4xx answer and the connection is closed. Requests on a connection
are answered one after the other (no pipelining is needed by a browser).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

log = logging.getLogger("ferrymq.console")
HEAD_MAX_BYTES = 16 * 1024
MAX_HEADERS = 64
BODY_MAX_BYTES = 256 * 1024
HEAD_TIMEOUT_S = 15.0  # also how long an idle keep-alive connection stays open
BODY_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256
MAX_REQUESTS_PER_CONNECTION = 10_000
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE"})
# RFC 9110's token: what a method or a header name is made of.
TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    421: "Misdirected Request",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request: header names lowercased, each at most once (but ``cookie``)."""

    method: str
    path: str  # percent-decoded, without the query
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer_host: str
    tls: bool

    def header(self, name: str) -> str:
        return self.headers.get(name, "")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[Request], Awaitable[Response]]


class BadRequest(Exception):
    """The request cannot be parsed or breaks a bound: answered with ``status``, then the
    connection is closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers) of a request head ending in CRLF CRLF."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not TOKEN.match(parts[0]) or not parts[1]:
        raise BadRequest(400, "malformed request line")
    method, target, version = (p.decode("latin-1") for p in parts)
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505 if version.startswith("HTTP/") else 400, "HTTP/1.1 only")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} header lines")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        # A folded line (leading whitespace) or a name with spaces smuggles requests.
        if not colon or not TOKEN.match(name):
            raise BadRequest(400, "malformed header line")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        if any(ord(c) < 0x20 and c != "\t" for c in text):
            raise BadRequest(400, f"control character in header {key}")
        if key in headers:
            if key != "cookie":
                raise BadRequest(400, f"header {key} given twice")
            text = headers[key] + "; " + text
        headers[key] = text
    return method, target, version, headers


def body_length(method: str, headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise BadRequest(501, "Transfer-Encoding is not accepted: send Content-Length")
    text = headers.get("content-length")
    if text is None:
        if method in ("POST", "PUT"):
            raise BadRequest(411, "Content-Length is needed")
        return 0
    if not text.isdigit() or len(text) > 12:
        raise BadRequest(400, "malformed Content-Length")
    length = int(text)
    if length > BODY_MAX_BYTES:
        raise BadRequest(413, f"a body is at most {BODY_MAX_BYTES} bytes")
    return length


def split_target(target: str) -> tuple[str, dict[str, str]]:
    """The decoded path and the query's fields (the last of a repeated one)."""
    if not target.startswith("/"):
        raise BadRequest(400, "the request target must be a path")
    parts = urlsplit(target)
    try:
        query = dict(parse_qsl(parts.query, keep_blank_values=True, max_num_fields=64))
    except ValueError:
        raise BadRequest(400, "too many query fields") from None
    return unquote(parts.path), query


class HttpServer:
    """Serves ``handler`` on one listening socket; ``port`` is the bound one."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.server: asyncio.Server | None = None
        self.port = 0
        self.connections: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(
            self._connection,
            host,
            port,
            limit=HEAD_MAX_BYTES,
            ssl=self.ssl_context,
            reuse_address=True,
            ssl_handshake_timeout=HEAD_TIMEOUT_S if self.ssl_context else None,
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self.connections):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)
            self.server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        if len(self.connections) >= MAX_CONNECTIONS:
            writer.close()
            return
        self.connections.add(task)
        peer = writer.get_extra_info("peername") or ("", 0)
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                if not await self._one_request(reader, writer, str(peer[0])):
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a broken request must never harm the node
            log.exception("console connection failed")
        finally:
            self.connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_host: str
    ) -> bool:
        """Reads and answers one request; whether the connection may carry another."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.IncompleteReadError as cut:
            if cut.partial.strip():
                await self._answer(writer, Response(400, b"incomplete request\n"), False, False)
            return False
        except asyncio.LimitOverrunError:
            await self._answer(
                writer, Response(431, b"request head too large\n"), keep_alive=False, head=False
            )
            return False
        except TimeoutError:
            return False  # idle, or a head too slow: closed without a word
        try:
            method, target, version, headers = parse_head(head)
            length = body_length(method, headers)
            path, query = split_target(target)
        except BadRequest as bad:
            body = (bad.message + "\n").encode()
            await self._answer(writer, Response(bad.status, body), keep_alive=False, head=False)
            return False
        try:
            body = await asyncio.wait_for(reader.readexactly(length), BODY_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError):
            return False
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if method not in METHODS:
            response = Response(405, b"GET, HEAD, POST, PUT and DELETE only\n")
            keep_alive = False
        else:
            tls = self.ssl_context is not None
            request = Request(method, path, query, headers, body, peer_host, tls)
            try:
                response = await self.handler(request)
            except Exception:
                log.exception("console request %s %s failed", method, path)
                response = Response(500, b"internal error (see the node's log)\n")
        await self._answer(writer, response, keep_alive, head=method == "HEAD")
        return keep_alive

    async def _answer(
        self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool, head: bool
    ) -> None:
        if writer.is_closing():
            return  # the browser left (uvloop raises on a write to a closed link)
        reason = REASONS.get(response.status, "Unknown")
        lines = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            f"Connection: {'keep-alive' if keep_alive else 'close'}",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head:
            writer.write(response.body)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
