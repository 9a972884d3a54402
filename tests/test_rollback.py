"""Rollback files (``ha/rollback.py``): a cut tail is kept whole before the cut, across
segments; a tail that cannot be kept never stops the cut; old files expire."""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import pytest

from ha import rollback
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from tests.node_process import start_node
from tests.test_store_layers import QUIET, SMALL


def store_with(tmp_path, count: int, **overrides) -> MessageStore:
    store = MessageStore.open(StoreConfig(str(tmp_path / "node"), **SMALL, **QUIET, **overrides))
    for i in range(count):
        assert store.put_message(Message.build("t", b"x" * 1000 + str(i).encode())).ok
    return store


def test_a_tail_across_segments_is_kept_verbatim_then_cut(tmp_path):
    store = store_with(tmp_path, 60)  # several small segments, blank fillers between them
    try:
        records = list(store.commitlog.iterate(0, store.commitlog.write_offset))
        start = records[10].physical_offset
        assert store.commitlog.segments.find(start) is not store.commitlog.segments.last
        path = rollback.keep_tail(store, 3, start)
        store.truncate_to(start)
        assert os.path.basename(path) == f"{3:010d}-{start:020d}.log"
        kept = list(rollback.records_in(path))
        assert [(m.physical_offset, m.body) for m in kept] == [
            (m.physical_offset, m.body) for m in records[10:]
        ]
        assert rollback.rollback_files(store.config.data_dir) == [path]
        assert store.commitlog.write_offset == start
        assert rollback.keep_tail(store, 3, start) is None  # nothing past the end
    finally:
        store.shutdown()


def test_a_tail_that_cannot_be_kept_is_logged_and_the_cut_goes_on(tmp_path, caplog):
    store = store_with(tmp_path, 5)
    try:
        # A file where the directory should be: nothing can be written there.
        with open(rollback.directory_of(store.config.data_dir), "w") as f:
            f.write("in the way")
        caplog.set_level(logging.ERROR, logger="ferrymq.ha.rollback")
        assert rollback.keep_tail(store, 1, 0) is None
        assert "could not keep the cut tail [0, " in caplog.text
        store.truncate_to(0)
        assert store.commitlog.write_offset == 0
    finally:
        store.shutdown()


def test_only_the_first_part_of_a_huge_tail_is_kept(tmp_path, monkeypatch, caplog):
    store = store_with(tmp_path, 20)
    try:
        monkeypatch.setattr(rollback, "MAX_TAIL_BYTES", 5000)
        path = rollback.keep_tail(store, 1, 0)
        kept = list(rollback.records_in(path))
        assert 4 <= len(kept) < 20 and kept[0].body.endswith(b"x0")
        assert "is larger than 5000 bytes" in caplog.text
    finally:
        store.shutdown()


def test_a_tail_that_would_fill_the_disk_is_not_kept(tmp_path, caplog):
    store = store_with(tmp_path, 5)
    try:
        store.config = dataclasses.replace(store.config, disk_high_water_ratio=1e-9)
        assert rollback.keep_tail(store, 1, 0) is None
        assert "would pass the disk's high-water mark" in caplog.text
        assert os.listdir(rollback.directory_of(store.config.data_dir)) == []  # no .tmp left
    finally:
        store.shutdown()


def test_files_past_the_retention_and_half_written_ones_go_when_a_tail_is_kept(tmp_path):
    store = store_with(tmp_path, 4, retention_ms=3_600_000)
    try:
        directory = rollback.directory_of(store.config.data_dir)
        os.makedirs(directory)
        old, recent, torn = (os.path.join(directory, n) for n in ("1-0.log", "2-0.log", "x.tmp"))
        for path in (old, recent, torn):
            with open(path, "wb") as f:
                f.write(b"")
        two_hours_ago = time.time() - 7200
        os.utime(old, (two_hours_ago, two_hours_ago))
        kept = rollback.keep_tail(store, 5, 0)
        assert sorted(os.listdir(directory)) == sorted(["2-0.log", os.path.basename(kept)])
    finally:
        store.shutdown()


def test_a_damaged_rollback_file_is_a_clear_error(tmp_path):
    store = store_with(tmp_path, 3)
    try:
        path = rollback.keep_tail(store, 1, 0)
    finally:
        store.shutdown()
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(b"\0\0\0\0")  # the first record's magic
    with pytest.raises(ValueError, match="no record at byte 0"):
        list(rollback.records_in(path))


def test_a_node_removes_expired_and_half_written_rollback_files_on_its_own(tmp_path):
    """A node deposed once keeps no file forever: its housekeeping expires rollback files
    like segments, and its start removes the half-written file of a keep that crashed."""
    data_dir = str(tmp_path / "node")
    directory = rollback.directory_of(data_dir)
    os.makedirs(directory)
    two_hours_ago = time.time() - 7200

    def make(name: str, mtime: float | None = None) -> str:
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(b"")
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    torn, recent = make("3-0.log.tmp"), make("2-0.log")
    node = start_node(data_dir, "retention_ms = 3600000\nretention_check_interval_ms = 100\n")
    try:
        assert not os.path.exists(torn)  # gone before the node answered
        old = make("1-0.log", two_hours_ago)
        deadline = time.monotonic() + 20
        while os.path.exists(old) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(old)
        assert os.path.exists(recent)
    finally:
        node.sigterm()
