"""Orphan-transaction checks with producers on every node (``node/services/check_relay.py``): only
the master decides checks, and each check it records reaches the producers connected to
the other nodes, once, and only while fresh."""

from __future__ import annotations

from node.grpc.messaging import check_command
from node.grpc.telemetry_outbox import TelemetryOutbox
from node.services.check_relay import FRESH_MS, CheckRelay
from node.services.permissions import Permissions
from node.services.transactions import CheckTargets, TransactionService
from store.dispatch_request import DispatchBatch, DispatchRequest
from tests.support.transactions import CHECK_MS, PRODUCER, Transactions


def producers_of(topic: str) -> tuple[CheckTargets, TelemetryOutbox]:
    producers, outbox = CheckTargets(Permissions(False)), TelemetryOutbox()
    producers.register(
        outbox, PRODUCER, lambda _, half: outbox.offer(check_command(half)), topics=[topic]
    )
    return producers, outbox


def test_a_node_that_is_not_the_master_makes_no_checks_of_its_own(tmp_path):
    tx = Transactions(tmp_path)
    try:
        tx.send(b"orphan")
        master = [False]
        tx.service = TransactionService(
            tx.store,
            CHECK_MS,
            3,
            Permissions(False),
            clock_ms=lambda: tx.now,
            is_master=lambda: master[0],
        )
        tx.service.load()  # what a slave holds: the halves pending when it started
        tx.service.targets.register(
            tx.outbox,
            PRODUCER,
            lambda _, half: tx.outbox.offer(check_command(half)),
            topics=["orders"],
        )
        for _ in range(3):
            tx.now += CHECK_MS
            assert tx.check() == 0
        assert tx.outbox.waiting == 0 and tx.ops() == []
        master[0] = True  # promoted: checks from now on
        assert tx.check() == 1 and tx.outbox.waiting == 1
    finally:
        tx.store.shutdown()
        tx.loop.close()


def test_the_masters_checks_reach_producers_connected_to_another_node_while_fresh(tmp_path):
    tx = Transactions(tmp_path)  # its store plays the master's log and the slave's copy
    try:
        relayed_to, outbox = producers_of("orders")
        is_master = [False]
        relay = CheckRelay(tx.store, relayed_to, lambda: is_master[0], tx.loop, lambda: tx.now)
        tx.store.add_dispatch_listener(relay.on_dispatch, topics=CheckRelay.TOPICS)
        transaction_id = tx.send(b"orphan")
        tx.now += CHECK_MS
        assert tx.check() == 1  # the master offers it to its own producer, and records it
        assert tx.outbox.waiting == 1
        command = tx.loop.run_until_complete(outbox.next()).recover_orphaned_transaction_command
        assert command.transaction_id == transaction_id and command.message.body == b"orphan"
        assert relay.relayed == 1 and outbox.waiting == 0
        # The master's own records are not relayed a second time on the master.
        is_master[0] = True
        tx.now += CHECK_MS
        assert tx.check() == 1 and relay.relayed == 1
        # A record replayed long after it was made (a slave catching up) is not relayed.
        is_master[0] = False
        (check, *_) = [
            r
            for r in tx.store.get_messages("%SYS%TRANS_OP", 0, 0, 10).messages
            if r.properties["kind"] == "check"
        ]
        replayed = DispatchRequest(
            "%SYS%TRANS_OP", 0, 0, 0, 0, 0, check.store_timestamp_ms, 0, (), check.properties
        )
        relay.on_dispatch(DispatchBatch([], [replayed], 0))
        assert relay.relayed == 2
        tx.now += FRESH_MS + 1
        relay.on_dispatch(DispatchBatch([], [replayed], 0))
        assert relay.relayed == 2
    finally:
        tx.store.shutdown()
        tx.loop.close()
