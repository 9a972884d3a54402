"""The timer service in-process: a real store, an event loop of its own and a clock the test
sets (``now``), for delayed messages parked, delivered and crashed deterministically. The
``timers`` fixture is in tests/conftest.py."""

from __future__ import annotations

import asyncio

from node.timer_service import TimerService
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore

T0 = 1_800_000_000_000
STORE = dict(
    commitlog_segment_bytes=8 * 1024 * 1024,
    consume_queue_entries_per_file=20_000,
    index_slot_count=1009,
    index_entry_count=100_000,
)


class Timers:
    def __init__(self, tmp_path, **store_options) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.store_options = STORE | store_options
        self.open()

    def open(self) -> None:
        config = StoreConfig(str(self.tmp_path / "data"), **self.store_options)
        self.store = MessageStore.open(config, clock_ms=lambda: self.now)
        self.service = TimerService(self.store, lambda topic: topic != "deleted", lambda: self.now)
        self.service.load(self.loop)

    def crash_and_reopen(self) -> None:
        self.store.close_abruptly_for_tests()
        self.open()

    def close(self) -> None:
        self.store.shutdown()
        self.loop.close()

    def park(
        self, topic: str, body: bytes, due_ms: int, queue_id: int = 0, message_id: str = ""
    ) -> None:
        message = Message.build(
            topic, body, queue_id=queue_id, tags="T", unique_key=message_id or None
        )
        result = self.store.put_messages([TimerService.park(message, due_ms)])
        assert result.ok, result
        self.loop.run_until_complete(asyncio.sleep(0))  # let dispatch hand the entry over

    def recall(self, due_ms: int, message_id: str) -> None:
        self.loop.run_until_complete(self.service.recall(due_ms, message_id))

    def deliver(self) -> bool:
        return self.loop.run_until_complete(self.service.deliver_due())

    def topic_bodies(self, topic: str, queue_id: int = 0) -> list[bytes]:
        result = self.store.get_messages(topic, queue_id, 0, 100_000)
        return [m.body for m in result.messages]
