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
(a record seen by both the rebuild and the dispatch listener is one entry). A cut of the
log's tail (a slave's, ``store.add_cut_listener``) drops every lite topic's entries past
it at once, before anything is appended there again: the next record at such an offset
may be anything (a 30-minute sync-async-flush chaos run served a ``%SYS%POP`` record to a
lite consumer when entries past a cut were dropped only as LITE records came back there).
Readers take a message through ``message_at``, which also checks that the record at the
offset is that lite topic's. Offsets below the log's first (retention) are dropped as they
are read.

Expiry (``node/lite_expiry.py``): a lite topic idle past its topic's
``lite.topic.expiration`` is deleted by a marker record in ``%SYS%LITE_EXPIRY`` naming it
and ``upto``, the CommitLog offset of its newest message when it expired. Every node drops
that lite topic's offsets at or below ``upto`` when the marker is dispatched (the master's
append, a slave's replication), and ``load`` reads the retained markers before it rebuilds,
so it never adds them back; a message stored after the marker has a higher offset and
starts the lite topic afresh. A marker follows every message it names in the log, so
retention removes those messages no later than the marker: it needs no rolling forward.
While the master stores a marker, the offsets it names are already hidden from readers
(``hide``), so that no receive delivers them in between. A slave that cuts its log's tail
may cut a marker it applied (its master never had it): on promotion, before it serves
receives, ``mend_cut`` reads such a marker's lite topic's messages back in.

Thread-safety: ``_on_dispatch`` runs on the store's dispatching thread, every reader on
the node's event loop; each change is one list or dict operation under the GIL, and
readers take each list once. Arrivals are handed to the loop (``on_arrival``).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from array import array
from collections import deque
from collections.abc import Callable, Iterable

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.lite_names import lmq_name, parent_topic
from node.rpc_status import InvalidRequest
from store.dispatch_request import DispatchBatch
from store.message import Message

REBUILD_PAGE = 256
LITE_TOPICS_MAX = 1_000_000  # lite topics a node holds (RocketMQ: maxLmqConsumeQueueNum)
EXPIRY_TOPIC = "%SYS%LITE_EXPIRY"  # markers: properties "lmq" and "upto"
# Markers applied that a cut of the log's tail could still remove (``mend_cut``): a cut
# removes what the master had not replicated, far fewer than this many expiries.
RECENT_MARKERS = 65_536


def expiry_marker(lmq: str, upto: int) -> Message:
    """The record that deletes ``lmq``'s messages at or below CommitLog offset ``upto``."""
    return Message(EXPIRY_TOPIC, b"", properties={"lmq": lmq, "upto": str(upto)})


def _marker_fields(properties: dict[str, str]) -> tuple[str, int] | None:
    try:
        return properties["lmq"], int(properties["upto"])
    except (KeyError, ValueError):
        return None


class LiteIndex:
    def __init__(self, store: ReplicatedStore, lite_topics_max: int = LITE_TOPICS_MAX) -> None:
        self.store = store
        self.lite_topics_max = lite_topics_max
        self._offsets: dict[str, array] = {}  # lmq name -> ascending CommitLog offsets
        # While ``load`` rebuilds: lmq name -> the highest ``upto`` of its markers.
        self._floors: dict[str, int] | None = None
        self._hidden: dict[str, int] = {}  # lmq name -> upto of a marker being stored
        # (CommitLog offset of a marker, its lmq name, its upto), in log order.
        self._recent: deque[tuple[int, str, int]] = deque(maxlen=RECENT_MARKERS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # (lite topics that got messages, the log end of their batch), once per batch.
        self.on_arrival: Callable[[list[str], int], None] = lambda lmqs, end: None  # on the loop

    # ---- building ------------------------------------------------------------------
    def load(self, loop: asyncio.AbstractEventLoop, lite_topics: Iterable[str]) -> None:
        """Follow dispatched records, then rebuild from the queues of ``lite_topics``
        (the LITE topics this node serves)."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._floors = {}
        self.store.add_dispatch_listener(
            self._on_dispatch, topics=(EXPIRY_TOPIC,), properties=(PROPERTY_LITE_TOPIC,)
        )
        self.store.add_cut_listener(self._on_cut)
        self._read_markers()
        for topic in lite_topics:
            for queue_id in self.store.queue_ids(topic):
                self._rebuild_queue(topic, queue_id)
        self._floors = None

    def _read_markers(self) -> None:
        """The expiry markers the log holds, before the queues they apply to are read."""
        for stored in self.store.walk_queue(EXPIRY_TOPIC, 0, page=REBUILD_PAGE):
            self._expired(stored.properties, stored.physical_offset)

    def _rebuild_queue(self, topic: str, queue_id: int) -> None:
        floors = self._floors or {}
        for stored in self.store.walk_queue(topic, queue_id, page=REBUILD_PAGE):
            lite_topic = stored.properties.get(PROPERTY_LITE_TOPIC)
            if lite_topic:
                lmq = lmq_name(topic, lite_topic)
                if stored.physical_offset > floors.get(lmq, -1):
                    self._add(lmq, stored.physical_offset)

    def _on_dispatch(self, batch: DispatchBatch) -> None:
        arrived: dict[str, None] = {}
        for request in batch.records:
            if request.topic == EXPIRY_TOPIC:
                self._expired(request.properties, request.physical_offset)
                continue
            lite_topic = request.properties.get(PROPERTY_LITE_TOPIC)
            # A DLQ or retry copy keeps the property: only a topic's own message counts.
            if not lite_topic or request.topic.startswith("%"):
                continue
            lmq = lmq_name(request.topic, lite_topic)
            self._add(lmq, request.physical_offset)
            arrived[lmq] = None
        if not arrived or self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self.on_arrival(list(arrived), batch.end)
        else:
            self._loop.call_soon_threadsafe(self.on_arrival, list(arrived), batch.end)

    def _on_cut(self, end: int) -> None:
        """The log from ``end`` on was cut: every lite topic's offsets from there on go
        (new lists, never a change of one a reader may hold). Markers past ``end`` stay in
        ``_recent`` for ``mend_cut``."""
        for lmq, offsets in list(self._offsets.items()):
            if offsets and offsets[-1] >= end:
                kept = offsets[: bisect.bisect_left(offsets, end)]
                if kept:
                    self._offsets[lmq] = kept
                else:
                    del self._offsets[lmq]

    def _expired(self, properties: dict[str, str], at: int) -> None:
        """Apply the expiry marker stored at ``at``: drop its lite topic's offsets at or
        below ``upto`` (a new list, never a change of the one a reader may hold), and none
        of them is added by a rebuild under way."""
        fields = _marker_fields(properties)
        if fields is None:
            return
        lmq, upto = fields
        self._recent.append((at, lmq, upto))
        floors = self._floors
        if floors is not None:
            floors[lmq] = max(floors.get(lmq, -1), upto)
        offsets = self._offsets.get(lmq)
        if offsets is None:
            return
        rest = offsets[bisect.bisect_right(offsets, upto) :]
        if rest:
            self._offsets[lmq] = rest
        else:
            del self._offsets[lmq]

    def mend_cut(self) -> int:
        """Read back the messages of the lite topics whose markers a cut of the log's tail
        removed (a promoted slave's: its new master never had them); how many markers."""
        end = self.store.write_offset
        cut = [(lmq, upto) for at, lmq, upto in self._recent if at >= end]
        if not cut:
            return 0
        kept = [entry for entry in self._recent if entry[0] < end]
        self._recent = deque(kept, maxlen=RECENT_MARKERS)
        upto_of: dict[str, int] = {}
        for lmq, upto in cut:
            upto_of[lmq] = max(upto_of.get(lmq, -1), upto)
        for topic in {parent_topic(lmq) for lmq in upto_of}:
            for queue_id in self.store.queue_ids(topic):
                self._reread_queue(topic, queue_id, upto_of)
        return len(cut)

    def _reread_queue(self, topic: str, queue_id: int, upto_of: dict[str, int]) -> None:
        for stored in self.store.walk_queue(topic, queue_id, page=REBUILD_PAGE):
            lmq = lmq_name(topic, stored.properties.get(PROPERTY_LITE_TOPIC, ""))
            if stored.physical_offset <= upto_of.get(lmq, -1):
                self._add(lmq, stored.physical_offset)

    def hide(self, lmq: str, upto: int) -> None:
        """Readers no longer see ``lmq``'s offsets at or below ``upto``: its expiry marker
        is being stored (the master's, until ``unhide``)."""
        self._hidden[lmq] = upto

    def unhide(self, lmq: str) -> None:
        self._hidden.pop(lmq, None)

    def _add(self, lmq: str, offset: int) -> None:
        """Add ``offset`` once, in order."""
        offsets = self._offsets.get(lmq)
        if offsets is None:
            self._offsets[lmq] = array("q", (offset,))
            return
        if not offsets or offset > offsets[-1]:
            offsets.append(offset)
            return
        at = bisect.bisect_left(offsets, offset)
        if offsets[at] != offset:
            offsets.insert(at, offset)

    # ---- reading -------------------------------------------------------------------
    def message_at(self, lmq: str, offset: int) -> StoredMessage | None:
        """``lmq``'s message at CommitLog offset ``offset``; None when the log no longer
        holds it there (retention removed it, or a cut put another record there)."""
        stored = self.store.read_message(offset)
        if stored is None or not self.holds(lmq, stored):
            return None
        return stored

    @staticmethod
    def holds(lmq: str, stored: StoredMessage) -> bool:
        """Whether ``stored`` is one of ``lmq``'s messages (its topic's own, not a copy)."""
        lite_topic = stored.properties.get(PROPERTY_LITE_TOPIC)
        return (
            bool(lite_topic)
            and not stored.topic.startswith("%")
            and lmq_name(stored.topic, lite_topic) == lmq
        )

    def offsets_from(self, lmq: str, offset: int, limit: int) -> list[int]:
        """Up to ``limit`` CommitLog offsets of ``lmq``'s messages at or after ``offset``."""
        offsets = self._live(lmq)
        if offsets is None:
            return []
        at = bisect.bisect_left(offsets, offset)
        return offsets[at : at + limit].tolist()

    def end(self, lmq: str) -> int:
        """Past the last message of ``lmq`` (0 for none): where a cursor waits for more."""
        offsets = self._visible(lmq)
        return offsets[-1] + 1 if offsets else 0

    def has_after(self, lmq: str, offset: int) -> bool:
        offsets = self._visible(lmq)
        return bool(offsets) and offsets[-1] >= offset

    def newest(self) -> list[tuple[str, int]]:
        """(lmq name, offset of its newest message) of every lite topic the node holds (a
        scan: for the expiry check, not the data path)."""
        return [(lmq, offsets[-1]) for lmq, offsets in list(self._offsets.items()) if offsets]

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
        """``lmq``'s offsets without those retention removed from the log (nor those an
        expiry being stored hides)."""
        offsets = self._offsets.get(lmq)
        if offsets:
            first = self.store.min_offset
            if offsets[0] < first:
                del offsets[: bisect.bisect_left(offsets, first)]
        return self._visible(lmq, offsets)

    def _visible(self, lmq: str, offsets: array | None = None) -> array | None:
        if offsets is None:
            offsets = self._offsets.get(lmq)
        if self._hidden and offsets and lmq in self._hidden:
            return offsets[bisect.bisect_right(offsets, self._hidden[lmq]) :]
        return offsets
