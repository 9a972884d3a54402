"""``GET /metrics`` over HTTP/1.1, served on the node's event loop.

prometheus-client's own server answers from a thread, which would read the node's
loop-owned state (topic table, POP cursors, offsets) while the loop changes it. Serving on
the loop makes each scrape a consistent read. One request per connection, bounded: the
request head must arrive within ``READ_TIMEOUT_S`` and fit ``HEAD_MAX_BYTES``.

``/metrics?name[]=a&name[]=b`` answers only the samples of those names, as
prometheus-client's own handlers do: collectors that serve none of them are not read,
so a probe of one figure (a replication lag) costs a fraction of a whole scrape.

With a bearer token (``[metrics] bearer_token``) every request must carry
``Authorization: Bearer <token>`` (Prometheus: ``authorization`` in the scrape config);
any other gets ``401 Unauthorized`` and nothing else, whatever its path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import urllib.parse

from prometheus_client import CollectorRegistry, generate_latest

log = logging.getLogger("ferrymq.metrics")
# The classic text format, which every Prometheus version parses.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
READ_TIMEOUT_S = 10.0
HEAD_MAX_BYTES = 16 * 1024


class MetricsHttpServer:
    """Serves a registry at ``/metrics``; ``port`` is the bound one (config 0 = any)."""

    def __init__(self, registry: CollectorRegistry, bearer_token: str = "") -> None:
        self.registry = registry
        self._authorization = f"Bearer {bearer_token}".encode() if bearer_token else b""
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(
            self._serve, host, port, limit=HEAD_MAX_BYTES, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            method, path = (parts[0], parts[1]) if len(parts) == 3 else ("", "")
            extra = ""
            if not self._authorized(head):
                status, body, content_type = "401 Unauthorized", b"token needed\n", "text/plain"
                extra = 'WWW-Authenticate: Bearer realm="ferrymq metrics"\r\n'
            elif method not in ("GET", "HEAD"):
                status, body, content_type = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path.split("?", 1)[0] == "/metrics":
                status, body, content_type = "200 OK", self._exposition(path), CONTENT_TYPE
            else:
                status, body, content_type = "404 Not Found", b"see /metrics\n", "text/plain"
            if writer.is_closing():
                return  # the scraper left (uvloop raises on a write to a closed link)
            writer.write(
                (
                    f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode()
            )
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a slow, cut or oversized request gets no answer
        except ConnectionError:
            pass
        except Exception:  # a failed scrape must never harm the node
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _exposition(self, path: str) -> bytes:
        """The registry's text, or only the samples ``name[]`` names."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        names = query.get("name[]")
        if names:
            return generate_latest(self.registry.restricted_registry(names))
        return generate_latest(self.registry)

    def _authorized(self, head: bytes) -> bool:
        """Whether the request head carries the bearer token (always, without one)."""
        if not self._authorization:
            return True
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                return hmac.compare_digest(value.strip(), self._authorization)
        return False
