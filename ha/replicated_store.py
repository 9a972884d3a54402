"""The store as the node's services use it: every write passes the replication rule,
every read is the store's own.

The rule (``ha/role.py`` decides, ``ha/master.py`` counts): a put is refused before
anything is written unless this node is a master holding its lease with enough in-sync
replicas; under SYNC replication it is OK only once the counted slaves acknowledged its
end, else FLUSH_SLAVE_TIMEOUT after ``ack_timeout_ms``. Every method a service calls is
written out here, so what the services may do with the store is this class's surface.

Thread-safety: owned by the node's event loop (reads may run on any thread, as the
store's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterator

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_UNIQ_KEY
from ha.master import OnReplicated
from ha.role import ReplicationRole
from store.commitlog import Prepared, PreparedMessage, PreparedRun
from store.config import StoreConfig
from store.consume_queue import ConsumeQueue
from store.dispatcher import DispatchListener
from store.message import Message
from store.message_store import MessageStore
from store.results import AppendedMessage, GetResult, LogFigures, PutResult, PutStatus


class ReplicatedStore:
    def __init__(self, store: MessageStore, role: ReplicationRole) -> None:
        self._store = store
        self._role = role
        self.config: StoreConfig = store.config

    @property
    def is_master(self) -> bool:
        """Whether this node takes writes as its group's master (``ReplicationRole``)."""
        return self._role.is_master

    # ---- writes: the replication rule ----------------------------------------------------
    async def put_messages_async(self, messages: list[Message]) -> PutResult:
        return await self._replicated(self._store.put_messages_async, messages)

    async def put_prepared_async(
        self, batch: list[Prepared], on_replicated: OnReplicated | None = None
    ) -> PutResult:
        """``on_replicated(result)``, when the put has to wait for the in-sync replicas,
        prepares what runs the moment they hold it (``ReplicationMaster.acknowledge``):
        the caller may answer from there, before this returns the same result."""
        return await self._replicated(self._store.put_prepared_async, batch, on_replicated)

    def appends_now(self) -> bool:
        """Whether ``put_prepared_now`` could append a put now (``MessageStore.appends_now``),
        for a caller to ask before it reads the put."""
        return self._store.appends_now()

    def put_prepared_now(self, batch: list[Prepared], answer: OnReplicated) -> bool:
        """``put_prepared_async`` for a caller with no task (the produce lane,
        ``node/remoting/produce_lane.py``): False, with nothing written, when the put must
        go the usual way (refused by the replication rule, or not appendable now:
        ``MessageStore.append_now``); else appended now and answered through ``answer``
        (``ReplicationMaster.acknowledge_now``)."""
        if self._role.write_refusal() is not None:
            return False
        result = self._store.append_now(batch)
        if result is None:
            return False
        timeout_s = self._role.options.ack_timeout_ms / 1000
        self._role.master.acknowledge_now(result, timeout_s, answer)
        return True

    async def _replicated(
        self,
        put: Callable[[list], Awaitable[PutResult]],
        batch: list,
        on_replicated: OnReplicated | None = None,
    ) -> PutResult:
        refusal = self._role.write_refusal()
        if refusal is not None:
            return PutResult(refusal[0], error=refusal[1])
        result = await put(batch)
        timeout_s = self._role.options.ack_timeout_ms / 1000
        return await self._role.master.acknowledge(result, timeout_s, on_replicated)

    async def put_again_async(self, messages: list[Message]) -> PutResult:
        """A put of ``messages`` that may have been stored already (a forwarded send whose
        master died before it answered, sent again to the next one): answered from the
        records this log holds under the same topic and message id, once they are as
        durable and replicated as a put's would be; appended as a put only when some are
        missing. So a resend is never stored twice."""
        found = [
            self._store.query_by_unique_key(m.topic, m.properties.get(PROPERTY_UNIQ_KEY, ""))
            for m in messages
        ]
        if not messages or any(record is None for record in found):
            return await self.put_messages_async(messages)
        refusal = self._role.write_refusal()
        if refusal is not None:
            return PutResult(refusal[0], error=refusal[1])
        appended = [
            AppendedMessage(r.physical_offset, r.queue_offset, r.size, r.store_host) for r in found
        ]
        result = PutResult(PutStatus.OK, appended)
        end = max(r.physical_offset + r.size for r in found)
        if not await asyncio.to_thread(self._store.on_disk, end):
            return PutResult(PutStatus.FLUSH_DISK_TIMEOUT, appended, "not on disk in time")
        return await self._role.master.acknowledge(result, self._role.options.ack_timeout_ms / 1000)

    # ---- reads: the store's ----------------------------------------------------------------
    def prepare(self, message: Message, encoded_properties: bytes | None = None) -> PreparedMessage:
        return self._store.prepare(message, encoded_properties)

    def prepare_run(
        self, topic: str, queue_id: int, born_host: bytes, records: bytes, spans: bytes
    ) -> PreparedRun:
        return self._store.prepare_run(topic, queue_id, born_host, records, spans)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags: Collection[str] | None = None,
    ) -> GetResult:
        return self._store.get_messages(topic, queue_id, offset, max_count, tags)

    def get_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tags: Collection[str] | None = None,
    ) -> GetResult:
        return self._store.get_records(topic, queue_id, offset, max_count, max_bytes, tags)

    def message_at(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage | None:
        return self._store.message_at(topic, queue_id, queue_offset)

    def walk_queue(
        self, topic: str, queue_id: int, start: int | None = None, page: int = 256
    ) -> Iterator[StoredMessage]:
        return self._store.walk_queue(topic, queue_id, start, page)

    def read_message(self, physical_offset: int) -> StoredMessage | None:
        return self._store.read_message(physical_offset)

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        return self._store.look_message_by_offset(physical_offset)

    @property
    def write_offset(self) -> int:
        return self._store.write_offset

    @property
    def min_offset(self) -> int:
        return self._store.min_offset

    def queue_ids(self, topic: str) -> list[int]:
        return self._store.queue_ids(topic)

    def read_cap(self) -> int | None:
        return self._store.read_cap()

    def log_figures(self) -> LogFigures:
        return self._store.log_figures()

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._store.min_offset_in_queue(topic, queue_id)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._store.max_offset_in_queue(topic, queue_id)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._store.offset_by_time(topic, queue_id, timestamp_ms)

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._store.consume_queue(topic, queue_id)

    def active_segment_base(self) -> int | None:
        return self._store.active_segment_base()

    def look_message_by_id(self, message_id: str) -> StoredMessage | None:
        return self._store.look_message_by_id(message_id)

    def query_by_key(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int = 1 << 62,
    ) -> list[StoredMessage]:
        return self._store.query_by_key(topic, key, max_count, begin_ms, end_ms)

    def query_by_unique_key(self, topic: str, unique_key: str) -> StoredMessage | None:
        return self._store.query_by_unique_key(topic, unique_key)

    def add_cut_listener(self, listener: Callable[[int], None]) -> None:
        self._store.add_cut_listener(listener)

    def add_dispatch_listener(
        self,
        listener: DispatchListener,
        topics: tuple[str, ...] = (),
        properties: tuple[str, ...] = (),
    ) -> None:
        self._store.add_dispatch_listener(listener, topics, properties)
