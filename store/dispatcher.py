"""The dispatcher: turns CommitLog records into consume-queue and index entries
(docs/architecture.md, "Storage engine").

It owns one cursor, ``dispatched_offset``: everything below it has been dispatched. One
``catch_up`` reads the log from the cursor to its end, as RocketMQ's reput service does:
right after a local append, after a replicated chunk on a slave, during recovery, and
after an earlier dispatch failed (a full disk while creating a consume-queue file, say).
Every step is idempotent, so replaying a range that was partly dispatched is safe.

The log is read in plans (``CommitLog.dispatch_plans``, a C loop): each record's
consume-queue entry and index keys come straight from its header and properties, with no
Python object per record. Consumers that must see more than queue entries (long polls,
delayed messages, lite topics, transaction checks) register a ``listener`` naming the
topics or properties whose records they need; only those records are decoded whole. A
listener is called once per plan, in log order (once per batch, not per record: a
listener's fixed cost is paid once for many records).

Thread-safety: called with the store's put lock held (or by recovery, alone).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from store.commitlog import MAX_WANTED, CommitLog
from store.consume_queue import ConsumeQueue
from store.dispatch_request import DispatchBatch, DispatchPlan, QueueRun
from store.errors import StoreError
from store.index_service import IndexService

DispatchListener = Callable[[DispatchBatch], None]
# (a queue's run of new entries, the read cap) -> None: ``Dispatcher.run_reader``.
RunReader = Callable[[QueueRun, int], None]
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
        # Hears each queue's run of a dispatch that passes a read cap (``catch_up``'s
        # ``readable``) once its consume-queue entries are written, before the index and
        # the listeners: readers parked at the run's first offset are answered from it
        # (node/tail_reads.py). None: nobody.
        self.run_reader: RunReader | None = None
        self.wanted_topics: tuple[str, ...] = ()
        self.wanted_properties: tuple[str, ...] = ()
        self.last_error: StoreError | None = None

    def add_listener(
        self,
        listener: DispatchListener,
        topics: tuple[str, ...] = (),
        properties: tuple[str, ...] = (),
    ) -> None:
        """Call ``listener`` with every dispatched batch; its ``records`` include every
        record of ``topics`` and every record with a property named in ``properties``
        (only those records are decoded whole). At most ``MAX_WANTED`` topics and as many
        property names in all: the plan compares each record against every one."""
        wanted_topics = tuple(dict.fromkeys(self.wanted_topics + tuple(topics)))
        wanted_properties = tuple(dict.fromkeys(self.wanted_properties + tuple(properties)))
        if len(wanted_topics) > MAX_WANTED or len(wanted_properties) > MAX_WANTED:
            raise ValueError(f"dispatch listeners may name at most {MAX_WANTED} of each")
        self.wanted_topics, self.wanted_properties = wanted_topics, wanted_properties
        self.listeners.append(listener)

    def catch_up(self, readable: int | None = None) -> int:
        """Dispatch every record between the cursor and the CommitLog's write offset, in
        plans of up to ``CATCH_UP_BATCH`` records; returns how many were dispatched. On a
        store error (a full disk while creating a consume-queue file, say) the cursor
        stays at the failed plan's start, ``last_error`` says why, and the next call
        replays from there. ``readable``: the read cap this dispatch's caller is about to
        set (a SYNC master's confirmation), told to ``run_reader`` with each run."""
        end = self.commitlog.write_offset
        dispatched = 0
        plans = self.commitlog.dispatch_plans(
            self.dispatched_offset,
            end,
            CATCH_UP_BATCH,
            self.wanted_topics,
            self.wanted_properties,
            self.index.key_hash_override(),
        )
        run_reader = self.run_reader if readable is not None else None
        for plan in plans:
            try:
                self._write(plan, run_reader, readable)
            except StoreError as error:
                # Every step is idempotent: the whole plan is replayed by the next call.
                self.last_error = error
                return dispatched
            if self.listeners:
                batch = DispatchBatch(
                    [(run[0], run[1]) for run in plan.runs], plan.wanted, plan.end
                )
                for listener in self.listeners:
                    listener(batch)
            self.dispatched_offset = plan.end
            dispatched += plan.count
        self.dispatched_offset = max(self.dispatched_offset, end)
        self.last_error = None
        return dispatched

    def _write(
        self, plan: DispatchPlan, run_reader: RunReader | None = None, readable: int = 0
    ) -> None:
        find_or_create = self.consume_queues.find_or_create
        for topic, queue_id, first_offset, entries in plan.runs:
            find_or_create(topic, queue_id).put_run(entries, first_offset)
        if run_reader is not None:
            for run in plan.runs:
                run_reader(run, readable)
        self.index.put_records(plan.keys)
