"""Rollback files (``ha/rollback.py``): a cut tail is kept whole before the cut, across
segments; a tail that cannot be kept never stops the cut; old files expire."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time

import pytest

from ferrymq.cli.main import main
from ferrymq.cli.rollback_resend import SKIPPED_DELIVERED, SKIPPED_SYSTEM, SKIPPED_TRANSACTIONAL
from ferrymq.client import Admin, Producer
from ferrymq.client import Message as FerryMessage
from ferrymq.codec.properties import PROPERTY_DELIVERY_TIME_MS as DELIVER
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID as TRANSACTION
from ha import rollback
from node.parked import park
from node.services.transactions import HALF_TOPIC
from store.config import StoreConfig
from store.message import TIMER_TOPIC, Message
from store.message_store import MessageStore
from tests.support.nodes import start_node
from tests.support.stores import QUIET, SMALL, flip_body_bit, log_records


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


def test_resend_sends_messages_as_their_producers_sent_them_and_reports_refusals(tmp_path, capsys):
    """``ferrymq rollback --resend`` on a tail of every kind of record: user messages and
    delayed ones (delivered, or still waiting) go again with their ids and delivery times,
    the node's own records and committed transactional messages are counted, and a
    message the node refuses is reported while the others still go."""
    now_ms = int(time.time() * 1000)
    # ID-wait must still be waiting when it is resent (after a node start, which took
    # 5-10 s at load 30 and broke a 4 s margin), and be delivered soon after.
    due, later = str(now_ms - 60_000), str(now_ms + 12_000)
    build = Message.build
    store = MessageStore.open(StoreConfig(str(tmp_path / "old"), **SMALL, **QUIET))
    try:
        for message in (
            build(
                "orders",
                b"plain",
                tags="TagA",
                keys=["k1", "k2"],
                unique_key="ID-plain",
                properties={"color": "red"},
            ),
            build("later", b"due", unique_key="ID-due", properties={DELIVER: due}),
            park(build("later", b"waits", unique_key="ID-wait"), TIMER_TOPIC, {DELIVER: later}),
            park(build("later", b"twice", unique_key="ID-twice"), TIMER_TOPIC, {DELIVER: due}),
            build("later", b"twice", unique_key="ID-twice", properties={DELIVER: due}),
            park(build("tx", b"half", unique_key="ID-half"), HALF_TOPIC, {TRANSACTION: "T1"}),
            build("tx", b"committed", unique_key="ID-committed", properties={TRANSACTION: "T1"}),
            build("gone", b"no such topic", unique_key="ID-gone"),
        ):
            assert store.put_message(message).ok
        assert rollback.keep_tail(store, 1, 0) is not None
    finally:
        store.shutdown()
    node = start_node(str(tmp_path / "new"))
    try:
        with Admin(node.address) as admin:
            admin.create_topic("orders", 1)
            admin.create_topic("later", 1, message_type="DELAY")
            admin.create_topic("tx", 1, message_type="TRANSACTION")
        capsys.readouterr()
        code = main(
            [
                "rollback",
                "--data",
                str(tmp_path / "old"),
                "--resend",
                "--server",
                node.address,
                "--json",
            ]
        )
        report = json.loads(capsys.readouterr().out)
        assert code == 1
        assert report["sent"] == 4
        assert report["not_sent"] == {
            SKIPPED_DELIVERED: 1,
            SKIPPED_SYSTEM: 1,
            SKIPPED_TRANSACTIONAL: 1,
        }
        assert [(r["message_id"], r["topic"]) for r in report["refused"]] == [("ID-gone", "gone")]
        assert "TOPIC_NOT_FOUND" in report["refused"][0]["error"]
        with Admin(node.address) as admin:
            (plain,) = admin.query_by_id("ID-plain", "orders")
            assert (plain.body, plain.tag, plain.keys) == (b"plain", "TagA", ["k1", "k2"])
            assert plain.properties["color"] == "red"
            delivered = [admin.query_by_offset("later", 0, offset) for offset in (0, 1)]
            assert [(m.body, m.message_id) for (m,) in delivered] == [
                (b"due", "ID-due"),
                (b"twice", "ID-twice"),
            ]
            # ID-wait was held until its delivery time, then delivered.
            deadline = time.monotonic() + 60
            while not (waited := admin.query_by_offset("later", 0, 2)):
                assert time.monotonic() < deadline, "the delayed message was never delivered"
                time.sleep(0.1)
            assert [(m.body, m.message_id) for m in waited] == [(b"waits", "ID-wait")]
            assert waited[0].store_timestamp_ms >= int(later)
    finally:
        node.sigterm()


def test_a_node_whose_recovery_cut_its_log_says_so_everywhere_and_keeps_the_rest(tmp_path, capsys):
    """A standalone node, stopped cleanly, one bit flipped in its 100th message. At the
    next start its log says where, why and what was kept; its metrics and ``cluster
    status`` show the damage, also after another restart (nothing can refill it); the 99
    messages after the bad one are listed and sent again by ``ferrymq rollback``."""
    from tests.support.metrics import scrape, value

    data_dir = str(tmp_path / "node")
    ports = "[ports]\nmetrics = 0\n"
    node = start_node(data_dir, ports)
    try:
        with Admin(node.address) as admin:
            admin.create_topic("orders", 1)
        with Producer(node.address) as producer:
            for i in range(200):
                producer.send(FerryMessage("orders", b"order-%03d" % i, keys=[f"k{i}"]))
    finally:
        assert node.sigterm() == 0
    orders = log_records(data_dir, "orders")
    assert len(orders) == 200
    bad, _ = orders[100]
    flip_body_bit(data_dir, bad)

    node = start_node(data_dir, ports)
    try:
        with open(data_dir + ".log", encoding="utf-8") as f:
            errors = [line for line in f if " ERROR " in line]
        assert len(errors) == 1
        assert f"invalid record at CommitLog offset {bad} (body CRC mismatch" in errors[0]
        assert os.path.join(data_dir, "damaged", "") in errors[0]
        samples = scrape(node.metrics)
        assert value(samples, "ferrymq_commitlog_damaged") == 1
        cut = value(samples, "ferrymq_commitlog_damaged_bytes")
        assert cut >= orders[-1][0] + orders[-1][1] - bad
        capsys.readouterr()
        assert main(["cluster", "status", "--server", node.address, "--json"]) == 0
        (listed,) = json.loads(capsys.readouterr().out)["nodes"]
        assert listed["damaged_log"] is True
        assert main(["cluster", "status", "--server", node.address]) == 0
        assert "DAMAGED (cut by recovery, not refilled)" in capsys.readouterr().out
    finally:
        assert node.sigterm() == 0

    node = start_node(data_dir, ports)  # nothing refilled it: still damaged
    try:
        assert value(scrape(node.metrics), "ferrymq_commitlog_damaged") == 1
        capsys.readouterr()
        assert main(["rollback", "--data", data_dir, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        kept = [r["body"] for r in rows if r["kind"] == "damaged" and r["topic"] == "orders"]
        assert kept == [f"order-{i:03d}" for i in range(101, 200)]
        unreadable = [r for r in rows if r["kind"] == "unreadable"]
        assert unreadable[0]["physical_offset"] == bad
        code = main(["rollback", "--data", data_dir, "--resend", "--server", node.address])
        assert code == 0
        assert "sent 99 messages again" in capsys.readouterr().out
        with Admin(node.address) as admin:
            resent = admin.query_by_offset("orders", 0, 100)
            assert [m.body for m in resent] == [b"order-101"]
    finally:
        assert node.sigterm() == 0


def test_damaged_ranges_are_marked_refilled_and_expire_like_rollback_files(tmp_path):
    """A refilled range stays listed but no longer makes the log damaged, across a
    restart; a range older than the retention goes with its description, and a keep a
    crash left half-written goes when the node starts."""
    two_hours_ago_ms = int(time.time() * 1000) - 7_200_000
    config = StoreConfig(str(tmp_path / "node"), **SMALL, **QUIET, retention_ms=3_600_000)
    store = MessageStore.open(config)
    for i in range(10):
        assert store.put_message(Message.build("t", b"x" * 100 + str(i).encode())).ok
    store.shutdown()
    flip_body_bit(config.data_dir, 0)
    store = MessageStore.open(config, clock_ms=lambda: two_hours_ago_ms)
    try:
        (damaged,) = store.damage.ranges
        assert store.damage.unrefilled and damaged.found_ms == two_hours_ago_ms
        (refilled,) = store.damage.mark_refilled(4242)
        assert refilled.refilled_to == 4242 and not store.damage.unrefilled
    finally:
        store.shutdown()
    store = MessageStore.open(config)
    try:
        assert store.recovery_report.damaged is None
        (loaded,) = store.damage.ranges
        assert loaded == refilled and not store.damage.unrefilled
        assert store.damage.cut_bytes == damaged.end - damaged.start
        directory = os.path.join(config.data_dir, "damaged")
        torn = os.path.join(directory, "00000000000000000042-1.log.tmp")
        with open(torn, "wb") as f:
            f.write(b"half")
        removed = store.damage.remove_expired(3600, partial=True)
        assert sorted(os.path.basename(p) for p in removed) == sorted(
            [os.path.basename(torn), damaged.file, damaged.file.replace(".log", ".json")]
        )
        assert os.listdir(directory) == [] and store.damage.ranges == ()
        assert store.damage.cut_bytes == 0
    finally:
        store.shutdown()
