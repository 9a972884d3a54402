"""CommitLog: every message of a node, appended in one sequence of segment files.

Invariants: records are contiguous from ``min_offset`` to ``write_offset``; each record
starts with TOTALSIZE and a magic code and its PHYSICALOFFSET field equals its position;
a record never spans two segments — a blank record fills the end of a segment instead, and
every segment keeps at least ``BLANK_MIN_SIZE`` bytes for it. Queue offsets in records of
one (topic, queue) are consecutive.

Thread-safety: ``append`` and ``truncate_to`` are called with the store's put lock held;
readers (``read``, ``read_bytes``) are lock-free and read only below ``write_offset``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

from crc32c import crc32c

from ferrymq.codec import commitlog_record as record
from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.errors import CorruptRecordError, InvalidMessageError
from ferrymq.codec.produce_records import PRODUCE_HEAD_SIZE, PRODUCE_SPAN
from ferrymq.codec.properties import (
    KEY_SEPARATOR,
    PROPERTIES_MAX_BYTES,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
)
from store import _speedups as speedups
from store.consume_queue import BLANK_SIZE as QUEUE_BLANK_SIZE
from store.consume_queue import ENTRY as QUEUE_ENTRY
from store.dispatch_request import DispatchPlan, DispatchRequest, QueueRun
from store.errors import DiskFullError
from store.hashing import index_key_hash, tag_hash_code
from store.index_file import INDEX_KEY
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.message import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMER_TOPIC,
    Message,
)
from store.results import AppendedMessage


@dataclass(slots=True)
class PreparedMessage:
    """A validated message with its variable parts already encoded (done outside the lock)."""

    message: Message
    tail: bytes  # TOPICLENGTH + TOPIC + PROPERTIESLENGTH + PROPERTIES
    size: int
    tag_code: int  # validates the tag (or a timer record's delivery time) before the lock
    count: ClassVar[int] = 1  # records, as ``PreparedRun.count``


@dataclass(slots=True)
class PreparedRun:
    """The records of one Produce request to one queue, every one checked
    (``node.message_rules.produce_spans``) and appended straight from the request's bytes:
    ``encode_batch`` lays them out from their spans, with no ``Message`` or
    ``PreparedMessage`` per record. Each is a plain message (flag, system flag and
    reconsume times 0) with the run's topic, queue and born host."""

    topic: str
    topic_prefix: bytes  # TOPICLENGTH + TOPIC
    queue_id: int
    born_host: bytes
    # The request's produce records (ferrymq/codec/produce_records.py): bytes, or a view
    # of the request's frame.
    records: bytes | memoryview
    spans: bytes  # PRODUCE_SPAN of each record, in order
    count: int
    size: int  # the bytes its records take in the log

    @classmethod
    def of(
        cls,
        topic: str,
        topic_prefix: bytes,
        queue_id: int,
        born_host: bytes,
        records: bytes | memoryview,
        spans: bytes,
    ) -> PreparedRun:
        """The run of ``records``, whose spans fill them exactly (``produce_spans``)."""
        count = len(spans) // PRODUCE_SPAN.size
        assert len(spans) == count * PRODUCE_SPAN.size, "spans are whole"
        # Each record trades its produce head for a record header, the topic and the
        # properties' length: the records fill ``records`` exactly.
        size = len(records) + count * (
            record.HEADER_SIZE + len(topic_prefix) + 2 - PRODUCE_HEAD_SIZE
        )
        return cls(topic, topic_prefix, queue_id, born_host, records, spans, count, size)


# What the put path appends: prepared messages, and runs of produce records.
Prepared = PreparedMessage | PreparedRun

# ``CommitLog.log_writer``: (batch, position, store timestamp, store host, queue offsets,
# the active segment's fd, the position in its file) -> (bytes written, the batch's
# ``AppendedMessage``s), laid out as ``encode_batch`` lays them and written at the log's end,
# or ``DiskFullError`` with nothing of it left.
LogWriter = Callable[
    [list[Prepared], int, int, bytes, dict[tuple[str, int], int], int, int],
    tuple[int, list[AppendedMessage]],
]


def prepare(message: Message, topic_prefix: bytes, properties: bytes) -> PreparedMessage:
    """Encode what varies per message; ``topic_prefix`` is TOPICLENGTH + TOPIC, which a
    batch computes once per topic. Runs once per message on every put: kept lean."""
    props = message.properties
    tail = topic_prefix + len(properties).to_bytes(2, "big") + properties
    if message.topic == TIMER_TOPIC:
        tag_code = timer_delivery_ms(props)
    else:
        tags = props.get(PROPERTY_TAGS)
        tag_code = tag_hash_code(tags) if tags else 0
    size = record.HEADER_SIZE + len(message.body) + len(tail)
    return PreparedMessage(message, tail, size, tag_code)


def queue_tag_code(topic: str, properties: dict[str, str]) -> int:
    """The consume-queue tag slot: the tag's hash, or a timer record's delivery time."""
    if topic == TIMER_TOPIC:
        return timer_delivery_ms(properties)
    tags = properties.get(PROPERTY_TAGS)
    return tag_hash_code(tags) if tags else 0


def timer_delivery_ms(properties: dict[str, str]) -> int:
    raw = properties.get(PROPERTY_DELIVERY_TIME_MS, "")
    if not raw.isdigit() or int(raw) >= 1 << 63:
        raise InvalidMessageError(
            "DELIVERY_TIME_INVALID", f"a timer record needs {PROPERTY_DELIVERY_TIME_MS} in ms"
        )
    return int(raw)


def topic_prefix_of(topic: bytes) -> bytes:
    return len(topic).to_bytes(1, "big") + topic


def takes_queue_offset(sys_flag: int) -> bool:
    """Prepared and rolled-back transactional records get no consume-queue entry."""
    kind = sys_flag & SYSFLAG_TRANSACTION_MASK
    return kind not in (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


# The PREPARED bit is set exactly for PREPARED (0x4) and ROLLBACK (0xC): hot paths test it.
NO_QUEUE_OFFSET_BIT = SYSFLAG_TRANSACTION_PREPARED
assert all(
    takes_queue_offset(kind) == (not kind & NO_QUEUE_OFFSET_BIT) for kind in (0x0, 0x4, 0x8, 0xC)
)


def index_keys_of(properties: dict[str, str]) -> tuple[str, ...]:
    """KEYS (split, empty ones dropped) then UNIQ_KEY: what the index takes for a record."""
    keys_raw = properties.get(PROPERTY_KEYS)
    unique = properties.get(PROPERTY_UNIQ_KEY)
    if not keys_raw:
        return (unique,) if unique else ()
    parts = keys_raw.split(KEY_SEPARATOR)
    if "" in parts:  # rare: filtering every time would cost the put path a comprehension
        parts = [k for k in parts if k]
    if unique:
        parts.append(unique)
    return tuple(parts)


def dispatch_request_at(buf, position: int) -> DispatchRequest:
    """The dispatch request of the valid record at ``position`` of ``buf``, read straight
    from the header and the properties: replay (a slave's replicated chunks, recovery)
    never needs the body, so it is never copied. Framing that does not hold raises
    ``CorruptRecordError`` (the C twin's checks, one for one), never an ``assert``."""
    if position < 0 or len(buf) - position < record.HEADER_SIZE:
        raise CorruptRecordError(f"no record at {position}")
    (
        size,
        magic,
        _,
        queue_id,
        _,
        queue_offset,
        physical_offset,
        sys_flag,
        _,
        _,
        store_timestamp_ms,
        _,
        _,
        _,
        body_length,
    ) = record.HEADER.unpack_from(buf, position)
    if magic != record.MESSAGE_MAGIC:
        raise CorruptRecordError(f"no message record at {position}")
    end = position + size
    topic_at = position + record.HEADER_SIZE + body_length
    if size <= 0 or body_length < 0 or end > len(buf) or topic_at + 1 > end:
        raise CorruptRecordError(f"record lengths disagree at {position}")
    properties_at = topic_at + 1 + buf[topic_at]
    if (
        properties_at + 2 > end
        or properties_at + 2 + ((buf[properties_at] << 8) | buf[properties_at + 1]) != end
    ):
        raise CorruptRecordError(f"record lengths disagree at {position}")
    topic = buf[topic_at + 1 : properties_at].decode()
    properties = decode_properties(buf[properties_at + 2 : end])
    return DispatchRequest(
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        size,
        queue_tag_code(topic, properties),  # as at append: the record passed its check
        store_timestamp_ms,
        sys_flag,
        index_keys_of(properties),
        properties,
    )


def encode_batch_in_python(
    batch: list[Prepared],
    position: int,
    store_timestamp_ms: int,
    host: bytes,
    offsets: dict[tuple[str, int], int],
    appended_type: type = AppendedMessage,
) -> tuple[bytes, list[AppendedMessage]]:
    """What ``encode_batch`` (C, store/_speedups.c) does: the records of ``batch`` laid out
    from ``position``, each taking the next queue offset of its queue from ``offsets``
    (unless its transaction state takes none), and where each went (``appended_type``
    of physical offset, queue offset, size and ``host``). A ``PreparedRun`` lays out its
    records as the ``PreparedMessage`` of each would."""
    appended: list[AppendedMessage] = []
    parts: list[bytes] = []
    start = position
    for prepared in _each_prepared(batch):
        message = prepared.message
        body = message.body
        if not message.sys_flag & NO_QUEUE_OFFSET_BIT:
            key = (message.topic, message.queue_id)
            queue_offset = offsets.get(key, 0)
            offsets[key] = queue_offset + 1
        else:
            queue_offset = 0
        parts.append(
            record.HEADER.pack(
                prepared.size,
                record.MESSAGE_MAGIC,
                crc32c(body),
                message.queue_id,
                message.flag,
                queue_offset,
                position,
                message.sys_flag,
                message.born_timestamp_ms,
                message.born_host,
                store_timestamp_ms,
                host,
                message.reconsume_times,
                message.prepared_transaction_offset,
                len(body),
            )
        )
        parts.append(body)
        parts.append(prepared.tail)
        appended.append(appended_type(position, queue_offset, prepared.size, host))
        position += prepared.size
    data = b"".join(parts)
    assert len(data) == position - start, "encoded sizes disagree with the layout"
    return data, appended


def _each_prepared(batch: list[Prepared]) -> Iterator[PreparedMessage]:
    """``batch`` with each run read out as the ``PreparedMessage`` of each of its records."""
    for item in batch:
        if type(item) is not PreparedRun:
            yield item
            continue
        records = bytes(item.records)  # a view of a request's frame, or bytes (no copy)
        for body_at, body_length, properties_length, born_ms in PRODUCE_SPAN.iter_unpack(
            item.spans
        ):
            properties_at = body_at + body_length
            raw = records[properties_at : properties_at + properties_length]
            body = records[body_at:properties_at]
            assert len(raw) == properties_length and len(body) == body_length, "span in records"
            message = Message(item.topic, body, item.queue_id, {}, 0, 0, born_ms, item.born_host)
            yield prepare(message, item.topic_prefix, raw)


# The per-record work of prepare (encoded properties) and dispatch, in C: ``CODEC.prepare``
# has ``MessageStore.prepare_in_python`` as its twin, ``CODEC.dispatch_plan``
# ``dispatch_plan_in_python`` (the C decodes a record whole, as ``dispatch_request_at``,
# only where a listener wants it or its text is not ASCII).
CODEC = speedups.RecordCodec(
    prepared_type=PreparedMessage,
    request_type=DispatchRequest,
    tags=PROPERTY_TAGS,
    keys=PROPERTY_KEYS,
    uniq_key=PROPERTY_UNIQ_KEY,
    timer_topic=TIMER_TOPIC,
    timer_tag_code=queue_tag_code,
    corrupt_error=CorruptRecordError,
    properties_max=PROPERTIES_MAX_BYTES,
)
MAX_RUNS = 64  # queues one dispatch plan writes to (a record of a 65th starts the next plan)
MAX_WANTED = 8  # wanted topics, and wanted property names, a plan compares records with


def dispatch_plan_in_python(
    buf,
    position: int,
    limit: int,
    max_count: int,
    wanted_topics: tuple[str, ...],
    wanted_properties: tuple[str, ...],
    key_hash: Callable[[bytes], int] | None = None,
) -> tuple[list[QueueRun], bytes, list[DispatchRequest], int, bool, int]:
    """What ``CODEC.dispatch_plan`` (C) does: read up to ``max_count`` records of ``buf``
    from ``position``, stopping at ``limit``, at a blank record, or before a record whose
    queue offset does not follow its queue's run (or that would open run ``MAX_RUNS`` +
    1); return (runs, index keys, wanted requests, where it stopped, whether a blank
    record stopped it, records read). A run's entries are packed as the consume queue
    stores them; the index keys are an ``INDEX_KEY`` row per key of each record, with the
    key's hash (``key_hash``, default ``index_key_hash``, of ``topic#key``, modulo 2**32);
    a record is wanted when its topic is in ``wanted_topics`` or it has a property named
    in ``wanted_properties``."""
    if position < 0:
        raise ValueError("a negative position")
    hash_of = key_hash or index_key_hash
    limit = min(limit, len(buf))
    runs: dict[tuple[str, int], list] = {}
    keys = bytearray()
    wanted: list[DispatchRequest] = []
    count, blank = 0, False
    while position < limit and count < max_count:
        if limit - position < 8:
            raise CorruptRecordError(f"no record at {position}")
        size, magic = record.SIZE_AND_MAGIC.unpack_from(buf, position)
        if magic == record.BLANK_MAGIC:
            blank = True
            break
        if magic != record.MESSAGE_MAGIC or size <= 0:
            raise CorruptRecordError(f"no record at {position}")
        request = dispatch_request_at(buf, position)
        run = None
        if not request.sys_flag & NO_QUEUE_OFFSET_BIT:
            run = runs.get((request.topic, request.queue_id))
            if run is None and len(runs) == MAX_RUNS:
                break
            if run is not None and run[2] + len(run[3]) // QUEUE_ENTRY.size != request.queue_offset:
                break
            if run is None:
                run = [request.topic, request.queue_id, request.queue_offset, bytearray()]
                runs[(request.topic, request.queue_id)] = run
            run[3] += QUEUE_ENTRY.pack(request.physical_offset, request.size, request.tag_code)
        prefix = request.topic + "#"
        for key in request.keys:
            keys += INDEX_KEY.pack(
                request.physical_offset,
                request.size,
                request.store_timestamp_ms,
                hash_of((prefix + key).encode()) & 0xFFFFFFFF,
            )
        if request.topic in wanted_topics or any(
            name in request.properties for name in wanted_properties
        ):
            wanted.append(request)
        position += size
        count += 1
    queue_runs = [
        (topic, queue_id, first, bytes(packed)) for topic, queue_id, first, packed in runs.values()
    ]
    return queue_runs, bytes(keys), wanted, position, blank, count


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Where a validating scan stopped and why (``corruption`` is None at a clean end)."""

    end_offset: int
    records: int
    corruption: str | None = None
    corrupt_offset: int | None = None


class CommitLog:
    def __init__(
        self,
        directory: str,
        segment_bytes: int,
        store_host: bytes,
        *,
        preallocate: bool,
        warm: bool = False,
        cache_bytes: int = 0,
    ) -> None:
        self.segments = MappedFileQueue(
            directory, segment_bytes, preallocate=preallocate, warm=warm, cache_bytes=cache_bytes
        )
        self.segment_bytes = segment_bytes
        self.store_host = store_host
        # Next queue offset per (topic, queue id): rebuilt from consume queues on recovery.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        # Writes a batch that fits the active segment in place of ``encode_batch`` and
        # ``MappedFile.append_at`` (``LogWriter``): the replication master's, which sends
        # the records to its slaves in the same native call (ha/master.py). None: the store's.
        self.log_writer: LogWriter | None = None

    # ---- positions -----------------------------------------------------------------
    @property
    def write_offset(self) -> int:
        return self.segments.write_offset

    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.segments.flushed_offset

    def load(self) -> None:
        self.segments.load()

    # ---- appending -----------------------------------------------------------------
    def append(self, batch: list[Prepared], store_timestamp_ms: int) -> list[AppendedMessage]:
        """Append ``batch`` atomically: either every record is written (and the write
        offset moves past them) or, on ``DiskFullError``, none is visible.

        The caller holds the put lock and guarantees the batch fits one segment."""
        position = self.write_offset
        segment = self.segments.file_for_write(position)
        total = sum(p.size for p in batch)
        assert total + record.BLANK_MIN_SIZE <= self.segment_bytes, "batch larger than a segment"
        roll_at = None
        room = segment.end_offset - position
        # A batch is one unit: it rolls whole to the next segment when it does not fit.
        if total + record.BLANK_MIN_SIZE > room:
            roll_at = position
            self.segments.file_for_write(segment.end_offset)  # DiskFullError before writing
            position = segment.end_offset
        if roll_at is None and self.log_writer is not None:
            return self._append_through(
                self.log_writer, batch, segment, position, store_timestamp_ms
            )
        data, appended = speedups.encode_batch(
            batch,
            position,
            store_timestamp_ms,
            self.store_host,
            self.queue_offsets,
            AppendedMessage,
            PreparedRun,
        )
        position += len(data)
        if roll_at is not None:
            segment.write_at(
                roll_at - segment.base_offset, record.encode_blank(segment.end_offset - roll_at)
            )
            segment.wrote_position = segment.size
            segment = self.segments.find(segment.end_offset)
            assert segment is not None
            # The blank ends the old segment whatever becomes of the batch.
            self.segments.write_offset = segment.base_offset
        start = appended[0].physical_offset
        try:
            segment.append_at(start - segment.base_offset, data)
        except DiskFullError:
            self._give_back_queue_offsets(batch)
            raise
        segment.wrote_position = position - segment.base_offset
        self.segments.write_offset = position
        return appended

    def _append_through(
        self,
        writer: LogWriter,
        batch: list[Prepared],
        segment: MappedFile,
        position: int,
        store_timestamp_ms: int,
    ) -> list[AppendedMessage]:
        """``append`` of a batch that fits ``segment``, written by ``writer``."""
        try:
            length, appended = writer(
                batch,
                position,
                store_timestamp_ms,
                self.store_host,
                self.queue_offsets,
                segment.writer_fd(),
                position - segment.base_offset,
            )
        except DiskFullError:
            self._give_back_queue_offsets(batch)
            raise
        position += length
        segment.wrote_position = position - segment.base_offset
        self.segments.write_offset = position
        return appended

    def _give_back_queue_offsets(self, batch: list[Prepared]) -> None:
        """Undo the queue offsets ``encode_batch`` took for a batch that was not written,
        so the next put of each queue takes the same offset: no hole in a queue."""
        for item in batch:
            if type(item) is PreparedRun:
                key, taken = (item.topic, item.queue_id), item.count
            elif item.message.sys_flag & NO_QUEUE_OFFSET_BIT:
                continue
            else:
                key, taken = (item.message.topic, item.message.queue_id), 1
            self.queue_offsets[key] -= taken

    # ---- reading -------------------------------------------------------------------
    def read(self, physical_offset: int) -> StoredMessage | None:
        """The message record at ``physical_offset``, or None when none is there."""
        if not self.min_offset <= physical_offset < self.write_offset:
            return None
        segment = self.segments.find(physical_offset)
        if segment is None:
            return None
        local = physical_offset - segment.base_offset
        size, magic = record.SIZE_AND_MAGIC.unpack_from(segment.map, local)
        if magic != record.MESSAGE_MAGIC or size <= 0 or local + size > segment.size:
            return None
        return record.decode(segment.map, local)

    def read_verified(self, physical_offset: int) -> StoredMessage | None:
        """The message record at ``physical_offset`` if the bytes there pass every check
        recovery makes (``check_at``: magic, lengths, body CRC, torn tail) and name this
        position as theirs (PHYSICALOFFSET); None otherwise. For positions a caller
        chose, which may be anywhere, such as inside another record's body: ``read``
        follows consume-queue entries and skips the CRC. Whether a record really starts
        here is for the consume queue to say (``MessageStore.look_message_by_offset``)."""
        write_offset = self.write_offset
        if not self.min_offset <= physical_offset < write_offset:
            return None
        segment = self.segments.find(physical_offset)
        if segment is None:
            return None
        local = physical_offset - segment.base_offset
        limit = min(segment.size, write_offset - segment.base_offset)
        check = record.check_at(segment.map, local, limit)
        if check.size == 0 or check.blank:
            return None
        try:
            stored = record.decode(segment.map, local)
        except CorruptRecordError:  # framed and CRC'd right, yet a topic that is not UTF-8
            return None
        return stored if stored.physical_offset == physical_offset else None

    def read_bytes(self, physical_offset: int, max_length: int) -> bytes:
        """Raw bytes from ``physical_offset`` up to the end of its segment or of the data."""
        segment = self.segments.find(physical_offset)
        if segment is None or physical_offset >= self.write_offset:
            return b""
        end = min(self.write_offset, segment.end_offset, physical_offset + max_length)
        return segment.read(physical_offset - segment.base_offset, end - physical_offset)

    def gather(
        self,
        entries: bytes,
        first_offset: int,
        limit: int | None,
        max_count: int,
        max_bytes: int | None,
        next_offset: int,
    ) -> tuple[list[bytes], int]:
        """The records consume-queue ``entries`` (from queue offset ``first_offset``)
        point at, as a read takes them, in one C pass (``gather_records``): blank entries
        passed over; stopping before a record that ends past ``limit`` or would take the
        bytes past ``max_bytes`` (unless none is taken yet), and after ``max_count``; a
        record not wholly in the log (retention took it meanwhile) skipped. Returns them
        and the queue offset after the last entry looked at (``next_offset`` when none
        was). The twin is ``gather_in_python``."""
        segments = self.segments
        return speedups.gather_records(
            entries,
            first_offset,
            segments.files,
            segments.file_size,
            segments.write_offset,
            -1 if limit is None else limit,
            max_count,
            -1 if max_bytes is None else max_bytes,
            next_offset,
        )

    def gather_in_python(
        self,
        entries: bytes,
        first_offset: int,
        limit: int | None,
        max_count: int,
        max_bytes: int | None,
        next_offset: int,
    ) -> tuple[list[bytes], int]:
        """What ``gather`` returns, entry by entry: the specification of its C."""
        if len(entries) % QUEUE_ENTRY.size:
            raise ValueError("consume-queue entries come whole, 20 bytes each")
        found: list[bytes] = []
        used = 0
        for i, (physical, size, _) in enumerate(QUEUE_ENTRY.iter_unpack(entries)):
            if size == QUEUE_BLANK_SIZE:
                continue
            if limit is not None and physical + size > limit:
                break
            if max_bytes is not None and found and used + size > max_bytes:
                break
            next_offset = first_offset + i + 1
            data = self.read_bytes(physical, size)
            if len(data) != size:
                continue  # removed by retention while we read
            found.append(data)
            used += size
            if len(found) >= max_count:
                break
        return found, next_offset

    def read_records(self, physical_offset: int, max_length: int) -> bytes:
        """Whole records from ``physical_offset`` (a record boundary): as many as fit in
        ``max_length`` (at least one), never past the end of the segment or of the data.
        What a master streams to its slaves, so that a slave only ever appends whole
        records and its log stays a prefix of the master's at every step."""
        segment = self.segments.find(physical_offset)
        write_offset = self.write_offset
        if segment is None or physical_offset >= write_offset:
            return b""
        end = min(write_offset, segment.end_offset, physical_offset + max(max_length, 1))
        chunk = segment.read(physical_offset - segment.base_offset, end - physical_offset)
        if end in (write_offset, segment.end_offset):
            # The write offset and a segment's end are record boundaries (a blank record
            # fills a segment's tail): no record needs finding, the usual case of a
            # slave that keeps up.
            return chunk
        cut = 0
        length = len(chunk)
        unpack = record.SIZE_AND_MAGIC.unpack_from
        while cut + 8 <= length:
            size, _ = unpack(chunk, cut)
            if size <= 0 or cut + size > length:
                break
            cut += size
        if cut == 0:
            # One record longer than ``max_length``: send it whole.
            (size, _) = unpack(self.read_bytes(physical_offset, 8), 0)
            chunk = self.read_bytes(physical_offset, size)
            assert len(chunk) == size, f"record at {physical_offset} runs past the data"
            return chunk
        return chunk[:cut]

    def append_raw(self, physical_offset: int, data: bytes | memoryview) -> None:
        """Append another log's records verbatim at ``physical_offset`` (the write offset).
        ``data`` is whole records within one segment, as ``read_records`` cuts them.
        The caller holds the put lock."""
        assert physical_offset == self.write_offset, (physical_offset, self.write_offset)
        segment = self.segments.file_for_write(physical_offset)  # DiskFullError first
        local = physical_offset - segment.base_offset
        assert local + len(data) <= segment.size, "replicated bytes cross a segment boundary"
        segment.append_at(local, data)
        segment.wrote_position = local + len(data)
        self.segments.write_offset = physical_offset + len(data)

    def raw_append_target(self) -> tuple[MappedFile, int] | None:
        """The segment that takes the next bytes appended verbatim and the position in it
        where the log ends, without rolling: None when the log ends at a segment's end (or
        has none), where ``append_raw`` rolls. The caller holds the put lock; it writes at
        most ``size - position`` bytes of whole records into the segment's file
        (``MappedFile.writer_fd``) and counts them with ``appended_raw``."""
        offset, last = self.write_offset, self.segments.last
        if last is None or not last.base_offset <= offset < last.end_offset:
            return None
        segment = self.segments.file_for_write(offset)  # preallocates the next file when due
        return segment, offset - segment.base_offset

    def appended_raw(self, segment: MappedFile, end: int) -> None:
        """Count the bytes written into ``segment`` (``raw_append_target``) up to the log
        offset ``end``."""
        assert segment is self.segments.last and self.write_offset <= end <= segment.end_offset
        segment.wrote_position = end - segment.base_offset
        self.segments.write_offset = end

    def store_timestamp_at(self, physical_offset: int) -> int | None:
        segment = self.segments.find(physical_offset)
        if segment is None:
            return None
        local = physical_offset - segment.base_offset
        return int.from_bytes(
            segment.map[
                local + record.OFFSET_STORE_TIMESTAMP : local + record.OFFSET_STORE_TIMESTAMP + 8
            ],
            "big",
        )

    # ---- recovery ------------------------------------------------------------------
    def scan(
        self,
        start_offset: int,
        on_record: Callable[[StoredMessage], None] | None = None,
        dispatch_from: int = 0,
    ) -> ScanResult:
        """Validate records from ``start_offset`` (a segment start or a known record
        boundary) until the data ends or a record is invalid. Records at or past
        ``dispatch_from`` are decoded and handed to ``on_record``."""
        position = start_offset
        records = 0
        while True:
            segment = self.segments.find(position)
            if segment is None:
                return ScanResult(position, records)
            local = position - segment.base_offset
            check = record.check_at(segment.map, local, segment.size)
            if check.blank:
                position = segment.end_offset
                continue
            if check.size == 0:
                if check.reason is None and not self._zero_after(segment, local):
                    return ScanResult(position, records, "garbage after the end of data", position)
                return ScanResult(
                    position, records, check.reason, position if check.reason else None
                )
            (physical,) = record.HEADER.unpack_from(segment.map, local)[6:7]
            if physical != position:
                return ScanResult(
                    position, records, f"PHYSICALOFFSET field {physical} != position", position
                )
            if on_record is not None and position >= dispatch_from:
                on_record(record.decode(segment.map, local))
            position += check.size
            records += 1

    @staticmethod
    def _zero_after(segment, local: int) -> bool:
        """True when the segment holds only zeros after ``local`` (a clean end)."""
        probe = min(segment.size, local + 64 * 1024)
        return segment.is_zero_at(local, probe - local)

    def iterate(self, start_offset: int, end_offset: int) -> Iterator[StoredMessage]:
        """Decoded records in ``[start_offset, end_offset)``; start must be a boundary."""
        position = start_offset
        while position < end_offset:
            segment = self.segments.find(position)
            if segment is None:
                return
            local = position - segment.base_offset
            size, magic = record.SIZE_AND_MAGIC.unpack_from(segment.map, local)
            if magic == record.BLANK_MAGIC:
                position = segment.end_offset
                continue
            if magic != record.MESSAGE_MAGIC or size <= 0:
                # Not an assert: stripped under ``python -O``, a zero size looped forever.
                raise CorruptRecordError(f"no record at {position} (magic 0x{magic:08X})")
            yield record.decode(segment.map, local)
            position += size

    def dispatch_plans(
        self,
        start_offset: int,
        end_offset: int,
        max_count: int,
        wanted_topics: tuple[str, ...] = (),
        wanted_properties: tuple[str, ...] = (),
        key_hash: Callable[[bytes], int] | None = None,
    ) -> Iterator[DispatchPlan]:
        """Plans (``CODEC.dispatch_plan``) covering ``[start_offset, end_offset)``, each
        of up to ``max_count`` records; start must be a boundary. A plan that ends at a
        blank record ends at its segment's end, so the next one starts on a record."""
        position = start_offset
        while position < end_offset:
            segment = self.segments.find(position)
            if segment is None:
                return
            base = segment.base_offset
            limit = min(end_offset, segment.end_offset)
            runs, keys, wanted, local, blank, count = CODEC.dispatch_plan(
                segment.map,
                position - base,
                limit - base,
                max_count,
                wanted_topics,
                wanted_properties,
                key_hash,
            )
            end = segment.end_offset if blank else base + local
            if end == position:
                return  # nothing at or past position within this segment's written part
            yield DispatchPlan(end, count, runs, keys, wanted)
            position = end

    def set_end(self, end_offset: int, flushed_from: int) -> None:
        """After recovery: data ends at ``end_offset`` and everything past it is discarded.
        Bytes from ``flushed_from`` may sit only in the page cache of the process that
        crashed, so they are forced to disk before anyone is told they are durable."""
        for segment in self.segments.files:
            if segment.end_offset <= end_offset:
                segment.wrote_position = segment.flushed_position = segment.size
        self.segments.truncate_to(end_offset)
        tail = self.segments.last
        if tail is not None and tail.base_offset <= end_offset < tail.end_offset:
            tail.wrote_position = end_offset - tail.base_offset
            tail.flushed_position = max(0, min(flushed_from, end_offset) - tail.base_offset)
        self.segments.write_offset = end_offset
        self.segments.flushed_offset = min(flushed_from, end_offset)
        for segment in self.segments.files:
            if segment.end_offset > flushed_from:
                segment.flushed_position = max(
                    0, min(segment.flushed_position, flushed_from - segment.base_offset)
                )
        self.segments.flush()

    def truncate_to(self, end_offset: int) -> None:
        """Discard everything from ``end_offset`` (a record boundary) on. What was not
        flushed below the cut is forced now; claiming it flushed lost it at a power loss
        (found by a random power-loss test)."""
        assert end_offset <= self.write_offset
        self.set_end(end_offset, min(self.segments.flushed_offset, end_offset))

    def delete_segments_before(self, predicate: Callable[[int], bool], limit: int) -> int:
        """Delete up to ``limit`` oldest segments for which ``predicate(index)`` holds."""
        files = self.segments.files
        count = 0
        while count < min(limit, len(files) - 1) and predicate(count):
            count += 1
        self.segments.delete_first(count)
        return count

    def flush(self, up_to: int | None = None) -> int:
        return self.segments.flush(up_to)

    def close(self) -> None:
        self.segments.close()
