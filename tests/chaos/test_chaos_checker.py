"""The chaos checker on hand-made histories: each finding appears when (and only when) the
history holds it, and the verdict follows the mode's promise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chaos import checker, runner
from chaos.checker import check
from chaos.history import (
    DLQ_GROUP,
    FAILED,
    LITE_TOPIC,
    NACKED,
    NOT_ACKED,
    OK,
    PRIORITY_TOPIC,
    RELEASED,
    TOPIC,
    UNKNOWN,
    CatchUp,
    Delivery,
    Fault,
    History,
    MasterSnapshot,
    PopDelivery,
    Replica,
    Resend,
    ServedRecord,
    StoredRecord,
    doomed,
)
from chaos.report import summary


def history(mode: str, outcomes: dict[str, str], stored: list[str], **extra) -> History:
    """Writer 0 sends ``w0-0``, ``w0-1``...; ``stored`` is the final log of queue 0 in
    order, identical on three replicas."""
    h = History(mode, duration_s=10.0)
    for seq, (body, outcome) in enumerate(outcomes.items()):
        send = h.invoke(0, seq, body, float(seq))
        h.complete(send, outcome, seq + 0.01)
    records = [StoredRecord(0, i, i * 100, body) for i, body in enumerate(stored)]
    end = len(stored) * 100
    h.replicas = [
        Replica(f"node-{i}", "MASTER" if i == 1 else "SLAVE", end, records, {end: "same"})
        for i in (1, 2, 3)
    ]
    for key, value in extra.items():
        setattr(h, key, value)
    return h


def sends(count: int, outcome: str = OK) -> dict[str, str]:
    return {f"w0-{i}": outcome for i in range(count)}


def test_a_clean_history_is_valid_in_every_mode():
    for mode in ("sync-sync-flush", "async-async-flush"):
        found = check(history(mode, sends(5), [f"w0-{i}" for i in range(5)]))
        assert found.valid, found.violations
        assert found.acknowledged == 5 and not found.lost


def test_lost_acknowledged_writes_are_split_by_prefix_middle_and_suffix():
    found = check(history("sync-sync-flush", sends(10), ["w0-2", "w0-3", "w0-5", "w0-7"]))
    assert found.lost_by_position == {"prefix": 2, "middle": 2, "suffix": 2}
    assert not found.valid and "6 acknowledged sends lost" in found.violations[0]


def test_unknown_outcomes_present_are_recovered_and_absent_ones_are_fine():
    outcomes = {"w0-0": OK, "w0-1": UNKNOWN, "w0-2": UNKNOWN, "w0-3": OK}
    found = check(history("sync-sync-flush", outcomes, ["w0-0", "w0-1", "w0-3"]))
    assert found.valid and found.recovered == 1


def test_duplicates_unexpected_refused_holes_and_reordering_are_violations():
    outcomes = {"w0-0": OK, "w0-1": OK, "w0-2": FAILED}
    found = check(history("sync-sync-flush", outcomes, ["w0-1", "w0-0", "w0-0", "ghost", "w0-2"]))
    assert found.duplicated == ["w0-0"]
    assert found.unexpected == ["ghost"]
    assert found.failed_but_present == ["w0-2"]
    assert found.order_violations == ["queue 0 offset 1", "queue 0 offset 2"]
    h = history("sync-sync-flush", sends(2), ["w0-0", "w0-1"])
    h.replicas[0].records = [StoredRecord(0, 0, 0, "w0-0"), StoredRecord(0, 2, 100, "w0-1")]
    h.replicas[0].log_end = 10_000  # the longest log is the authoritative one
    assert check(h).queue_holes == {"0": [1]}


def test_replicas_that_differ_to_their_common_length_are_reported():
    h = history("async-sync-flush", sends(2), ["w0-0", "w0-1"])
    h.replicas[2].digest_to = {200: "other"}
    found = check(h)
    assert set(found.replicas_differ) == {"node-1", "node-2", "node-3"} and not found.valid


def test_async_loss_is_allowed_only_beyond_the_next_epochs_start():
    # The deposed master had w0-3 at 300 and w0-4 at 400; epoch 2 started at 350.
    snapshot = MasterSnapshot("node-1", 1, {f"w0-{i}": i * 100 for i in range(5)})
    kept = ["w0-0", "w0-1", "w0-2"]
    found = check(
        history(
            "async-async-flush", sends(5), kept, snapshots=[snapshot], epochs=[(1, 0), (2, 350)]
        )
    )
    assert found.lost == ["w0-3", "w0-4"] and found.lost_within_async_bound == ["w0-4"]
    assert found.violations == ["1 acknowledged sends lost that the slaves had before the fault"]
    # The same loss under SYNC is a violation outright.
    found = check(history("sync-async-flush", sends(5), kept))
    assert not found.valid and found.lost_by_position["suffix"] == 2


def test_async_loss_cut_into_a_rollback_file_is_allowed_without_a_fault_snapshot():
    # No fault deposed the master (the controller did, on its own): no snapshot, but the
    # node cut w0-4 when it rejoined and kept it in its rollback file.
    kept = ["w0-0", "w0-1", "w0-2"]
    found = check(history("async-sync-flush", sends(5), kept, rolled_back=["w0-4"]))
    assert found.lost_within_async_bound == ["w0-4"]
    assert found.violations == ["1 acknowledged sends lost that the slaves had before the fault"]
    # Under SYNC replication a rollback file excuses nothing.
    found = check(history("sync-sync-flush", sends(5), kept, rolled_back=["w0-3", "w0-4"]))
    assert found.violations == ["2 acknowledged sends lost {'prefix': 0, 'middle': 0, 'suffix': 2}"]
    h = history("async-async-flush", sends(5), kept, rolled_back=["w0-3", "w0-4"])
    assert History.from_json(h.to_json()).rolled_back == ["w0-3", "w0-4"]
    assert check(h).valid


def test_a_body_delivered_from_another_offset_than_where_it_sits_is_a_violation():
    stored = ["w0-0", "w0-1"]
    for mode in ("sync-sync-flush", "async-async-flush"):
        deliveries = [Delivery(1.0, "pull-1", 0, 0, "w0-0"), Delivery(1.0, "pull-1", 0, 0, "w0-1")]
        pop = [popped("w0-1", 1.0), replace(popped("w0-0", 2.0), queue_id=2)]
        found = check(history(mode, sends(2), stored, deliveries=deliveries, pop_deliveries=pop))
        assert found.misplaced_deliveries == [
            "pop: w0-0 delivered from queue 2 offset 0, stored at queue 0 offset 0",
            "pull-1: w0-1 delivered from queue 0 offset 0, stored at queue 0 offset 1",
        ]
        assert found.violations == ["2 deliveries from another queue offset than the body's"]


def test_a_lite_delivery_is_placed_by_its_commitlog_offset():
    """A lite topic's offsets are CommitLog offsets: a lite delivery sits where the record
    is in the log, not at the record's queue offset in the LITE topic."""
    h = history("sync-sync-flush", sends(2), [])
    records = [StoredRecord(1, i, 4096 + i * 100, f"w0-{i}", LITE_TOPIC) for i in range(2)]
    h.replicas = [replace(r, records=records) for r in h.replicas]

    def lite(body: str, offset: int) -> PopDelivery:
        return replace(popped(body, 1.0), topic=LITE_TOPIC, queue_id=1, queue_offset=offset)

    h.pop_deliveries = [lite("w0-0", 4096), lite("w0-1", 4196)]
    assert check(h).misplaced_deliveries == []
    h.pop_deliveries = [lite("w0-0", 4096), lite("w0-1", 1)]  # its queue offset: wrong
    assert check(h).misplaced_deliveries == [
        f"pop: w0-1 delivered from queue {LITE_TOPIC}:1 offset 1, stored at queue"
        f" {LITE_TOPIC}:1 offset 4196"
    ]


def test_a_priority_receive_must_hand_out_the_highest_priority_first():
    """Within one receive of the PRIORITY topic priorities never rise (queue = priority);
    a later receive may start high again."""

    def given(body: str, queue_id: int, asked_s: float) -> PopDelivery:
        return replace(popped(body, asked_s), topic=PRIORITY_TOPIC, queue_id=queue_id)

    in_order = [given("w0-0", 3, 1.0), given("w0-1", 3, 1.0), given("w0-2", 1, 1.0)]
    in_order += [given("w0-3", 2, 2.0), given("w0-4", 0, 2.0)]  # the next receive
    assert checker.priority_order_violations(in_order) == []
    inverted = [given("w0-0", 1, 1.0), given("w0-1", 3, 1.0)]
    assert checker.priority_order_violations(inverted) == [
        "pop: w0-1 (priority 3) handed out after w0-0 (priority 1) in the receive of 1.010 s"
    ]
    h = history("async-async-flush", sends(2), [], pop_deliveries=inverted)
    assert "1 receives that handed out a lower priority first" in check(h).violations


def test_a_delivered_message_later_lost_breaks_sync_only():
    deliveries = [Delivery(1.0, "pull-1", 0, 1, "w0-1"), Delivery(1.0, "pull-1", 0, 9, "bogus")]
    outcomes = {"w0-0": OK, "w0-1": UNKNOWN}
    found = check(history("sync-sync-flush", outcomes, ["w0-0"], deliveries=deliveries))
    assert found.delivered_then_lost == ["w0-1"] and found.delivered_unexpected == ["bogus"]
    assert len(found.violations) == 2


def test_unavailability_is_measured_from_each_fault_to_the_next_acknowledged_send():
    h = history("sync-sync-flush", sends(6), [f"w0-{i}" for i in range(6)])
    h.sends[2].outcome = h.sends[3].outcome = FAILED
    h.faults = [Fault("kill-master", ["node-1"], "master", 1.5, 2.5)]
    h.duration_s = 6.0
    (row,) = check(h).unavailability
    assert row["writes_back_after_s"] == round(4.01 - 1.5, 3) and row["window_s"] == 1.0
    assert row["longest_gap_s"] == round(4.01 - 1.5, 3)  # from the fault to w0-4's ack


def test_the_last_faults_longest_gap_ends_with_the_writers_not_the_run():
    h = history("sync-sync-flush", sends(6), [f"w0-{i}" for i in range(6)])
    h.faults = [Fault("kill-master", ["node-1"], "master", 4.5, 4.7)]
    h.duration_s = 40.0  # the consumers caught up long after the last send
    (row,) = check(h).unavailability
    assert row["longest_gap_s"] == round(5.01 - 4.5, 3)


def popped(
    body: str,
    asked_s: float,
    ack: str = OK,
    group: str = "pop",
    message_group: str = "",
    attempt: int = 1,
) -> PopDelivery:
    """A POP delivery of ``body`` asked for at ``asked_s``, its ack done 0.1 s later, from
    where ``history`` stores ``w0-N``: queue 0 of the workload topic, offset N."""
    return PopDelivery(
        asked_s,
        asked_s + 0.01,
        group,
        TOPIC,
        0,
        int(body.rpartition("-")[2]),
        body,
        attempt,
        message_group,
        ack,
        acked_s=None if ack in (NOT_ACKED, RELEASED) else asked_s + 0.1,
        ack_invoked_s=None if ack in (NOT_ACKED, RELEASED) else asked_s + 0.05,
    )


def test_a_pop_redelivery_after_a_successful_ack_breaks_sync_only():
    stored = [f"w0-{i}" for i in range(3)]
    # w0-1's ack failed, so its redelivery is fine; w0-2 acked then handed out again.
    pops = [
        popped("w0-0", 1.0),
        popped("w0-1", 1.0, ack=UNKNOWN),
        popped("w0-1", 4.0),
        popped("w0-2", 4.0),
        popped("w0-2", 6.0, attempt=2),
    ]
    extra = {"pop_deliveries": pops, "consumers": {"pop": TOPIC}}
    found = check(history("sync-sync-flush", sends(3), stored, **extra))
    assert found.pop_deliveries == 5 and found.pop_redeliveries == 2
    assert len(found.acked_then_redelivered) == 1
    assert found.acked_then_redelivered[0].startswith("pop: w0-2 acked at 4.100 s")
    assert found.violations == ["1 POP deliveries of messages already acked"]
    # ASYNC: a new master may lack the ack record; reported, not a violation.
    found = check(history("async-sync-flush", sends(3), stored, **extra))
    assert found.valid and len(found.acked_then_redelivered) == 1
    # Without the second delivery of w0-2, SYNC is valid.
    extra["pop_deliveries"] = pops[:4]
    assert check(history("sync-sync-flush", sends(3), stored, **extra)).valid


def test_a_power_loss_of_every_node_excuses_a_forgotten_ack_under_async_flush_only():
    pops = [popped("w0-0", 1.0), popped("w0-0", 5.0, attempt=1)]
    cut = [Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 2.0, 3.0)]
    extra = {"pop_deliveries": pops, "consumers": {"pop": TOPIC}, "faults": cut}
    found = check(history("sync-async-flush", sends(1), ["w0-0"], **extra))
    assert found.valid and len(found.redelivered_after_power_loss) == 1
    found = check(history("sync-sync-flush", sends(1), ["w0-0"], **extra))
    assert not found.valid and len(found.acked_then_redelivered) == 1


def test_a_power_loss_excuses_an_ack_sent_before_it_even_if_answered_after():
    # The fault is recorded once every node is dead; the ack's answer, already on its way,
    # reached the client 5 ms later (seen in a long sync-async-flush run). Sent at 1.05 s,
    # before the cut at 1.08 s: the node may have written its record, unsynced, and died.
    pops = [popped("w0-0", 1.0), popped("w0-0", 5.0, attempt=2)]
    cut = [Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 1.08, 3.0)]
    extra = {"pop_deliveries": pops, "consumers": {"pop": TOPIC}, "faults": cut}
    found = check(history("sync-async-flush", sends(1), ["w0-0"], **extra))
    assert found.valid and len(found.redelivered_after_power_loss) == 1
    # An ack sent after the cut went to a restarted node: that cut does not excuse it.
    cut[0].start_s = 1.04
    found = check(history("sync-async-flush", sends(1), ["w0-0"], **extra))
    assert not found.valid and len(found.acked_then_redelivered) == 1


def test_acknowledged_sends_never_delivered_to_a_group_break_sync_once_waited_for():
    stored = [f"w0-{i}" for i in range(3)]
    extra = {
        "deliveries": [Delivery(1.0, "pull", 0, i, f"w0-{i}") for i in range(3)],
        "pop_deliveries": [popped("w0-0", 1.0)],
        "consumers": {"pull": TOPIC, "pop": TOPIC},
        "catch_up": CatchUp(20.0, 20.0, False, {"pop": "lag 2, in flight 0"}),
    }
    found = check(history("sync-sync-flush", sends(3), stored, **extra))
    assert found.never_delivered == {"pop": ["w0-1", "w0-2"]}
    assert found.violations == [
        "2 acknowledged sends never delivered to pop",
        "1 consumer groups not caught up after heal {'pop': 'lag 2, in flight 0'}",
    ]
    # Not waited for (no catch-up), or ASYNC once caught up: reported only.
    extra["catch_up"] = None
    assert check(history("sync-sync-flush", sends(3), stored, **extra)).valid
    extra["catch_up"] = CatchUp(20.0, 1.0, True)
    found = check(history("async-async-flush", sends(3), stored, **extra))
    assert found.valid and found.never_delivered == {"pop": ["w0-1", "w0-2"]}
    # A group that never caught up breaks every mode (a long ASYNC run's pull consumer
    # died and left 106,806 acknowledged messages undelivered behind a "valid" verdict).
    extra["catch_up"] = CatchUp(20.0, 20.0, False, {"pull": "lag 9, in flight 0"})
    found = check(history("async-async-flush", sends(3), stored, **extra))
    assert found.violations == [
        "1 consumer groups not caught up after heal {'pull': 'lag 9, in flight 0'}"
    ]
    # Lost or unacknowledged sends are not expected.
    outcomes = {"w0-0": OK, "w0-1": UNKNOWN, "w0-2": OK}
    found = check(history("sync-sync-flush", outcomes, ["w0-0", "w0-1"], **extra))
    assert found.never_delivered == {} and found.lost == ["w0-2"]


def test_a_delivery_left_to_expire_counts_only_once_it_is_delivered_again():
    # The consumer let w0-1 expire on purpose: the node owes a redelivery.
    stored = [f"w0-{i}" for i in range(2)]
    pops = [popped("w0-0", 1.0), popped("w0-1", 1.0, ack=RELEASED)]
    extra = {
        "pop_deliveries": pops,
        "consumers": {"pop": TOPIC},
        "catch_up": CatchUp(20.0, 1.0, True),
    }
    found = check(history("sync-sync-flush", sends(2), stored, **extra))
    assert found.pop_released == 1 and found.never_delivered == {"pop": ["w0-1"]}
    assert found.violations == ["1 acknowledged sends never delivered to pop"]
    # Delivered again (second attempt) and acked: valid, one redelivery, not after an ack.
    extra["pop_deliveries"] = [*pops, popped("w0-1", 3.5, attempt=2)]
    found = check(history("sync-sync-flush", sends(2), stored, **extra))
    assert found.valid and found.never_delivered == {}
    assert found.pop_redeliveries == 1 and found.acked_then_redelivered == []


def test_fifo_groups_must_first_deliver_in_send_order_redeliveries_aside():
    # Writer 0 sends w0-0..w0-4 in message group g (the test's bodies, a FIFO topic).
    stored = [f"w0-{i}" for i in range(5)]
    in_order = [
        popped("w0-0", 1.0, ack=FAILED, message_group="g"),
        popped("w0-1", 2.0, ack=UNKNOWN, message_group="g"),
        popped("w0-1", 4.0, message_group="g", attempt=2),  # redelivered: fine
        popped("w0-0", 4.5, message_group="g", attempt=2),  # an older one again: fine
        popped("w0-2", 5.0, message_group="g"),
        popped("w0-4", 6.0, message_group="h"),  # another group: independent
        popped("w0-3", 7.0, message_group="h"),  # ... unless it is out of order there
    ]
    h = history("sync-sync-flush", sends(5), stored, pop_deliveries=in_order[:5])
    assert check(h).valid
    h = history("sync-sync-flush", sends(5), stored, pop_deliveries=in_order)
    found = check(h)
    assert found.fifo_order_violations == ["pop/h: w0-3 first delivered at 7.010 s, after w0-4"]
    assert found.violations == ["1 FIFO message group order violations"]
    # An unacknowledged send delivered late may have been stored late: not a violation.
    outcomes = {**sends(5), "w0-3": UNKNOWN}
    assert check(history("async-sync-flush", outcomes, stored, pop_deliveries=in_order)).valid


def test_a_fifo_delivery_left_to_expire_comes_back_before_its_group_goes_on():
    stored = [f"w0-{i}" for i in range(5)]
    released = [
        popped("w0-0", 1.0, message_group="g"),
        popped("w0-1", 2.0, ack=RELEASED, message_group="g"),  # left to expire ...
        popped("w0-2", 2.0, ack=RELEASED, message_group="g"),  # ... its batch-mate with it
        popped("w0-3", 3.0, message_group="h"),  # another message group goes on
        popped("w0-1", 4.0, message_group="g", attempt=2),  # back first, in order
        popped("w0-2", 4.0, message_group="g", attempt=2),
        popped("w0-4", 4.5, message_group="g"),
    ]
    assert check(history("sync-sync-flush", sends(5), stored, pop_deliveries=released)).valid
    overtaken = [*released[:3], popped("w0-4", 3.0, message_group="g"), *released[4:6]]
    found = check(history("sync-sync-flush", sends(5), stored, pop_deliveries=overtaken))
    assert found.fifo_release_overtaken == [
        "pop/g: w0-4 delivered at 3.010 s before w0-1, left to expire at 2.010 s, came back"
    ]
    assert found.violations == ["1 FIFO deliveries that overtook one left to expire"]
    # ASYNC reports it; and a body gone from the final log is not waited for.
    found = check(history("async-sync-flush", sends(5), stored, pop_deliveries=overtaken))
    assert found.valid and len(found.fifo_release_overtaken) == 1
    gone = {**sends(5), "w0-1": UNKNOWN, "w0-2": UNKNOWN}
    kept = ["w0-0", "w0-1", "w0-3", "w0-4"]
    overtaken = [*released[:3], popped("w0-3", 3.0, message_group="g")]
    found = check(history("async-sync-flush", gone, kept, pop_deliveries=overtaken))
    assert len(found.fifo_release_overtaken) == 1  # w0-1 is still there: waited for
    kept.remove("w0-1")
    found = check(history("async-sync-flush", gone, kept, pop_deliveries=overtaken))
    assert found.fifo_release_overtaken == []


def test_what_the_cluster_serves_must_be_the_final_log():
    stored = [f"w0-{i}" for i in range(4)]
    served = [ServedRecord(TOPIC, 0, i, body) for i, body in enumerate(stored)]
    for mode in ("sync-sync-flush", "async-async-flush"):
        found = check(history(mode, sends(4), stored, served=served))
        assert found.valid and found.served_records == 4 and not found.served_differs
    wrong = [*served[:2], ServedRecord(TOPIC, 0, 2, "w0-3")]
    found = check(history("async-async-flush", sends(4), stored, served=wrong))
    assert found.served_differs == [
        "queue 0 offset 2: served w0-3, the log holds w0-2",
        "queue 0 offset 3: w0-3 in the log, never served",
    ]
    assert found.violations == ["2 differences between the records served and the final log"]
    # Not read (an older history): nothing to compare.
    found = check(history("sync-sync-flush", sends(4), stored))
    assert found.valid and found.served_records == -1
    again = History.from_json(history("sync-sync-flush", sends(4), stored, served=wrong).to_json())
    assert again.served == wrong


def test_a_dead_lettered_message_is_a_violation_in_every_mode():
    # The workload acks every delivery, so a message in a dead-letter topic means the
    # node used up its attempts without 16 failed deliveries.
    for mode in ("sync-sync-flush", "async-async-flush"):
        h = history(mode, sends(2), ["w0-0", "w0-1"])
        for replica in h.replicas:
            replica.dead_lettered = ["w0-1"]
        found = check(h)
        assert found.dead_lettered == ["w0-1"]
        assert found.violations == ["1 messages dead-lettered although every delivery is acked"]
        assert History.from_json(h.to_json()).replicas[0].dead_lettered == ["w0-1"]


def dead_letter_group_history(mode: str, in_dlq: list[str], **extra) -> History:
    """Eleven acknowledged sends, all stored; the dead-letter group (the only consumer,
    caught up) nacked the doomed one, w0-10, and acked the rest; ``in_dlq`` is its
    dead-letter topic on every replica."""
    bodies = [f"w0-{i}" for i in range(11)]
    deliveries = [
        popped(b, 20.0 + i, NACKED if doomed(b) else OK, DLQ_GROUP) for i, b in enumerate(bodies)
    ]
    h = history(mode, sends(11), bodies, pop_deliveries=deliveries, **extra)
    h.consumers, h.catch_up = {DLQ_GROUP: TOPIC}, CatchUp(20.0, 1.0, True)
    for replica in h.replicas:
        replica.dead_lettered_on_purpose = list(in_dlq)
    return h


def test_the_doomed_message_must_reach_the_dead_letter_topic():
    assert [b for b in sends(40) if doomed(b)] == ["w0-10", "w0-30"]
    for mode in ("sync-sync-flush", "async-async-flush"):
        found = check(dead_letter_group_history(mode, ["w0-10"]))
        assert found.valid, found.violations
        assert found.doomed_dead_lettered == 1 and found.pop_nacked == 1
    found = check(dead_letter_group_history("sync-sync-flush", []))
    assert found.doomed_not_dead_lettered == ["w0-10"]
    assert found.violations == ["1 doomed acknowledged sends never dead-lettered"]
    # ASYNC reports it (a new master's POP cursor may pass a position it filled anew).
    found = check(dead_letter_group_history("async-sync-flush", []))
    assert found.valid and found.doomed_not_dead_lettered == ["w0-10"]
    # Under ASYNC_FLUSH a power loss of every node after its last nack (30.01 s) may take
    # the dead letter, written but not yet on disk (a sync-async-flush run found one);
    # one before that nack, or under SYNC_FLUSH, excuses nothing.
    every = ["node-1", "node-2", "node-3"]
    after = [Fault("power-loss-all", every, "all", 30.5, 31.0)]
    found = check(dead_letter_group_history("sync-async-flush", [], faults=after))
    assert found.valid and not found.doomed_not_dead_lettered
    assert found.dead_letters_lost_to_power == [
        "chaos-dlq: w0-10 last nacked at 30.010 s, its dead letter lost to a power loss"
    ]
    before = [Fault("power-loss-all", every, "all", 29.5, 29.8)]
    for mode, cut in (("sync-async-flush", before), ("sync-sync-flush", after)):
        found = check(dead_letter_group_history(mode, [], faults=cut))
        assert found.violations == ["1 doomed acknowledged sends never dead-lettered"]
        assert not found.dead_letters_lost_to_power
    # Not waited for, or lost on the way: nothing to promise.
    h = dead_letter_group_history("sync-sync-flush", [])
    h.catch_up = None
    assert check(h).valid
    h = dead_letter_group_history("async-sync-flush", [])
    for replica in h.replicas:
        replica.records = [r for r in replica.records if r.body != "w0-10"]
    h.rolled_back = ["w0-10"]
    assert check(h).doomed_not_dead_lettered == []


def test_a_message_the_group_acked_must_not_be_dead_lettered():
    found = check(dead_letter_group_history("sync-sync-flush", ["w0-10", "w0-3"]))
    assert found.dead_lettered_after_ack == ["chaos-dlq: w0-3 acked at 23.050 s"]
    assert found.violations == ["1 messages dead-lettered after a successful ack"]
    assert check(dead_letter_group_history("async-async-flush", ["w0-10", "w0-3"])).valid
    # A power loss of every node after the ack may have taken the ack record (ASYNC_FLUSH).
    cut = [Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 30.0, 31.0)]
    found = check(dead_letter_group_history("sync-async-flush", ["w0-10", "w0-3"], faults=cut))
    assert found.valid and not found.dead_lettered_after_ack
    assert found.redelivered_after_power_loss == [
        "chaos-dlq: w0-3 acked at 23.050 s, dead-lettered after a power loss"
    ]
    # One whose acks all failed used up its attempts: reported, not a violation.
    h = dead_letter_group_history("sync-sync-flush", ["w0-10", "w0-4"])
    h.pop_deliveries[4].ack = UNKNOWN
    found = check(h)
    assert found.valid and found.dead_lettered_unacked == ["w0-4"]


def resent_history(mode: str, resends: list[Resend], given_back_at: list[float]) -> History:
    """The dead-letter group's history, w0-10 in its DLQ at offset 0 (message id ``id-10``),
    ``resends`` of it, and a delivery of it from the DLQ at each of ``given_back_at``,
    acked (an ack that must not count as one before it was dead-lettered)."""
    h = dead_letter_group_history(mode, ["w0-10"])
    for at in given_back_at:
        delivery = replace(
            popped("w0-10", at, OK, DLQ_GROUP), queue_id=2**31 - 1, queue_offset=0, resent=True
        )
        h.pop_deliveries.append(replace(delivery, message_id="id-10"))
    h.resends = resends
    return h


def resend_of_w0_10(at_s: float, resent: bool = True, outcome: str = OK) -> Resend:
    return Resend(
        at_s, "group-1", [0], ["id-10"], at_s + 0.1, outcome, resent=[0] if resent else []
    )


def test_a_dead_letter_answered_resent_must_be_delivered_again_from_the_dlq():
    for mode in ("sync-sync-flush", "async-async-flush"):
        found = check(resent_history(mode, [resend_of_w0_10(40.0)], [40.05]))
        assert found.valid, found.violations
        assert (found.resent, found.resent_delivered_again) == (1, 1)
        assert found.resend_outcomes == {OK: 1}
        assert not found.misplaced_deliveries and not found.dead_lettered_after_ack
    # Handed out only before the call (a delivery then is not the resend's), or never.
    for given_back_at in ([39.0], []):
        found = check(resent_history("sync-sync-flush", [resend_of_w0_10(40.0)], given_back_at))
        assert found.resent_never_delivered == [
            "group-1 DLQ offset 0 (id-10) resent at 40.000 s, never delivered again"
        ]
        assert found.violations == ["1 dead letters answered resent, never delivered again"]
    # ASYNC reports it; a call whose outcome is unknown or answered "resent before"
    # promises nothing; a power loss of every node after it excuses it under ASYNC_FLUSH.
    assert check(resent_history("async-sync-flush", [resend_of_w0_10(40.0)], [])).valid
    unknown = [resend_of_w0_10(40.0, outcome=UNKNOWN), resend_of_w0_10(41.0, resent=False)]
    assert check(resent_history("sync-sync-flush", unknown, [])).valid
    cut = [Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 45.0, 46.0)]
    h = resent_history("sync-async-flush", [resend_of_w0_10(40.0)], [])
    h.faults = cut
    found = check(h)
    assert found.valid and len(found.resends_after_power_loss) == 1
    # Not waited for: nothing to promise about deliveries.
    h = resent_history("sync-sync-flush", [resend_of_w0_10(40.0)], [])
    h.catch_up = None
    assert check(h).valid


def test_a_dead_letter_answered_resent_twice_breaks_sync():
    twice = [resend_of_w0_10(40.0), resend_of_w0_10(50.0)]
    found = check(resent_history("sync-sync-flush", twice, [40.05, 50.05]))
    assert found.resent_twice == [
        "group-1 DLQ offset 0 (id-10) resent at 40.100 s and again at 50.000 s"
    ]
    assert found.violations == [  # and its ack did not hold: delivered after it again
        "1 POP deliveries of messages already acked",
        "1 dead letters answered resent twice",
    ]
    assert check(resent_history("async-async-flush", twice, [40.05, 50.05])).valid
    # Another message at the same offset (a new master's DLQ) is another dead letter.
    other = replace(resend_of_w0_10(50.0), message_ids=["id-11"])
    assert not check(resent_history("sync-sync-flush", [twice[0], other], [40.05])).resent_twice
    h = resent_history("sync-async-flush", twice, [40.05, 50.05])
    h.faults = [Fault("power-loss-all", ["node-1", "node-2", "node-3"], "all", 45.0, 46.0)]
    assert check(h).valid
    again = History.from_json(h.to_json())
    assert again.resends == twice and again.pop_deliveries[-1].resent
    assert "dead-letter resends {'ok': 2}: resent 2, delivered again 2" in summary(check(h))


def test_a_history_without_the_dead_letter_group_has_no_such_findings():
    h = dead_letter_group_history("sync-sync-flush", [])
    h.consumers = {"pop": TOPIC}
    for d in h.pop_deliveries:
        d.group = "pop"
    found = check(h)
    assert found.valid and not found.doomed_not_dead_lettered
    again = History.from_json(dead_letter_group_history("sync-sync-flush", ["w0-10"]).to_json())
    assert again.replicas[0].dead_lettered_on_purpose == ["w0-10"]
    assert again.pop_deliveries[10].ack == NACKED


def test_pop_deliveries_and_the_catch_up_survive_a_round_trip_through_json():
    h = history("sync-sync-flush", sends(1), ["w0-0"], pop_deliveries=[popped("w0-0", 1.0)])
    h.consumers, h.catch_up = {"pop": TOPIC}, CatchUp(20.0, 1.5, True)
    again = History.from_json(h.to_json())
    assert again.pop_deliveries == h.pop_deliveries and again.catch_up == h.catch_up
    assert again.consumers == {"pop": TOPIC} and again.replicas[0].records[0].topic == TOPIC


def test_crashed_nodes_and_exceptions_in_node_logs_are_violations(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-1.log").write_text(
        'ready\nTraceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "ValueError: epoch start 5 is before 9\n"
    )
    (logs / "node-2.log").write_text(
        'Traceback (most recent call last):\n  File "server.pyx", line 7\n'
        'grpc._cython.cygrpc.ExecuteBatchError: Failed "execute_batch"\n'
    )
    errors = runner.errors_in_logs(str(logs))
    assert errors == [
        "node-1.log: ValueError: epoch start 5 is before 9"
        """ (innermost: File "x.py", line 1, in <module>) after 'ready'"""
    ]
    history = History("sync-sync-flush")
    assert checker.check(history).valid
    history.node_errors = errors
    history.crashes = ["node-2 found exited at 12.0 s"]
    found = checker.check(history)
    assert any("exceptions in the nodes' logs" in v for v in found.violations)
    assert any("found exited" in v for v in found.violations)


def test_an_answer_the_workload_could_not_decode_or_a_thread_that_died_is_a_violation():
    """A long async run once had its pull consumer thread end on a zeroed record a node
    returned; the run went on without a word about it. Such errors are findings."""
    from chaos import workload

    history = History("async-sync-flush")

    def dies() -> None:
        raise AssertionError("no message record at 0")

    with pytest.raises(AssertionError):
        workload.recording_errors(history, "pull consumer", 0.0, dies)()
    assert len(history.client_errors) == 1
    assert (
        "pull consumer ended: AssertionError('no message record at 0')"
        in (history.client_errors[0])
    )
    assert History.from_json(history.to_json()).client_errors == history.client_errors
    found = checker.check(history)
    assert not found.valid
    assert any("could not decode or exceptions in it" in v for v in found.violations)


def test_a_replica_whose_store_cannot_open_is_a_finding_not_a_crash(tmp_path):
    """The final drain opens every node's store; one that fails its own checks (a long
    run once stopped on an assertion there, with no report written) is reported beside
    the replicas that could be read."""
    from chaos import workload
    from store.config import StoreConfig
    from store.message_store import MessageStore

    small = dict(commitlog_segment_bytes=1 << 20, max_message_body_bytes=8192, index_slot_count=64)
    good, bad = tmp_path / "good", tmp_path / "bad"
    for data in (good, bad):
        MessageStore.open(StoreConfig(str(data), **small)).shutdown()
    (bad / "commitlog" / "12345").write_bytes(b"")  # not a 20-digit segment name
    replicas, unreadable = workload.drain(
        [("node-1", "MASTER", str(good)), ("node-2", "SLAVE", str(bad))], small
    )
    assert [r.node for r in replicas] == ["node-1"]
    assert len(unreadable) == 1 and unreadable[0].startswith("node-2: store not readable")


def test_a_damaged_rollback_file_is_a_finding_not_a_crash(tmp_path):
    from chaos import workload
    from ha import rollback

    for node, content in (("node-1", b""), ("node-2", b"\0\0\0\x10garbage-garbage")):
        directory = tmp_path / node / rollback.ROLLBACK_DIRECTORY
        directory.mkdir(parents=True)
        (directory / f"{1:010d}-{0:020d}.log").write_bytes(content)
    bodies, unreadable = workload.rolled_back([str(tmp_path / "node-1"), str(tmp_path / "node-2")])
    assert bodies == []
    assert len(unreadable) == 1 and "node-2" in unreadable[0] and "not readable" in unreadable[0]


def test_outcomes_are_counted_apart_for_the_sends_a_fault_hit():
    """Sends at 0..5 s; a kill from 1.5 to 3.5 s hits w0-2 and w0-3 (one unknown)."""
    outcomes = {"w0-0": OK, "w0-1": OK, "w0-2": UNKNOWN, "w0-3": FAILED, "w0-4": OK}
    faults = [Fault("kill", ["node-1"], "master", 1.5, 3.5)]
    found = check(history("sync-sync-flush", outcomes, ["w0-0", "w0-1", "w0-4"], faults=faults))
    assert found.outcomes_in_faults == {
        OK: 0,
        "not-replicated": 0,
        FAILED: 1,
        UNKNOWN: 1,
        "pending": 0,
    }
    assert found.outcomes[OK] == 3
    assert "during faults" in summary(found) and "(unknown: 50.0 %)" in summary(found)
