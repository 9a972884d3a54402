"""The chaos checker on hand-made histories: each finding appears when (and only when) the
history holds it, and the verdict follows the mode's promise."""

from __future__ import annotations

from chaos.checker import check
from chaos.history import (
    FAILED,
    OK,
    UNKNOWN,
    Delivery,
    Fault,
    History,
    MasterSnapshot,
    Replica,
    StoredRecord,
)


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
