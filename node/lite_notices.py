"""Notices to lite consumers that they lost a lite topic (an Exclusive group gave it to a
newer subscriber): RocketMQ 5.5's NotifyUnsubscribeLiteCommand, on the client's Telemetry
stream.

The master decides (it holds the subscriptions) but the client's stream may be on any
node of the group: the official clients open it to their access point, whichever node
that names first. So a notice is a record in ``%SYS%LITE_NOTICE`` (the client id and the
lite topic), appended through the replicated store like anything else the group must
hear, and every node, the master included, hands the notices it dispatches to the streams
it holds (``listen``). A notice older than ``FRESH_MS`` when dispatched (a node replaying
its log, a slave far behind) is dropped: by then the client's whole-set sync has shared the
lite topic again, as for a notice never heard. Without a store (a test's service) a
notice goes straight to the local stream.

Thread-safety: ``listen``, ``unlisten`` and ``send`` on the node's event loop; the
dispatch listener runs on the store's dispatching thread and hands each notice to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from ha.replicated_store import ReplicatedStore
from store.dispatch_request import DispatchBatch
from store.message import Message

log = logging.getLogger("ferrymq.lite_notices")

NOTICE_TOPIC = "%SYS%LITE_NOTICE"
FRESH_MS = 30_000  # a lite consumer's whole-set sync comes every 30 s

Notify = Callable[[str], bool]  # notify(lite_topic): queued on the client's stream


class LiteNotices:
    def __init__(self, store: ReplicatedStore | None = None) -> None:
        self.store = store
        self._streams: dict[str, Notify] = {}  # client id -> its Telemetry stream here
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver the notices this node dispatches (call once, on the loop)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        if self.store is not None:
            self.store.add_dispatch_listener(self._on_dispatch, topics=(NOTICE_TOPIC,))

    # ---- streams -------------------------------------------------------------------
    def listen(self, client_id: str, notify: Notify) -> None:
        """The lite consumer ``client_id``'s Telemetry stream is here (a newer stream
        replaces an older one)."""
        if client_id:
            self._streams[client_id] = notify

    def unlisten(self, client_id: str, notify: Notify) -> None:
        if self._streams.get(client_id) == notify:  # bound methods: equal, not identical
            del self._streams[client_id]

    # ---- sending ---------------------------------------------------------------------
    async def send(self, notices: list[tuple[str, str]]) -> None:
        """Tell each (client id, lite topic) wherever the client's stream is. A notice the
        store refuses is logged and lost (the client then shares the lite topic again at
        its next whole-set sync)."""
        if not notices:
            return
        if self.store is None:
            for client_id, lite_topic in notices:
                self._deliver(client_id, lite_topic)
            return
        records = [
            Message(NOTICE_TOPIC, b"", properties={"client": client_id, "lite_topic": name})
            for client_id, name in notices
        ]
        result = await self.store.put_messages_async(records)
        if not result.ok:
            log.warning("%d lite notices not stored: %s", len(records), result.status.name)

    def _on_dispatch(self, batch: DispatchBatch) -> None:
        """On every dispatched batch; its records are the notices (and records other
        listeners asked for), so it costs a comparison per such record."""
        for request in batch.records:
            if request.topic != NOTICE_TOPIC:
                continue
            if time.time_ns() // 1_000_000 - request.store_timestamp_ms > FRESH_MS:
                continue
            client_id = request.properties.get("client", "")
            lite_topic = request.properties.get("lite_topic", "")
            if self._loop is None or not client_id:
                continue
            if threading.get_ident() == self._loop_thread:
                self._deliver(client_id, lite_topic)
            else:
                self._loop.call_soon_threadsafe(self._deliver, client_id, lite_topic)

    def _deliver(self, client_id: str, lite_topic: str) -> None:
        notify = self._streams.get(client_id)
        if notify is not None:
            notify(lite_topic)
