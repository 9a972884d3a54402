"""What a pysyncobj follower commits, on a real follower handed AppendEntries messages
through ferrymq's transport. The chaos runs' node logs carry pysyncobj's CRITICAL line
"truncating already-applied log entries ... state machine may have diverged"; these tests
pin down why it is harmless for the routing state: pysyncobj cuts every entry past the
checked ``prevLogIdx`` before it moves its commit index, so a heartbeat never commits
stale entries of an older term (Raft's rule, reached another way), and the line is logged
when a new leader re-sends entries the follower had already applied, which the cut then
puts back unchanged."""

from __future__ import annotations

import logging

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.syncobj import _COMMAND_TYPE

from routing.raft_transport import BoundedTcpTransport
from tests.support.addresses import free_address

NO_OP = bytes([_COMMAND_TYPE.NO_OP])


def follower() -> SyncObj:
    conf = SyncObjConf(
        autoTick=False,
        password="test-secret",
        raftMinTimeout=3600,  # never campaigns during the test
        raftMaxTimeout=3601,
        connectionTimeout=3601,
        dynamicMembershipChange=False,
    )
    return SyncObj(
        free_address(), [free_address(), free_address()], conf, transportClass=BoundedTcpTransport
    )


def append(node: SyncObj, sender, term: int, commit: int, after: int, after_term: int, entries):
    """As if ``sender`` had sent AppendEntries: through the transport's receive path."""
    message = {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "prevLogIdx": after,
        "prevLogTerm": after_term,
        "entries": entries,
    }
    node._SyncObj__transport._onMessageReceived(sender, message)
    node.doTick(0.0)


def terms(node: SyncObj, first: int, count: int) -> list[int]:
    return [entry[2] for entry in node._SyncObj__getEntries(first, count)]


def test_a_heartbeat_does_not_commit_stale_entries_past_the_index_it_checked():
    node = follower()
    try:
        old_leader, new_leader = node.otherNodes
        # Term 1: entries 2-4 arrive; only 2 commits before the old leader loses its term.
        append(node, old_leader, 1, 2, 1, 0, [(NO_OP, i, 1) for i in (2, 3, 4)])
        assert (node.raftCommitIndex, node.raftLastApplied) == (2, 2)
        # Term 2: the new leader committed its own 3-4 elsewhere; its heartbeat checks
        # index 2 and names commit index 4. The stale 3-4 must not be applied.
        append(node, new_leader, 2, 4, 2, 1, [])
        assert (node.raftCommitIndex, node.raftLastApplied) == (2, 2)
        append(node, new_leader, 2, 4, 2, 1, [(NO_OP, i, 2) for i in (3, 4)])
        assert (node.raftCommitIndex, node.raftLastApplied) == (4, 4)
        assert terms(node, 3, 2) == [2, 2]
    finally:
        node.destroy()


def test_the_already_applied_line_comes_from_a_re_send_of_the_same_entries(caplog):
    node = follower()
    try:
        old_leader, new_leader = node.otherNodes
        append(node, old_leader, 1, 4, 1, 0, [(NO_OP, i, 1) for i in (2, 3, 4)])
        assert node.raftLastApplied == 4
        # A new leader that does not know how far this follower's log matches re-sends
        # from index 3: pysyncobj cuts 3-4 (logging the CRITICAL line) and appends the
        # same entries again: nothing applied differs from the committed log.
        with caplog.at_level(logging.CRITICAL, logger="pysyncobj"):
            append(node, new_leader, 2, 4, 2, 1, [(NO_OP, i, 1) for i in (3, 4)])
        assert "already-applied" in caplog.text
        assert (node.raftCommitIndex, node.raftLastApplied) == (4, 4)
        assert terms(node, 2, 3) == [1, 1, 1]
    finally:
        node.destroy()
