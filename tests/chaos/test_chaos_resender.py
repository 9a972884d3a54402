"""The chaos workload's dead-letter resender (``chaos.workload.DeadLetterResender``) over a
fake Admin: it resends only what the DLQ says was not resent, records each call and its
answer, counts for the catch-up what was not delivered again, and reads past what is done."""

from __future__ import annotations

import pytest

from chaos.history import DLQ_GROUP, OK, UNKNOWN, History
from chaos.workload import DeadLetterResender
from ferrymq.client import FerryError
from ferrymq.client.admin import DeadLetter, DeadLetterPage, DeadLetterResend


class FakeAdmin:
    """A DLQ of ``ids`` (offset i holds ``ids[i]``) on broker group ``group-1``, pages of
    two; resends mark offsets resent, or fail with ``fail``."""

    def __init__(self, ids: list[str]) -> None:
        self.ids, self.resent, self.reads, self.fail = ids, set(), [], None

    def dead_letters(self, group, broker_group="", from_offset=-1, limit=50):
        assert group == DLQ_GROUP
        self.reads.append(from_offset)
        offsets = range(max(0, from_offset), min(len(self.ids), max(0, from_offset) + 2))
        entries = tuple(
            DeadLetter(o, self.ids[o], "chaos", "", "", 3, 0, 4, o in self.resent) for o in offsets
        )
        return DeadLetterPage("group-1", 0, len(self.ids), entries)

    def resend_dead_letters(self, group, offsets=(), broker_group=""):
        if self.fail is not None:
            raise self.fail
        fresh = tuple(o for o in offsets if o not in self.resent)
        self.resent.update(fresh)
        return DeadLetterResend(broker_group, fresh, tuple(sorted(set(offsets) - set(fresh))), ())


def test_it_resends_what_was_not_resent_and_waits_for_it_to_come_back():
    history = History("sync-sync-flush")
    resender = DeadLetterResender(history, "a:1", 0.0)
    (backlog,) = resender.backlog().values()
    assert backlog.remaining is None  # nothing read yet: not caught up
    admin = FakeAdmin(["m0", "m1", "m2"])
    admin.resent.add(1)  # resent before (by an earlier round, say)
    resender.resend_round(admin)
    assert [(r.offsets, r.message_ids, r.outcome, r.resent) for r in history.resends] == [
        ([0], ["m0"], OK, [0]),
        ([2], ["m2"], OK, [2]),
    ]
    assert resender.asked("m0") and resender.asked("m2") and not resender.asked("m1")
    (backlog,) = resender.backlog().values()
    assert (backlog.remaining, backlog.consumed) == (3, 0)
    resender.delivered("m0")
    resender.delivered("m2")
    (backlog,) = resender.backlog().values()
    assert (backlog.remaining, backlog.consumed) == (1, 2)  # m1 never came back here


def test_a_failed_call_is_recorded_and_the_next_round_reads_past_what_is_done():
    history = History("sync-sync-flush")
    resender = DeadLetterResender(history, "a:1", 0.0)
    admin = FakeAdmin(["m0", "m1", "m2", "m3"])
    admin.fail = FerryError(14, "UNAVAILABLE", "no master now")
    with pytest.raises(FerryError):  # the round ends; run() tries again a round later
        resender.resend_round(admin)
    assert [(r.outcome, r.code) for r in history.resends] == [(UNKNOWN, "UNAVAILABLE")]
    admin.fail = None
    resender.resend_round(admin)
    assert admin.resent == {0, 1, 2, 3}
    for message_id in ("m0", "m1"):
        resender.delivered(message_id)
    admin.reads.clear()
    resender.resend_round(admin)  # nothing fresh; m2 and m3 not delivered yet
    assert admin.reads == [0, 2]
    resender.delivered("m2")
    resender.resend_round(admin)
    admin.reads.clear()
    resender.resend_round(admin)
    assert admin.reads == [3]  # m0..m2 done: read from m3 on
    admin.ids = ["n0"]  # a new master's shorter DLQ: read from its start
    admin.resent = set()
    admin.reads.clear()
    resender.resend_round(admin)
    assert admin.reads == [3, 0] and history.resends[-1].message_ids == ["n0"]
