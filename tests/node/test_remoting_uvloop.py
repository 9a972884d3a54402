"""What the nodes' uvloop event loop asks of the code under it: loop objects are touched
only on the loop's thread, and writes to a closed link fail as connection errors."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvloop

from ha.wire import write_frame
from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutStatus


def message(i: int) -> Message:
    return Message.build("T", f"body-{i}".encode(), unique_key=f"U{i}")


def test_sync_flush_timers_are_cancelled_on_the_loops_thread(tmp_path):
    """The group-commit thread settles SYNC_FLUSH puts; it once cancelled their timeout
    timers itself, which uvloop does not survive (libuv timers are not thread-safe: a
    node crashed with SIGSEGV in the chaos suite)."""
    store = MessageStore.open(
        StoreConfig(
            str(tmp_path),
            commitlog_segment_bytes=1 << 20,
            max_message_body_bytes=64 * 1024,
            flush_mode=FlushMode.SYNC_FLUSH,
        )
    )
    cancelled_on: set[int] = set()

    async def scenario() -> list:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        class Recorded:
            def __init__(self, handle: asyncio.TimerHandle) -> None:
                self.handle = handle

            def cancel(self) -> None:
                cancelled_on.add(threading.get_ident())
                self.handle.cancel()

        loop.call_later = lambda *args: Recorded(call_later(*args))  # type: ignore[method-assign]
        requests = [[message(i * 10 + j) for j in range(3)] for i in range(50)]
        return await asyncio.gather(*(store.put_messages_async(r) for r in requests))

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            loop_thread = threading.get_ident()
            results = runner.run(scenario())
    finally:
        store.shutdown()
    assert all(result.status is PutStatus.OK for result in results)
    assert cancelled_on == {loop_thread}


def test_a_write_on_a_closed_replication_link_is_a_connection_error():
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        with pytest.raises(ConnectionError):
            write_frame(writer, b"frame")
        server.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
