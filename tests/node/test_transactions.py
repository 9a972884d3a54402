"""Transactional messages in-process (injected clock) and through a real node: halves stay
invisible, commit makes them visible exactly once, rollback discards them, orphans are
checked through the producer's Telemetry stream and rolled back after the max checks, and
all of it survives abrupt stops."""

from __future__ import annotations

import pytest

from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.services.transactions import HALF_TOPIC
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, message, pull, stubs
from tests.support.transactions import CHECK_MS, Transactions


@pytest.fixture
def tx(tmp_path):
    created = Transactions(tmp_path)
    yield created
    created.store.shutdown()
    created.loop.close()


def test_commit_makes_the_half_visible_exactly_once(tx):
    transaction_id = tx.send(b"paid")
    assert tx.visible() == []
    assert tx.end(transaction_id, pb.COMMIT) == pb.OK
    assert tx.visible() == [b"paid"]
    assert tx.end(transaction_id, pb.COMMIT) == pb.OK  # repeated: no second copy
    assert tx.visible() == [b"paid"]
    assert tx.end(transaction_id, pb.ROLLBACK) == pb.INVALID_TRANSACTION_ID
    (copy,) = tx.store.get_messages("orders", 0, 0, 1).messages
    assert copy.properties[PROPERTY_TRANSACTION_ID] == transaction_id


def test_a_half_beyond_the_read_cap_of_a_promoted_master_still_commits(tx):
    """A promoted master reads only what the old in-sync set confirmed until its own
    slaves ack; a half it holds past that point is pending, not removed by retention."""
    transaction_id = tx.send(b"paid")
    tx.store.set_confirmed_offset(0, new_epoch=True)  # after a promotion, before the acks
    assert tx.end(transaction_id, pb.COMMIT) == pb.OK
    tx.store.set_confirmed_offset(None, new_epoch=True)
    assert tx.visible() == [b"paid"]
    assert [op["kind"] for op in tx.ops()] == ["commit"]


def test_rollback_discards_and_bad_requests_are_refused(tx):
    transaction_id = tx.send(b"cancelled")
    assert tx.end(transaction_id, pb.ROLLBACK) == pb.OK
    assert tx.end(transaction_id, pb.COMMIT) == pb.INVALID_TRANSACTION_ID
    assert tx.visible() == []
    assert tx.end("no-such-id", pb.COMMIT) == pb.INVALID_TRANSACTION_ID
    other = tx.send(b"x")
    assert tx.end(other, pb.TRANSACTION_RESOLUTION_UNSPECIFIED) == pb.BAD_REQUEST
    assert tx.end(other, pb.COMMIT, topic="elsewhere") == pb.INVALID_TRANSACTION_ID
    assert tx.visible() == []


def test_an_unknown_source_number_still_resolves(tx):
    """Found by tests/node/test_fuzz_rpc.py: a source number outside TransactionSource (proto3
    takes any) failed the call unhandled; it only labels the record."""
    transaction_id = tx.send(b"from somewhere")
    assert tx.end(transaction_id, pb.COMMIT, source=-7) == pb.OK
    assert tx.visible() == [b"from somewhere"]
    assert tx.ops()[-1]["why"] == "source -7"


def test_orphans_are_offered_to_producers_then_rolled_back_after_max_checks(tx):
    transaction_id = tx.send(b"orphan")
    assert tx.check() == 0  # not due yet
    tx.now += CHECK_MS
    assert tx.check() == 1
    command = tx.loop.run_until_complete(tx.outbox.next()).recover_orphaned_transaction_command
    assert command.transaction_id == transaction_id
    assert command.message.topic.name == "orders" and command.message.body == b"orphan"
    tx.crash_and_reopen()  # the check count is in the log
    for _ in range(2):
        tx.now += CHECK_MS
        assert tx.check() == 1
    assert tx.service.pending == 1
    tx.now += CHECK_MS
    tx.check()  # the fourth: out of checks
    assert tx.service.pending == 0 and tx.visible() == []
    assert tx.ops()[-1]["kind"] == "rollback" and "3 checks" in tx.ops()[-1]["why"]
    assert tx.end(transaction_id, pb.COMMIT) == pb.INVALID_TRANSACTION_ID


def test_an_orphan_resolved_by_the_checker_commits(tx):
    transaction_id = tx.send(b"late")
    tx.now += CHECK_MS
    tx.check()
    assert tx.outbox.waiting == 1
    assert tx.end(transaction_id, pb.COMMIT) == pb.OK
    assert tx.visible() == [b"late"]


def test_a_crash_between_send_and_commit_still_commits_once(tx):
    transaction_id = tx.send(b"survives")
    committed = tx.send(b"done-before")
    assert tx.end(committed, pb.COMMIT) == pb.OK
    tx.crash_and_reopen()
    assert tx.service.pending == 1
    assert tx.end(committed, pb.COMMIT) == pb.OK  # remembered as resolved
    assert tx.end(transaction_id, pb.COMMIT) == pb.OK
    tx.crash_and_reopen()
    assert tx.visible() == [b"done-before", b"survives"]
    assert tx.service.pending == 0
    assert tx.store.max_offset_in_queue(HALF_TOPIC, 0) == 2


def end_transaction(messaging, transaction_id, resolution):
    return messaging.EndTransaction(
        rpc.EndTransactionRequest(
            topic=pb.Resource(name="payments"),
            message_id="T1",
            transaction_id=transaction_id,
            resolution=resolution,
            source=pb.SOURCE_CLIENT,
        )
    )


def test_node_sigkill_between_send_and_commit_ends_with_one_visible_message(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "payments", queues=1, message_type=api.TRANSACTION)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    sent = messaging.SendMessage(
        rpc.SendMessageRequest(
            messages=[message("payments", b"pay", "T1", message_type=pb.TRANSACTION)]
        )
    )
    assert sent.status.code == pb.OK
    (entry,) = sent.entries
    assert entry.message_id == "T1" and entry.transaction_id
    status, messages, _ = pull(messaging, "payments", 0, 0)
    assert status.code == pb.MESSAGE_NOT_FOUND and messages == []  # the half is invisible
    node.sigkill()

    node = start_node(data_dir)
    try:
        _, messaging, _ = stubs(node.address)
        assert end_transaction(messaging, entry.transaction_id, pb.COMMIT).status.code == pb.OK
        assert end_transaction(messaging, entry.transaction_id, pb.COMMIT).status.code == pb.OK
        status, messages, _ = pull(messaging, "payments", 0, 0)
        assert [m.system_properties.message_id for m in messages] == ["T1"], status
        unknown = end_transaction(messaging, "nope", pb.COMMIT)
        assert unknown.status.code == pb.INVALID_TRANSACTION_ID
    finally:
        node.sigkill()
