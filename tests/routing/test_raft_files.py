"""Routing's Raft files (``routing/raft_files.py``): the term, the vote and the commit
index written in place, snapshots replaced without freeing the old one on the Raft
thread, and a 0.1.0 ``journal.meta`` carried over."""

from __future__ import annotations

import asyncio
import os

import pytest
from pysyncobj.journal import MetaStorer

from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until
from routing import raft_files
from routing.commands import CreateTopic, RegisterNode
from routing.raft_files import SLOT_BYTES, RaftJournal, TermFile, TermRecord
from routing.replica import RoutingReplica


def test_the_newest_record_is_read_back(tmp_path):
    path = str(tmp_path / "journal.term")
    terms = TermFile(path, TermRecord())
    for term in range(1, 6):
        terms.store(TermRecord(term, f"node-{term}", 10 * term), durable=term % 2 == 0)
    terms.close()
    assert TermFile(path, TermRecord()).record == TermRecord(5, "node-5", 50)


def test_a_torn_newest_slot_leaves_the_one_before(tmp_path):
    path = str(tmp_path / "journal.term")
    terms = TermFile(path, TermRecord())
    terms.store(TermRecord(7, "a", 3), durable=True)  # sequence 1: slot 1
    terms.store(TermRecord(8, "b", 4), durable=True)  # sequence 2: slot 0
    terms.close()
    with open(path, "r+b") as file:  # a power loss in the middle of slot 0's write
        file.seek(40)
        file.write(b"\xff" * 8)
    assert TermFile(path, TermRecord()).record == TermRecord(7, "a", 3)


def test_a_file_with_no_whole_slot_is_refused_not_read_as_term_zero(tmp_path):
    path = tmp_path / "journal.term"
    path.write_bytes(b"\x01" * (2 * SLOT_BYTES))
    with pytest.raises(ValueError, match="neither slot"):
        TermFile(str(path), TermRecord())


def test_stores_never_replace_or_resize_the_file(tmp_path):
    path = str(tmp_path / "journal.term")
    terms = TermFile(path, TermRecord())
    before = os.stat(path)
    for term in range(100):
        terms.store(TermRecord(term, None, term), durable=False)
    after = os.stat(path)
    assert (
        (after.st_ino, after.st_size)
        == (before.st_ino, before.st_size)
        == (
            before.st_ino,
            2 * SLOT_BYTES,
        )
    )
    terms.close()


def test_a_0_1_0_journal_meta_is_carried_over_then_left_alone(tmp_path):
    journal = str(tmp_path / "journal")
    MetaStorer(journal + ".meta").storeMeta(
        {"currentTerm": 12, "votedForNodeId": "10.0.0.2:4000", "raftCommitIndex": 345}
    )
    legacy = os.stat(journal + ".meta")
    carried = RaftJournal(journal)
    assert (carried.getCurrentTerm(), carried.getVotedForNodeId()) == (12, "10.0.0.2:4000")
    assert carried.getRaftCommitIndex() == 345
    carried.setCurrentTerm(13, None)
    carried.setRaftCommitIndex(400)
    carried.onOneSecondTimer()
    carried._destroy()
    after = os.stat(journal + ".meta")
    assert (after.st_ino, after.st_mtime_ns) == (legacy.st_ino, legacy.st_mtime_ns)
    reopened = RaftJournal(journal)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (13, None)
    assert reopened.getRaftCommitIndex() == 400
    reopened._destroy()


def test_a_replaced_file_keeps_a_link_until_the_reaper_removes_it(tmp_path, monkeypatch):
    target, source = tmp_path / "snapshot", tmp_path / "snapshot.tmp"
    target.write_bytes(b"old")
    source.write_bytes(b"new")
    old = os.open(target, os.O_RDONLY)
    handed: list[str] = []
    monkeypatch.setattr(raft_files, "_reclaim", handed.append)
    raft_files.replace_keeping_old(str(source), str(target))
    assert target.read_bytes() == b"new"
    # The rename dropped one of two links: the old file's blocks were not freed by it.
    assert os.fstat(old).st_nlink == 1 and len(handed) == 1
    monkeypatch.undo()
    raft_files._reclaim(handed[0])
    until(lambda: not os.path.exists(handed[0]), 10, "the reaper to remove the aside link")
    assert os.fstat(old).st_nlink == 0
    os.close(old)


def test_leftover_aside_links_are_removed_when_a_replica_opens(tmp_path):
    raft = tmp_path / "raft"
    raft.mkdir()
    leftover = raft / f"snapshot{raft_files.ASIDE_SUFFIX}123-0"
    leftover.write_bytes(b"old")
    raft_files.reclaim_leftovers(str(raft))
    until(lambda: not leftover.exists(), 10, "the leftover to be removed")


def test_a_voter_stores_its_term_and_snapshots_without_replacing_its_term_file(tmp_path):
    """Through a real voter: a second of commits stores the commit index in place (0.1.0
    renamed ``journal.meta`` every second), and a compaction's snapshot leaves no aside."""
    (voter,) = (f"127.0.0.1:{port}" for port in free_ports(1))
    raft = tmp_path / "raft"

    def open_replica() -> RoutingReplica:
        return RoutingReplica(
            self_address=voter, voters=[voter], secret="s", data_dir=str(tmp_path), lease_s=3.0
        )

    replica = open_replica()
    until(replica.leads_with_quorum, 20, "the lone voter to lead")
    term_file = raft / "journal.term"
    first = os.stat(term_file)

    async def create(names: range) -> None:
        assert (await replica.submit(RegisterNode("n1", "g1", "n1:1"))).ok
        for i in names:
            assert (await replica.submit(CreateTopic(f"t{i}", 1))).ok

    asyncio.run(create(range(20)))
    until(
        lambda: TermFile(str(term_file), TermRecord()).record.commit_index > 20,
        10,
        "the commit index stored",
    )
    replica.sync.forceLogCompaction()
    until(lambda: (raft / "snapshot").exists(), 20, "a snapshot")
    snapshot = os.stat(raft / "snapshot").st_ino
    asyncio.run(create(range(20, 25)))
    replica.sync.forceLogCompaction()
    until(lambda: os.stat(raft / "snapshot").st_ino != snapshot, 20, "a second snapshot")
    until(
        lambda: not any(raft_files.ASIDE_SUFFIX in name for name in os.listdir(raft)),
        20,
        "the replaced snapshot's aside link removed",
    )
    assert os.stat(term_file).st_ino == first.st_ino
    assert not (raft / "journal.meta").exists()
    term = replica.status().term
    replica.close()
    reopened = open_replica()
    assert reopened.status().term >= term
    until(reopened.leads_with_quorum, 20, "the voter to lead again")
    assert {f"t{i}" for i in range(25)} <= set(reopened.state.topics)
    reopened.close()
