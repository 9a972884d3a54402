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
- A request's ``body`` is empty unless its code is one of the dispatch's ``body_codes``
  (``BODY_CODES`` for the node without auth; with auth every body is kept, the signature
  covers it): the transport drops a body no handler reads before the request is held,
  so a long poll sent with a 16 MiB body holds none of it. A handler
  that starts reading a body adds its code there
  (``tests/node/test_remoting_bounds.py`` fails until it does).

Thread-safety: filled before the listener serves, read only afterwards (event loop).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Protocol

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode

# (request, the node.remoting.connection.RemotingConnection it came on) -> response or None.
# The connection is typed Any here: the connection module imports this one.
Handler = Callable[[RemotingCommand, Any], Awaitable[RemotingCommand | None]]


# The request codes whose handlers (or access rules) read the body; every other
# request is handed an empty body.
BODY_CODES = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
        RequestCode.CHECK_CLIENT_CONFIG,
        RequestCode.BATCH_ACK_MESSAGE,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        FerryRequestCode.FERRY_PRODUCE,
        FerryRequestCode.FERRY_FETCH,
    }
)


class Lane(Protocol):
    code: int

    def take(
        self,
        request: RemotingCommand,
        connection: Any,
        answerer: Callable[[RemotingCommand, RemotingCommand], Callable[[], None]],
    ) -> bool: ...


class Dispatch:
    def __init__(self, body_codes: Collection[int] | None = BODY_CODES) -> None:
        """``body_codes``: the codes whose requests keep their body; None: every code (the
        node with auth on, where the signature covers the body)."""
        self._handlers: dict[int, Handler] = {}
        # What takes a request of its ``code`` in the connection's callback before any
        # task (``node/remoting/produce_lane.py``, ``fetch_lane.py``), or declines it to
        # the handler: ``add_lane``.
        self.lanes: dict[int, Lane] = {}
        self._body_codes = (
            None if body_codes is None else frozenset(int(code) for code in body_codes)
        )

    def register(self, code: int, handler: Handler) -> None:
        """``handler`` answers ``code``; a code has one handler."""
        if code in self._handlers:
            raise ValueError(f"request code {code} has a handler already")
        self._handlers[int(code)] = handler

    def register_all(self, handlers: Iterable[tuple[int, Handler]]) -> None:
        for code, handler in handlers:
            self.register(code, handler)

    def add_lane(self, lane: Lane) -> None:
        """``lane`` is offered the requests of its code; a code has one lane, and a
        handler that answers what it declines."""
        code = int(lane.code)
        if code in self.lanes or code not in self._handlers:
            raise ValueError(f"request code {code} has a lane already, or no handler")
        self.lanes[code] = lane

    def handler_for(self, code: int) -> Handler | None:
        return self._handlers.get(code)

    def keeps_body(self, code: int) -> bool:
        """Whether a request of ``code`` is handed its body (else an empty one)."""
        return self._body_codes is None or code in self._body_codes

    @property
    def codes(self) -> list[int]:
        return sorted(self._handlers)
