"""What the node has to send on one Telemetry stream, bounded.

Three things wait here: the answers to the client's settings commands, orphan-transaction
checks for producers (``node/services/transactions.py``), and a lite consumer's notices that
an Exclusive group gave one of its lite topics to another client (``node/services/lite.py``).
A client that writes commands and never reads its answers would otherwise grow the queue
without end. At ``OUTBOX_MAX``:

- a settings answer that does not fit ends the stream (RESOURCE_EXHAUSTED): the client is
  not reading, and answering some commands but not others would leave it with settings it
  cannot tell apart;
- an orphan check that does not fit is not queued (``offer`` says False) and goes to another
  producer of the topic: the check is counted either way, and the next one comes after the
  check interval, as when no producer is connected;
- a notice that does not fit is dropped: the client keeps the lite topic in its set, and
  its next whole-set sync shares it again, as when it never heard the notice.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio

from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc

OUTBOX_MAX = 64  # official clients send one settings command per stream, then a few


class TelemetryOutbox:
    def __init__(self, limit: int = OUTBOX_MAX) -> None:
        self.limit = limit
        self._queue: asyncio.Queue[rpc.TelemetryCommand | None] = asyncio.Queue(limit + 1)
        self._closed = False  # the extra slot is for the end mark, so closing never fails

    def offer(self, command: rpc.TelemetryCommand) -> bool:
        """Queue ``command`` unless the outbox is full or closed."""
        if self._closed or self._queue.qsize() >= self.limit:
            return False
        self._queue.put_nowait(command)
        return True

    def notify_unsubscribe_lite(self, lite_topic: str) -> bool:
        """Tell a lite consumer it no longer subscribes to ``lite_topic``."""
        return self.offer(
            rpc.TelemetryCommand(
                notify_unsubscribe_lite_command=rpc.NotifyUnsubscribeLiteCommand(
                    lite_topic=lite_topic
                )
            )
        )

    def close(self) -> None:
        """Nothing more will be offered: ``next`` answers None once the rest is taken."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    @property
    def waiting(self) -> int:
        """Commands offered and not taken yet."""
        return max(0, self._queue.qsize() - self._closed)  # the end mark is not one

    async def next(self) -> rpc.TelemetryCommand | None:
        return await self._queue.get()
