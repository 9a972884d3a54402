"""Where each lite topic's messages are: the node's index of the LITE topics' messages by
lite topic (RocketMQ 5.5's light message queues, ``node/lite_names.py``).

A LITE message is stored once, in its topic's queue (chosen by its lite topic, so one lite
topic's messages are in one queue, in order) with its lite topic in ``__LITE_TOPIC``.
RocketMQ dispatches a second consume-queue entry into the lite topic's own queue; a file
per lite topic does not scale to 100,000 of them, so ferrymq keeps, in memory, each lite
topic's list of CommitLog offsets instead. A lite topic's *offset* is a message's CommitLog
offset: stable across restarts, retention and failover (every replica's log is the same
bytes), so POP cursors, receipt handles and a client's offset options all mean the same
message on every node.

The index is derived data: ``load`` rebuilds it from the LITE topics' queues (reading each
record's ``__LITE_TOPIC``), then it follows every dispatched record (a master's and a
slave's alike, so a promoted slave has it). An offset is added at most once and in order
(a record seen by both the rebuild and the dispatch listener is one entry); a slave that
cut its log's tail drops the entries past the cut when records are dispatched there again.
Offsets below the log's first (retention) are dropped as they are read.

Thread-safety: ``_on_dispatch`` runs on the store's dispatching thread, every reader on
the node's event loop; each change is one list or dict operation under the GIL, and
readers take each list once. Arrivals are handed to the loop (``on_arrival``).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from array import array
from collections.abc import Callable, Iterable

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.lite_names import lmq_name
from node.rpc_status import InvalidRequest
from store.dispatch_request import DispatchRequest

REBUILD_PAGE = 256
LITE_TOPICS_MAX = 1_000_000  # lite topics a node holds (RocketMQ: maxLmqConsumeQueueNum)


class LiteIndex:
    def __init__(self, store: ReplicatedStore, lite_topics_max: int = LITE_TOPICS_MAX) -> None:
        self.store = store
        self.lite_topics_max = lite_topics_max
        self._offsets: dict[str, array] = {}  # lmq name -> ascending CommitLog offsets
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.on_arrival: Callable[[str], None] = lambda lmq: None  # on the loop

    # ---- building ------------------------------------------------------------------
    def load(self, loop: asyncio.AbstractEventLoop, lite_topics: Iterable[str]) -> None:
        """Follow dispatched records, then rebuild from the queues of ``lite_topics``
        (the LITE topics this node serves)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.store.add_dispatch_listener(self._on_dispatch)
        for topic in lite_topics:
            for queue_id in self.store.queue_ids(topic):
                self._rebuild_queue(topic, queue_id)

    def _rebuild_queue(self, topic: str, queue_id: int) -> None:
        store = self.store
        offset = store.min_offset_in_queue(topic, queue_id)
        end = store.max_offset_in_queue(topic, queue_id)
        while offset < end:
            page = store.get_messages(topic, queue_id, offset, REBUILD_PAGE)
            for stored in page.messages:
                lite_topic = stored.properties.get(PROPERTY_LITE_TOPIC)
                if lite_topic:
                    self._add(lmq_name(topic, lite_topic), stored.physical_offset)
            if page.next_begin_offset <= offset:
                break
            offset = page.next_begin_offset

    def _on_dispatch(self, requests: list[DispatchRequest]) -> None:
        for request in requests:
            lite_topic = request.properties.get(PROPERTY_LITE_TOPIC)
            # A DLQ or retry copy keeps the property: only a topic's own message counts.
            if not lite_topic or request.topic.startswith("%"):
                continue
            lmq = lmq_name(request.topic, lite_topic)
            self._add(lmq, request.physical_offset, replacing_tail=True)
            if self._loop is None:
                continue
            if threading.get_ident() == self._loop_thread:
                self.on_arrival(lmq)
            else:
                self._loop.call_soon_threadsafe(self.on_arrival, lmq)

    def _add(self, lmq: str, offset: int, *, replacing_tail: bool = False) -> None:
        """Add ``offset`` once, in order. ``replacing_tail``: a dispatched record at an
        offset the list already passed follows a cut of the log's tail, so the entries
        from there on are gone."""
        offsets = self._offsets.get(lmq)
        if offsets is None:
            self._offsets[lmq] = array("q", (offset,))
            return
        if not offsets or offset > offsets[-1]:
            offsets.append(offset)
            return
        at = bisect.bisect_left(offsets, offset)
        if replacing_tail:
            del offsets[at:]
            offsets.append(offset)
        elif offsets[at] != offset:
            offsets.insert(at, offset)

    # ---- reading -------------------------------------------------------------------
    def offsets_from(self, lmq: str, offset: int, limit: int) -> list[int]:
        """Up to ``limit`` CommitLog offsets of ``lmq``'s messages at or after ``offset``."""
        offsets = self._live(lmq)
        if offsets is None:
            return []
        at = bisect.bisect_left(offsets, offset)
        return offsets[at : at + limit].tolist()

    def end(self, lmq: str) -> int:
        """Past the last message of ``lmq`` (0 for none): where a cursor waits for more."""
        offsets = self._offsets.get(lmq)
        return offsets[-1] + 1 if offsets else 0

    def has_after(self, lmq: str, offset: int) -> bool:
        offsets = self._offsets.get(lmq)
        return bool(offsets) and offsets[-1] >= offset

    def offsets(self, lmq: str) -> array:
        """Every offset of ``lmq``'s messages the log holds, ascending (do not change it)."""
        offsets = self._live(lmq)
        return offsets if offsets is not None else array("q")

    def nth_from_end(self, lmq: str, n: int) -> int:
        """The offset ``n`` messages before the end (the first message for a larger n)."""
        offsets = self._live(lmq)
        if not offsets:
            return 0
        return offsets[max(0, len(offsets) - n)] if n > 0 else offsets[-1] + 1

    def lite_queues_of(self, topic: str) -> list[str]:
        """The queue names of ``topic``'s lite topics, sorted (a scan of every lite topic
        the node holds: for admin calls, not the data path)."""
        prefix = lmq_name(topic, "")
        return sorted(lmq for lmq in list(self._offsets) if lmq.startswith(prefix))

    def count_below(self, lmq: str, offset: int) -> int:
        """How many of ``lmq``'s messages the log holds below CommitLog ``offset``."""
        offsets = self._live(lmq)
        return bisect.bisect_left(offsets, offset) if offsets else 0

    def exists(self, lmq: str) -> bool:
        return lmq in self._offsets

    @property
    def lite_topic_count(self) -> int:
        return len(self._offsets)

    def check_quota(self, topic: str, lite_topic: str) -> None:
        """Refuse a message that would make one lite topic more than the node holds
        (RocketMQ's words and code, LITE_TOPIC_QUOTA_EXCEEDED)."""
        if (
            len(self._offsets) >= self.lite_topics_max
            and lmq_name(topic, lite_topic) not in self._offsets
        ):
            raise InvalidRequest(
                pb.LITE_TOPIC_QUOTA_EXCEEDED,
                f"[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]lmq consume queue num exceeded: this node "
                f"holds {len(self._offsets)} lite topics, the limit ({self.lite_topics_max})",
            )

    def _live(self, lmq: str) -> array | None:
        """``lmq``'s offsets without those retention removed from the log."""
        offsets = self._offsets.get(lmq)
        if offsets:
            first = self.store.min_offset
            if offsets[0] < first:
                del offsets[: bisect.bisect_left(offsets, first)]
        return offsets
