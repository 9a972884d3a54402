"""A full disk (ENOSPC) on a real, small tmpfs: the failing put gets DISK_FULL, nothing of
it is visible, the store stays readable, and once space returns it appends again with no
corrupt record in between. Needs root for ``mount`` (the test command runs as root)."""

from __future__ import annotations

import os
import subprocess

import pytest

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutStatus
from tests.store_checks import assert_derived_files_agree

CONFIG = dict(
    commitlog_segment_bytes=256 * 1024,
    max_message_body_bytes=16 * 1024,
    consume_queue_entries_per_file=100,
    index_slot_count=31,
    index_entry_count=200,
)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 1 MiB mounted for the test; ``resize(kib)`` changes its size."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1024k", "tmpfs", str(mount_point)], check=True
    )

    def resize(kib: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={kib}k", str(mount_point)], check=True)

    try:
        yield mount_point, resize
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def message(i: int, topic: str = "orders", size: int = 8000) -> Message:
    return Message.build(
        topic, os.urandom(size), queue_id=i % 2, unique_key=f"K{i}", keys=[f"k{i}"]
    )


def test_full_disk_while_rolling_a_segment(small_disk):
    mount_point, resize = small_disk
    config = StoreConfig(str(mount_point / "store"), **CONFIG)
    store = MessageStore.open(config)
    acknowledged = []
    for i in range(1000):
        result = store.put_message(message(i))
        if result.status is PutStatus.DISK_FULL:
            assert "no space" in result.error
            failed_at = i
            break
        assert result.ok
        acknowledged.append(i)
    else:
        pytest.fail("the 1 MiB disk never filled up")
    end_before = store.commitlog.write_offset
    # Nothing of the failed put is visible; the store still reads everything acknowledged.
    assert store.query_by_unique_key("orders", f"K{failed_at}") is None
    assert store.put_message(message(failed_at)).status is PutStatus.DISK_FULL
    assert store.commitlog.write_offset == end_before
    for i in acknowledged:
        assert store.query_by_unique_key("orders", f"K{i}") is not None
    got = store.get_messages("orders", 0, 0, 1000)
    assert len(got.messages) == len([i for i in acknowledged if i % 2 == 0])

    resize(4096)
    after = [failed_at + j for j in range(20)]
    for i in after:
        assert store.put_message(message(i)).ok
    store.shutdown()

    store = MessageStore.open(config)
    assert store.recovery_report.corruption is None
    assert assert_derived_files_agree(store) == len(acknowledged) + len(after)
    for i in acknowledged + after:
        assert store.query_by_unique_key("orders", f"K{i}") is not None
    store.shutdown()


def test_full_disk_while_creating_a_consume_queue_file(small_disk):
    """The CommitLog segment has room but a new consume-queue file does not: the record is
    kept, dispatch falls behind, later puts answer DISK_FULL until space returns, then the
    dispatcher catches up and the queues agree with the log."""
    mount_point, resize = small_disk
    config = StoreConfig(str(mount_point / "store"), **CONFIG)
    store = MessageStore.open(config)
    assert store.put_message(message(0, size=100)).ok
    # Fill what is left of the disk.
    filler = mount_point / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\xff" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    first = store.put_message(message(1, topic="payments", size=100))
    # Stored in the CommitLog (its segment had room) but not yet visible in a queue.
    assert first.ok
    assert store.get_messages("payments", 1, 0, 10).messages == []
    refused = store.put_message(message(2, topic="orders", size=100))
    assert refused.status is PutStatus.DISK_FULL
    assert store.query_by_unique_key("orders", "K2") is None

    os.unlink(filler)
    resize(2048)
    assert store.put_message(message(3, topic="orders", size=100)).ok
    got = store.get_messages("payments", 1, 0, 10)
    assert [m.unique_key for m in got.messages] == ["K1"]
    assert assert_derived_files_agree(store) == 3
    store.shutdown()
    store = MessageStore.open(config)
    assert assert_derived_files_agree(store) == 3
    store.shutdown()
