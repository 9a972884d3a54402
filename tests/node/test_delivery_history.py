"""A message's delivery history (``node/services/delivery_history.py``) read back from a
real store: POP deliveries, changes of invisibility, acks, dead letters, offset resets,
4.x retry and dead-letter copies, committed offsets, the cap on the records read, the
refusals."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.consumer_retry import ConsumerRetries
from node.parked import release
from node.pop_state import RESENT_QUEUE_ID
from node.rpc_status import AccessDenied
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.dead_letter_resend import ResendRequest
from node.services.delivery_history import (
    DeliveryHistoryService,
    EventKind,
    GroupState,
    MessageHistory,
)
from node.services.offset_reset import ResetRequest, ResetTarget
from node.services.permissions import Permissions
from node.topics import GroupConfig, TopicConfig
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from tests.support.pop_broker import Broker, resend_service, reset_service

ANYONE = Caller(Door.FERRY, "MessageHistory", None)


@pytest.fixture
def broker(tmp_path):
    loop = asyncio.new_event_loop()
    created = Broker(tmp_path, loop)
    created.topics.put_topic(TopicConfig("orders", queue_count=2))
    created.topics.put_group(GroupConfig("G", max_delivery_attempts=3))
    created.topics.put_group(GroupConfig("P"))
    yield created
    created.store.shutdown()
    loop.close()


def history_of(broker, offset: int, queue_id: int = 0, **options) -> MessageHistory:
    caller = options.pop("caller", ANYONE)
    service = DeliveryHistoryService(
        broker.store,
        broker.topics,
        broker.offsets,
        broker.state,
        options.pop("permissions", Permissions(enabled=False)),
        "group-1",
        clock_ms=broker.clock,
        **options,
    )
    return broker.run(service.history(caller, "orders", queue_id, offset))


def row(history: MessageHistory, group: str):
    (found,) = [g for g in history.groups if g.group == group]
    return found


def kinds(group_history) -> list[EventKind]:
    return [event.kind for event in group_history.events]


def test_pop_deliveries_a_change_and_the_ack_in_order(broker):
    broker.send("orders", 2)
    first, _ = broker.receive("G", "orders")
    history = history_of(broker, 0)
    (g,) = history.groups
    assert (g.group, g.model, g.state) == ("G", "pop", GroupState.IN_FLIGHT)
    assert g.state_text.startswith("in flight: attempt 1, invisible until ")
    assert broker.change("G", "orders", first.handle, 5).status.code == 20000
    broker.clock.ms += 5_001
    again = broker.receive("G", "orders")[0]  # redelivered: attempt 2
    assert again.attempt == 2 and again.stored.queue_offset == 0
    assert broker.ack("G", "orders", again.handle).status.code == 20000

    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [
        EventKind.DELIVERED,
        EventKind.INVISIBILITY_CHANGED,
        EventKind.DELIVERED,
        EventKind.ACKED,
    ]
    assert [e.attempt for e in g.events] == [1, 1, 2, 2]
    delivered, changed, redelivered, acked = g.events
    assert delivered.visible_at_ms == broker.clock.ms - 5_001 + 10_000  # receive's 10 s
    assert changed.delivery != delivered.delivery and changed.visible_at_ms < 1 << 62
    assert acked.delivery == redelivered.delivery
    assert [e.time_ms for e in g.events] == sorted(e.time_ms for e in g.events)
    assert (g.state, g.state_text) == (GroupState.CONSUMED, "consumed: acked at attempt 2")
    assert g.pop_next_offset == 2 and g.committed_offset == -1
    # The other message's deliveries are not this one's.
    other = row(history_of(broker, 1), "G")
    assert kinds(other) == [EventKind.DELIVERED] and other.state is GroupState.IN_FLIGHT


def test_a_timed_out_delivery_waits_for_redelivery(broker):
    broker.send("orders", 1)
    broker.receive("G", "orders")
    broker.clock.ms += 10_001
    g = row(history_of(broker, 0), "G")
    assert g.state is GroupState.IN_FLIGHT
    assert g.state_text == "in flight: attempt 1 timed out, waiting for redelivery"


def test_a_suspended_change_does_not_count_as_an_attempt(broker):
    broker.send("orders", 1)
    (delivery,) = broker.receive("G", "orders")
    assert broker.change("G", "orders", delivery.handle, 5, suspend=True).status.code == 20000
    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [EventKind.DELIVERED, EventKind.INVISIBILITY_CHANGED]
    assert g.events[1].attempt == 0 and "suspended" in g.events[1].detail


def test_out_of_attempts_the_message_is_dead_lettered(broker):
    broker.send("orders", 1)
    for _ in range(3):
        broker.receive("G", "orders")
        broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []  # the fourth: dead-lettered instead
    g = row(history_of(broker, 0), "G")
    # In the log's order: the copy and the POP record are one batch, the copy first.
    assert kinds(g) == [EventKind.DELIVERED] * 3 + [
        EventKind.DEAD_LETTER_COPY,
        EventKind.DEAD_LETTERED,
    ]
    assert [e.attempt for e in g.events] == [1, 2, 3, 3, 3]
    assert g.events[-2].detail == "%DLQ%G queue 0 offset 0"
    assert (g.state, g.state_text) == (
        GroupState.DEAD_LETTERED,
        "dead-lettered to %DLQ%G after 3 attempts",
    )


def test_a_resent_dead_letter_is_followed_to_its_ack(broker):
    broker.send("orders", 1, unique_key="ID0")
    for _ in range(3):
        broker.receive("G", "orders")
        broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []  # dead-lettered
    resender = resend_service(broker)
    outcome = broker.run(resender.resend(ANYONE, ResendRequest("G", offsets=(0,))))
    assert outcome.resent == (0,)
    g = row(history_of(broker, 0), "G")
    # In the log's order, whatever the store times (a millisecond may hold all of them):
    # each batch's copy, then its POP record.
    assert kinds(g)[-4:] == [
        EventKind.DEAD_LETTER_COPY,
        EventKind.DEAD_LETTERED,
        EventKind.RETRY_COPY,
        EventKind.RESENT,
    ]
    assert g.events[-1].detail == "from %DLQ%G offset 0; attempts count afresh"
    assert (g.state, g.state_text) == (
        GroupState.RETRYING,
        "resent from %DLQ%G: waits for the group's next receive",
    )
    broker.clock.ms += 1
    (delivery,) = broker.receive("G", "orders")
    g = row(history_of(broker, 0), "G")
    assert kinds(g)[-1] is EventKind.DELIVERED and g.events[-1].attempt == 1
    assert g.state is GroupState.IN_FLIGHT
    assert g.state_text.startswith("in flight after a resend: attempt 1, invisible until ")
    broker.clock.ms += 1
    assert broker.ack("G", "orders", delivery.handle).status.code == pb.OK
    g = row(history_of(broker, 0), "G")
    assert kinds(g)[-2:] == [EventKind.DELIVERED, EventKind.ACKED]
    assert (g.state, g.state_text) == (
        GroupState.CONSUMED,
        "consumed after a resend from %DLQ%G: acked at attempt 1",
    )


def test_a_resent_dead_letter_dead_lettered_again_says_so(broker):
    broker.send("orders", 1, unique_key="ID0")
    for _ in range(2):  # dead-lettered twice: once first, once after a resend
        for _ in range(3):
            broker.receive("G", "orders")
            broker.clock.ms += 10_000
        assert broker.receive("G", "orders") == []
        if not broker.state.cursor(("G", "%DLQ%G", RESENT_QUEUE_ID)):
            broker.run(resend_service(broker).resend(ANYONE, ResendRequest("G", offsets=(0,))))
    g = row(history_of(broker, 0), "G")
    assert kinds(g).count(EventKind.DEAD_LETTER_COPY) == 2
    assert kinds(g).count(EventKind.DELIVERED) == 6
    assert (g.state, g.state_text) == (
        GroupState.DEAD_LETTERED,
        "dead-lettered to %DLQ%G again after a resend and 3 attempts",
    )


def test_a_restated_delivery_is_not_a_second_delivery(broker):
    """A pop record that restates a delivery already in flight (``PopState.append`` does,
    before moving a cursor past it) is the same delivery, not another attempt."""
    broker.send("orders", 1)
    broker.receive("G", "orders")
    key = ("G", "orders", 0)
    flight = broker.state.cursor(key).in_flight[0]
    restated = broker.state.pop_record(key, [(0, 1)], 1, flight.delivery, flight.visible_at_ms)
    assert broker.run(broker.state.append([restated])).appended
    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [EventKind.DELIVERED] and g.events[0].delivery == flight.delivery


def test_a_stale_ack_is_not_the_messages_end(broker):
    """An ack record naming an earlier delivery changes nothing (``PopState.apply``), and
    the history does not show it either."""
    broker.send("orders", 1)
    broker.receive("G", "orders")
    key = ("G", "orders", 0)
    current = broker.state.cursor(key).in_flight[0].delivery
    stale = broker.state.record("ack", b"0:0000000000000000", group="G", topic="orders", queue="0")
    assert broker.run(broker.state.append([stale])).appended
    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [EventKind.DELIVERED] and g.state is GroupState.IN_FLIGHT
    assert broker.state.cursor(key).in_flight[0].delivery == current


def test_an_expiry_ends_the_delivery_in_flight(broker):
    broker.send("orders", 2)
    broker.receive("G", "orders", batch=1)
    record, _ = broker.state.expire(("G", "orders", 0), 0)
    assert broker.run(broker.state.append([record])).appended
    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [EventKind.DELIVERED, EventKind.EXPIRED]
    assert (g.state, g.state_text) == (GroupState.CONSUMED, "ended: its lite topic expired")


def test_an_offset_reset_ends_the_delivery_in_flight(broker):
    broker.send("orders", 2)
    broker.receive("G", "orders", batch=1)
    request = ResetRequest("G", "orders", ResetTarget.EARLIEST)
    broker.run(reset_service(broker).reset(ANYONE, request))
    g = row(history_of(broker, 0), "G")
    assert kinds(g) == [EventKind.DELIVERED, EventKind.RESET]
    assert g.events[1].detail.endswith("delivery of attempt 1 ended")
    assert g.pop_next_offset == -1 and g.committed_offset == 0
    assert (g.state, g.state_text) == (
        GroupState.NOT_CONSUMED,
        "not consumed yet (committed offset 0)",
    )


def test_a_pull_group_by_its_committed_offset(broker):
    broker.send("orders", 3)
    broker.run(broker.offsets.commit("P", "orders", 0, 2))
    assert row(history_of(broker, 1), "P").state_text == "consumed (committed offset 2)"
    p = row(history_of(broker, 2), "P")
    assert (p.model, p.state, p.events) == ("offsets", GroupState.NOT_CONSUMED, ())
    assert p.state_text == "not consumed yet (committed offset 2)"
    assert history_of(broker, 0, queue_id=0).groups[0].group == "P"
    broker.send("orders", 1, queue_id=1)
    assert history_of(broker, 0, queue_id=1).groups == ()  # P has no position in queue 1


def test_a_pop_group_whose_position_is_before_the_message(broker):
    broker.send("orders", 2)
    broker.receive("G", "orders", batch=1)
    g = row(history_of(broker, 1), "G")
    assert (g.state, g.events) == (GroupState.NOT_CONSUMED, ())
    assert g.state_text == "not consumed yet (the group's POP position is 1)"


def put(broker, message) -> None:
    assert broker.store.put_message(message).ok


def test_4x_retry_copies_and_the_dead_letter_copy(broker):
    broker.topics.retry_topic("P")
    broker.topics.dead_letter_topic("P")
    broker.send("orders", 1, unique_key="U-1")
    (original,) = broker.store.get_messages("orders", 0, 0, 1).messages
    broker.run(broker.offsets.commit("P", "orders", 0, 1))  # the push consumer moved on
    retries = ConsumerRetries(broker.topics, (1000,) * 18, clock_ms=broker.clock)
    copy = retries.sent_back(broker.topics.group("P"), original, 0, None)
    put(broker, copy)
    parked = broker.store.get_messages(copy.topic, copy.queue_id, 0, 1).messages[0]
    put(broker, release(parked))

    p = row(history_of(broker, 0), "P")
    assert kinds(p) == [EventKind.RETRY_COPY]
    assert p.events[0].attempt == 1
    assert p.events[0].detail == "%RETRY%P queue 0 offset 0 (not consumed yet)"
    assert (p.state, p.state_text) == (GroupState.RETRYING, "retrying: copy 1 waits in %RETRY%P")

    broker.run(broker.offsets.commit("P", "%RETRY%P", 0, 1))
    p = row(history_of(broker, 0), "P")
    assert (p.state, p.state_text) == (GroupState.CONSUMED, "consumed after 1 retries")

    (in_retry,) = broker.store.get_messages("%RETRY%P", 0, 0, 1).messages
    put(broker, retries.sent_back(broker.topics.group("P"), in_retry, -1, None))  # give up
    p = row(history_of(broker, 0), "P")
    assert kinds(p) == [EventKind.RETRY_COPY, EventKind.DEAD_LETTER_COPY]
    assert p.events[1].detail == "%DLQ%P queue 0 offset 0" and p.events[1].attempt == 2
    assert p.state is GroupState.DEAD_LETTERED
    assert p.state_text == "dead-lettered to %DLQ%P after 2 attempts"
    # Another message's copies are not this one's.
    broker.send("orders", 1, unique_key="U-2")
    assert row(history_of(broker, 1), "P").events == ()


def test_the_scan_stops_at_its_cap_and_says_so(broker):
    broker.send("orders", 1)
    for _ in range(3):  # three pop records, then the dead-letter record
        broker.receive("G", "orders")
        broker.clock.ms += 10_000
    broker.receive("G", "orders")
    whole = history_of(broker, 0)
    assert not whole.truncated and whole.note == ""
    assert whole.records_scanned >= 4
    cut = history_of(broker, 0, records_max=3)
    assert cut.truncated and cut.records_scanned == 3
    assert cut.note == "history truncated after 3 records"
    # What was read is the start of the whole history (a snapshot record may be among it).
    read = row(cut, "G").events
    assert 1 <= len(read) < 3 and read == row(whole, "G").events[: len(read)]
    assert {e.kind for e in read} == {EventKind.DELIVERED}
    assert (row(cut, "G").state, row(cut, "G").state_text) == (  # the cursor's word, now
        GroupState.CONSUMED,
        "consumed (how: after the records read)",
    )


def test_refusals(broker):
    broker.send("orders", 1)
    with pytest.raises(AdminRefused) as error:
        history_of(broker, 5)
    assert (error.value.code, error.value.message) == (5, "no message at orders queue 0 offset 5")
    with pytest.raises(AdminRefused) as error:
        history_of(broker, 0, queue_id=2)
    assert error.value.code == 3 and "queues 0..1 here, not 2" in error.value.message
    service = DeliveryHistoryService(
        broker.store, broker.topics, broker.offsets, broker.state, Permissions(False), "g"
    )
    with pytest.raises(AdminRefused) as error:
        broker.run(service.history(ANYONE, "nothing", 0, 0))
    assert error.value.code == 5

    secured = Permissions(enabled=True)
    reader = User(
        "reader",
        b"",
        acl=(AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "orders"),),
    )
    stranger = User("stranger", b"")
    allowed = Caller(Door.FERRY, "MessageHistory", reader)
    assert history_of(broker, 0, permissions=secured, caller=allowed).queue_offset == 0
    with pytest.raises(AccessDenied) as denied:
        history_of(broker, 0, permissions=secured, caller=Caller(Door.FERRY, "M", stranger))
    assert "no subscribe permission on topic orders" in str(denied.value)
    with pytest.raises(AccessDenied):
        history_of(broker, 0, permissions=secured, caller=Caller(Door.FERRY, "M", None))
