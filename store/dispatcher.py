"""The dispatcher: turns CommitLog records into consume-queue and index entries
(docs/architecture.md, "Storage engine").

It owns one cursor, ``dispatched_offset``: everything below it has been dispatched. The
same ``dispatch`` runs right after a local append (with requests built while encoding),
after a replicated chunk on a slave and during recovery (with requests decoded from the
log), and ``catch_up`` re-reads the log from the cursor whenever an earlier dispatch failed
(a full disk while creating a consume-queue file, say). Every step is idempotent, so
replaying a range that was partly dispatched is safe.

Consumers that must see more than queue entries (long polls, delayed messages, the
replication master) register a ``listener``; it is called once per dispatched batch with
the batch's requests, in log order (once per batch, not per record: a listener's fixed
cost, such as waking the replication links, is paid once for 128 records).

Thread-safety: called with the store's put lock held (or by recovery, alone).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from store.commitlog import NO_QUEUE_OFFSET_BIT, CommitLog
from store.consume_queue import ConsumeQueue
from store.dispatch_request import DispatchRequest
from store.errors import StoreError
from store.index_service import IndexService

DispatchListener = Callable[[list[DispatchRequest]], None]
CATCH_UP_BATCH = 512


class ConsumeQueueTable:
    """Every consume queue of the node, created on first use."""

    def __init__(self, root: str, entries_per_file: int) -> None:
        self.root = root
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        os.makedirs(root, exist_ok=True)

    def load(self) -> None:
        for topic in sorted(os.listdir(self.root)):
            topic_dir = os.path.join(self.root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for queue_name in sorted(os.listdir(topic_dir)):
                if queue_name.isdigit():
                    queue = ConsumeQueue(self.root, topic, int(queue_name), self.entries_per_file)
                    queue.load()
                    self.queues[(topic, int(queue_name))] = queue

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(self.root, topic, queue_id, self.entries_per_file)
            self.queues = {**self.queues, (topic, queue_id): queue}
        return queue

    def of_topic(self, topic: str) -> list[ConsumeQueue]:
        return sorted(
            (q for (t, _), q in self.queues.items() if t == topic), key=lambda q: q.queue_id
        )

    def flush(self) -> None:
        for queue in list(self.queues.values()):
            queue.flush()

    def close(self) -> None:
        for queue in list(self.queues.values()):
            queue.close()


class Dispatcher:
    def __init__(
        self, commitlog: CommitLog, consume_queues: ConsumeQueueTable, index: IndexService
    ) -> None:
        self.commitlog = commitlog
        self.consume_queues = consume_queues
        self.index = index
        self.dispatched_offset = 0
        self.listeners: list[DispatchListener] = []
        self.last_error: StoreError | None = None

    def dispatch(self, requests: list[DispatchRequest]) -> None:
        """Dispatch records that directly follow the cursor, in order. On a store error
        the cursor stays at the failed record and ``catch_up`` resumes from there."""
        if not requests:
            return
        if self.dispatched_offset != requests[0].physical_offset:
            # An earlier dispatch failed; the log from the cursor is replayed instead.
            self.catch_up()
            return
        start = requests[0].physical_offset
        runs: dict[tuple[str, int], tuple[int, list]] = {}
        for request in requests:
            if not request.sys_flag & NO_QUEUE_OFFSET_BIT:
                key = (request.topic, request.queue_id)
                run = runs.get(key)
                entry = (request.physical_offset, request.size, request.tag_code)
                if run is None:
                    runs[key] = (request.queue_offset, [entry])
                else:
                    assert run[0] + len(run[1]) == request.queue_offset, (
                        "queue offsets not consecutive"
                    )
                    run[1].append(entry)
        try:
            find_or_create = self.consume_queues.find_or_create
            for (topic, queue_id), (first_offset, entries) in runs.items():
                find_or_create(topic, queue_id).put_run(entries, first_offset)
            self.index.put_batch(requests)
        except StoreError as error:
            # Every step is idempotent: the whole batch is replayed by catch_up.
            self.last_error = error
            self.dispatched_offset = start
            return
        for listener in self.listeners:
            listener(requests)
        last = requests[-1]
        self.dispatched_offset = last.physical_offset + last.size
        self.last_error = None

    def catch_up(self) -> int:
        """Dispatch every record between the cursor and the CommitLog's write offset, in
        batches of up to ``CATCH_UP_BATCH`` (what a slave's replicated chunk or a
        recovery replays: one request at a time would cost twice the CPU); returns how
        many records were replayed."""
        end = self.commitlog.write_offset
        replayed = 0
        batch: list[DispatchRequest] = []
        for request in self.commitlog.dispatch_requests(self.dispatched_offset, end):
            batch.append(request)
            if len(batch) == CATCH_UP_BATCH:
                if not self._dispatch_replayed(batch):
                    return replayed
                replayed += len(batch)
                batch = []
        if batch:
            if not self._dispatch_replayed(batch):
                return replayed
            replayed += len(batch)
        self.dispatched_offset = max(self.dispatched_offset, end)
        return replayed

    def _dispatch_replayed(self, batch: list[DispatchRequest]) -> bool:
        # The cursor may sit on a blank record's start: move it to the batch's first record.
        self.dispatched_offset = batch[0].physical_offset
        self.dispatch(batch)
        return self.last_error is None
