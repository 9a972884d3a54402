"""Which handler answers which request code, on the remoting port.

The handler contract (docs/architecture.md, "Remoting")::

    async def handle(request: RemotingCommand, connection: RemotingConnection)
        -> RemotingCommand | None

- It runs as its own task on the node's event loop, so it may wait (a long poll) without
  holding up the next frame of its connection; it must not block the loop.
- It returns the response, made with ``request.reply(code, remark, ext_fields, body)``
  (the opaque and flag are set there), or None to answer nothing. The transport drops the
  response of a oneway request.
- A ``HeaderFieldError`` (``request.integer("queueId")`` and the like) is answered
  SYSTEM_ERROR with its message as the remark, as RocketMQ answers a header it cannot
  read; any other exception is answered SYSTEM_ERROR and logged (its traceback once per
  code and exception type).
- ``connection`` is who asked: its peer address, and ``connection.request(...)`` for a
  request of the node's own to that client (transaction checks, consumer-ids notices).

Thread-safety: filled before the listener serves, read only afterwards (event loop).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ferrymq.codec.remoting import RemotingCommand

# (request, the node.remoting.connection.RemotingConnection it came on) -> response or None.
# The connection is typed Any here: the connection module imports this one.
Handler = Callable[[RemotingCommand, Any], Awaitable[RemotingCommand | None]]


class Dispatch:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}

    def register(self, code: int, handler: Handler) -> None:
        """``handler`` answers ``code``; a code has one handler."""
        if code in self._handlers:
            raise ValueError(f"request code {code} has a handler already")
        self._handlers[int(code)] = handler

    def register_all(self, handlers: Iterable[tuple[int, Handler]]) -> None:
        for code, handler in handlers:
            self.register(code, handler)

    def handler_for(self, code: int) -> Handler | None:
        return self._handlers.get(code)

    @property
    def codes(self) -> list[int]:
        return sorted(self._handlers)
