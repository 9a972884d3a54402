"""The run reader (``MessageStore.set_run_reader``, ``read_run``): a confirmation's dispatch
hands each queue's run of new entries, with the read cap that confirmation sets, to the
node's tail reads once the consume-queue entries are written and before the index and the
dispatch listeners; and a run read under a cap is what a read of the consume queue at
that cap would find."""

from __future__ import annotations

import pytest

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.stores import SMALL


@pytest.fixture
def store(tmp_path):
    opened = MessageStore.open(StoreConfig(str(tmp_path / "store"), **SMALL))
    yield opened
    opened.shutdown()


def put(store: MessageStore, *queues: int) -> int:
    """One append: a record to each of ``queues``, keyed by its queue's name."""
    messages = [Message.build("t", b"x", queue_id=q, keys=[f"q{q}"]) for q in queues]
    assert store.put_messages(messages).ok
    return store.write_offset


def test_a_confirmations_dispatch_hands_each_run_on_between_its_entries_and_the_index(store):
    store.dispatches_behind = True  # as a SYNC master waiting for slaves
    heard: list[tuple] = []

    def reader(run, readable) -> None:
        topic, queue_id, first, _ = run
        indexed = len(store.query_by_key("t", f"q{queue_id}"))
        heard.append(
            (queue_id, first, readable, store.max_offset_in_queue(topic, queue_id), indexed)
        )

    store.set_run_reader(reader)
    store.add_dispatch_listener(lambda batch: heard.append(("listener", batch.end)))
    end = put(store, 0, 0, 1)
    store.dispatch_behind()  # the reput's tail: no confirmation, no run reader
    assert heard == [("listener", end)]
    heard.clear()
    end = put(store, 0, 1)
    assert store.dispatched_offset < end
    store.dispatch_behind(confirmed=end)
    # Each run's entries are in its queue; the index holds only the earlier dispatch's.
    assert heard == [(0, 2, end, 3, 2), (1, 1, end, 2, 1), ("listener", end)]


def test_a_run_read_under_a_cap_is_the_consume_queue_read_at_that_cap(store):
    store.dispatches_behind = True
    runs: list = []
    store.set_run_reader(lambda run, readable: runs.append(run))
    messages = [Message.build("t", b"%d" % i * (i * 40 + 1)) for i in range(6)]
    result = store.put_messages(messages)  # one append: the reput's one run
    assert result.ok
    ends = [a.physical_offset + a.size for a in result.appended]
    store.dispatch_behind(confirmed=ends[-1])
    [run] = runs
    caps = [ends[0] - 1, *ends]
    for cap in caps:
        store.set_confirmed_offset(cap)
        for max_count in (1, 3, 16):
            for max_bytes in (1, 250, 1 << 20):
                read = store.get_records("t", 0, 0, max_count, max_bytes)
                from_run = store.read_run(run, cap, max_count, max_bytes)
                if not read.messages:
                    assert from_run is None
                    continue
                assert from_run is not None
                assert from_run.messages == read.messages
                assert (from_run.next_begin_offset, from_run.min_offset, from_run.max_offset) == (
                    read.next_begin_offset,
                    read.min_offset,
                    read.max_offset,
                )
