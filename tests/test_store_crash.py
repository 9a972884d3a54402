"""SIGKILL in the middle of appending: the next open cuts the torn tail, consume queues and
index agree with the CommitLog, and every acknowledged append is there.

The writer runs in a child process and reports each acknowledged write after ``put``
returned; the parent kills it at a varying number of acknowledgements, several times in a
row on the same directory, so kills land at arbitrary instructions of the append path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.crash_writer import CONFIG
from tests.store_checks import assert_derived_files_agree

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")


def run_writer_until_killed(
    data_dir: str, mode: FlushMode, start: int, acks_before_kill: int
) -> set[str]:
    """Start the writer, SIGKILL it after ``acks_before_kill`` acknowledged puts, and return
    every unique key it reported as acknowledged."""
    child = subprocess.Popen(
        [sys.executable, WRITER, data_dir, mode.value, str(start)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged: set[str] = set()
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        puts = 0
        while puts < acks_before_kill:
            assert time.monotonic() < deadline, "writer too slow"
            line = child.stdout.readline()
            assert line.startswith("ack "), f"writer stopped: {line!r}"
            acknowledged.update(line.split()[1:])
            puts += 1
        child.send_signal(signal.SIGKILL)
        # Lines written before the kill are acknowledged too.
        for line in child.stdout:
            if line.startswith("ack ") and line.endswith("\n"):
                acknowledged.update(line.split()[1:])
    finally:
        child.kill()
        child.wait()
    return acknowledged


@pytest.mark.parametrize("mode", [FlushMode.SYNC_FLUSH, FlushMode.ASYNC_FLUSH])
def test_sigkill_while_appending_loses_no_acknowledged_write(tmp_path, mode):
    data_dir = str(tmp_path / "store")
    acknowledged: set[str] = set()
    for round_number, acks in enumerate([37, 211, 5, 480]):
        acknowledged |= run_writer_until_killed(
            data_dir, mode, start=round_number * 1_000_000, acks_before_kill=acks
        )
        store = MessageStore.open(StoreConfig(data_dir, flush_mode=mode, **CONFIG))
        try:
            report = store.recovery_report
            assert report is not None and not report.clean_shutdown
            records = assert_derived_files_agree(store)
            assert records >= len(acknowledged)
            for topic_keys in _by_topic(store, acknowledged):
                topic, key = topic_keys
                assert store.query_by_unique_key(topic, key) is not None, f"lost {key}"
        finally:
            store.close_abruptly_for_tests()  # the next round starts from a crash again


def _by_topic(store: MessageStore, keys: set[str]):
    topics = {t for (t, _q) in store.consume_queues.queues}
    for key in sorted(keys):
        hits = [t for t in topics if store.query_by_unique_key(t, key) is not None]
        assert len(hits) == 1, f"acknowledged {key} found in {hits}"
        yield hits[0], key


def test_torn_tail_is_cut_and_appends_continue(tmp_path):
    """Zero the second half of the last record, as a write torn by a crash leaves it."""
    config = StoreConfig(str(tmp_path / "store"), **CONFIG)
    store = MessageStore.open(config)
    written = []
    for i in range(40):
        result = store.put_message(
            Message.build("orders", os.urandom(900), queue_id=i % 2, unique_key=f"K{i}")
        )
        written.append(result.appended[0])
    store.close_abruptly_for_tests()
    last = written[-1]
    segment_size = config.commitlog_segment_bytes
    path = os.path.join(
        config.data_dir,
        "commitlog",
        f"{last.physical_offset - last.physical_offset % segment_size:020d}",
    )
    with open(path, "r+b") as f:
        f.seek(last.physical_offset % segment_size + last.size // 2)
        f.write(bytes(last.size - last.size // 2))

    store = MessageStore.open(config)
    report = store.recovery_report
    assert report.end_offset == last.physical_offset
    assert report.corrupt_offset == last.physical_offset and report.corruption
    assert store.query_by_unique_key("orders", "K39") is None
    assert all(store.query_by_unique_key("orders", f"K{i}") for i in range(39))
    assert_derived_files_agree(store)
    again = store.put_message(Message.build("orders", b"after", queue_id=1, unique_key="K40"))
    assert again.ok and again.appended[0].physical_offset == last.physical_offset
    assert again.appended[0].queue_offset == last.queue_offset  # the cut offset is reused
    store.shutdown()

    store = MessageStore.open(config)
    assert store.recovery_report.corruption is None
    assert store.query_by_unique_key("orders", "K40").body == b"after"
    assert assert_derived_files_agree(store) == 40
    store.shutdown()
