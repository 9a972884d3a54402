"""A flipped byte in the middle of the last segment: recovery stops at that record, reports
its offset, keeps everything before it, and the log continues from there."""

from __future__ import annotations

import os

import pytest

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.store_checks import assert_derived_files_agree

CONFIG = dict(
    commitlog_segment_bytes=128 * 1024,
    max_message_body_bytes=8 * 1024,
    consume_queue_entries_per_file=50,
    index_slot_count=31,
    index_entry_count=100,
)


def config_for(tmp_path) -> StoreConfig:
    return StoreConfig(str(tmp_path / "store"), **CONFIG)


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_flipped_byte_stops_recovery_at_that_record(tmp_path, clean_shutdown):
    config = config_for(tmp_path)
    store = MessageStore.open(config)
    appended = []
    for i in range(400):  # about three segments of 1 KiB records
        result = store.put_message(
            Message.build("orders", os.urandom(1000), queue_id=i % 4, unique_key=f"K{i}")
        )
        assert result.ok
        appended.append(result.appended[0])
    if clean_shutdown:
        store.shutdown()
    else:
        store.close_abruptly_for_tests()

    segment_size = config.commitlog_segment_bytes
    last_base = appended[-1].physical_offset - appended[-1].physical_offset % segment_size
    in_last = [a for a in appended if a.physical_offset >= last_base]
    victim_index = appended.index(in_last[len(in_last) // 2])
    victim = appended[victim_index]
    with open(os.path.join(config.data_dir, "commitlog", f"{last_base:020d}"), "r+b") as f:
        f.seek(victim.physical_offset - last_base + 88 + 500)  # a byte of the body
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))

    store = MessageStore.open(config)
    report = store.recovery_report
    assert report.corrupt_offset == victim.physical_offset
    assert "CRC" in report.corruption
    assert report.end_offset == victim.physical_offset
    for i, before in enumerate(appended[:victim_index]):
        found = store.query_by_unique_key("orders", f"K{i}")
        assert found is not None and found.physical_offset == before.physical_offset
    for i in range(victim_index, len(appended)):
        assert store.query_by_unique_key("orders", f"K{i}") is None
    assert assert_derived_files_agree(store) == victim_index

    result = store.put_message(Message.build("orders", b"new", queue_id=0, unique_key="NEW"))
    assert result.ok and result.appended[0].physical_offset == victim.physical_offset
    store.shutdown()
    store = MessageStore.open(config)
    assert store.recovery_report.corruption is None
    assert store.query_by_unique_key("orders", "NEW").body == b"new"
    assert assert_derived_files_agree(store) == victim_index + 1
    store.shutdown()


def test_damaged_checkpoint_means_full_scan(tmp_path):
    config = config_for(tmp_path)
    store = MessageStore.open(config)
    for i in range(300):
        assert store.put_message(Message.build("orders", os.urandom(1000), unique_key=f"K{i}")).ok
    store.shutdown()
    with open(os.path.join(config.data_dir, "checkpoint"), "r+b") as f:
        f.seek(3)
        f.write(b"\xff")
    store = MessageStore.open(config)
    assert store.recovery_report.scan_start_offset == 0
    assert store.recovery_report.records_scanned == 300
    assert assert_derived_files_agree(store) == 300
    store.shutdown()
    # And a valid checkpoint means only the last segment is scanned.
    store = MessageStore.open(config)
    segment_size = config.commitlog_segment_bytes
    assert store.recovery_report.scan_start_offset == (
        store.commitlog.write_offset - store.commitlog.write_offset % segment_size
    )
    assert store.recovery_report.records_scanned < 300
    store.shutdown()
