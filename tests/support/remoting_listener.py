"""A remoting listener in-process, on its own thread and event loop (uvloop, the node's, or
the default loop), for tests of the remoting connection with their own handlers."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator

import uvloop

from node.remoting.connection import Observer, TransportLimits
from node.remoting.dispatch import Dispatch
from node.remoting.server import RemotingServer


@contextlib.contextmanager
def listening(
    dispatch: Dispatch,
    limits: TransportLimits,
    loop_kind: str,
    ssl_context: ssl.SSLContext | None = None,
    observe: Observer | None = None,
) -> Iterator[tuple[str, RemotingServer, asyncio.AbstractEventLoop]]:
    """The listener's address ("127.0.0.1:port", a free port), the server and its loop;
    closed, and its loop stopped, on the way out."""
    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    remoting = RemotingServer(dispatch, limits, observe=observe)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> int:
        port = await remoting.bind("127.0.0.1", 0, ssl_context)
        await remoting.serve()
        return port

    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        yield f"127.0.0.1:{port}", remoting, loop
    finally:
        asyncio.run_coroutine_threadsafe(remoting.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
