"""Expiry of idle lite topics (RocketMQ 5.5's lite.topic.expiration) in-process, on a real
store whose store times and the job's clocks the test sets: which lite topics expire (the
topic's minutes, the floor, -1, the node's time as master), what goes with them
(subscriptions, the groups' cursors and deliveries in flight), what a racing message
keeps, a refused append that changes nothing, and expiry replayed after a crash."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.group_creation import GroupsOnFirstUse
from node.handle_key import receipt_handle_key
from node.lite_expiry import LiteExpiry
from node.lite_index import LiteIndex, expiry_marker
from node.lite_names import lmq_name
from node.long_polling import QueueWaiters
from node.pop_state import PopState
from node.receipt_handle import ReceiptHandles
from node.services.caller import Caller, Door
from node.services.lite import LiteService
from node.services.permissions import Permissions
from node.services.pop import PopService
from node.topics import GroupConfig, MessageType, TopicConfig, TopicTable
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutResult, PutStatus
from tests.support.timers import STORE, T0

MINUTE_MS = 60_000
CHAT, FLOORED, FOREVER = "chat", "floored", "forever"


class Lite:
    """A store, the lite index, POP state and services, and the expiry job, reopenable
    after an abrupt stop; ``now`` is both the store's clock and the job's."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.monotonic = 0.0
        self.master = True
        self.topics = TopicTable(
            [
                TopicConfig(CHAT, 2, MessageType.LITE, lite_expiration_minutes=30),
                TopicConfig(FLOORED, 1, MessageType.LITE, lite_expiration_minutes=1),
                TopicConfig(FOREVER, 1, MessageType.LITE),  # -1: never
            ],
            [GroupConfig("G"), GroupConfig("H")],
        )
        self.open()

    def open(self) -> None:
        config = StoreConfig(str(self.tmp_path / "data"), **STORE)
        self.store = MessageStore.open(config, clock_ms=lambda: self.now)
        self.index = LiteIndex(self.store)
        self.index.load(self.loop, [CHAT, FLOORED, FOREVER])
        self.state = PopState(self.store)
        self.state.replay()
        handles = ReceiptHandles(receipt_handle_key("lite-expiry-secret", str(self.tmp_path)))
        self.pop = PopService(
            self.store,
            self.topics,
            None,
            self.state,
            QueueWaiters(self.loop),
            handles,
            Permissions(enabled=False),
            clock_ms=lambda: self.now,
            lite_index=self.index,
        )
        groups = GroupsOnFirstUse(self.topics, None, enabled=False)
        self.lite = LiteService(
            self.topics, Permissions(enabled=False), groups, self.pop, self.index
        )
        self.expiry = LiteExpiry(
            self.store,
            self.index,
            self.topics,
            self.state,
            self.lite.subscriptions,
            is_master=lambda: self.master,
            clock_ms=lambda: self.now,
            monotonic=lambda: self.monotonic,
        )
        self.expiry._observe_role()
        self.monotonic += 900  # master long enough (min_expiry_s) unless a test says

    def crash_and_reopen(self) -> None:
        self.store.close_abruptly_for_tests()
        self.open()

    def close(self) -> None:
        self.store.shutdown()
        self.loop.close()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def send(self, lite_topic: str, body: bytes = b"m", topic: str = CHAT) -> int:
        message = Message.build(topic, body, properties={PROPERTY_LITE_TOPIC: lite_topic})
        result = self.store.put_messages([message])
        assert result.ok, result
        return result.appended[0].physical_offset

    def check(self) -> int:
        self.expiry._observe_role()  # what the job's loop does every second
        return self.run(self.expiry.check())

    def subscribe(self, client: str, group: str, *lite_topics: str, topic: str = CHAT):
        self.lite.subscriptions.sync(pb.PARTIAL_ADD, group, client, topic, lite_topics)

    def receive(self, client: str, group: str = "G") -> list[bytes]:
        return [d.stored.body for d in self.deliveries(client, group)]

    def deliveries(self, client: str, group: str = "G"):
        subscribed = self.lite.subscriptions.client(group, client)
        if subscribed is None:
            return []
        return self.run(self.pop.receive_lite(self.topics.group(group), subscribed, 32, 60_000))

    def ack(self, delivery, lite_topic: str, group: str = "G") -> int:
        caller = Caller(Door.MESSAGING, "AckMessage", None)
        acked = self.pop.ack(caller, group, CHAT, [delivery.handle], lite_topic)
        return self.run(acked)[0].code

    def holds(self, lite_topic: str, topic: str = CHAT) -> list[int]:
        return self.index.offsets(lmq_name(topic, lite_topic)).tolist()


@pytest.fixture
def lite(tmp_path):
    each = Lite(tmp_path)
    yield each
    each.close()


def test_a_lite_topic_expires_once_idle_past_its_topics_minutes_and_the_floor(lite):
    lite.send("a")
    lite.send("one-minute", topic=FLOORED)
    lite.send("never", topic=FOREVER)
    lite.now = T0 + 14 * MINUTE_MS
    assert lite.check() == 0  # a 1-minute expiration waits for the 15-minute floor
    lite.now = T0 + 16 * MINUTE_MS
    assert lite.check() == 1 and lite.holds("one-minute", FLOORED) == []
    assert lite.holds("a") != []  # chat's 30 minutes have not passed
    lite.now = T0 + 30 * MINUTE_MS
    assert lite.check() == 0  # exactly 30: not more than 30
    lite.now = T0 + 30 * MINUTE_MS + 1
    assert lite.check() == 1
    assert lite.holds("a") == [] and not lite.index.exists(lmq_name(CHAT, "a"))
    lite.now = T0 + 365 * 24 * 60 * MINUTE_MS
    assert lite.check() == 0 and lite.holds("never", FOREVER) != []  # -1: never


def test_only_the_last_send_counts_and_a_recent_one_keeps_it(lite):
    first = lite.send("a")
    lite.now = T0 + 20 * MINUTE_MS
    second = lite.send("a")
    lite.now = T0 + 31 * MINUTE_MS
    assert lite.check() == 0 and lite.holds("a") == [first, second]
    lite.now = T0 + 51 * MINUTE_MS
    assert lite.check() == 1 and lite.holds("a") == []


def test_nothing_expires_before_the_node_has_been_master_for_min_expiry_s(lite):
    lite.send("a")
    lite.now = T0 + 60 * MINUTE_MS
    lite.master = False
    assert lite.check() == 0
    lite.master = True
    assert lite.check() == 0  # master from now on: 900 s to go
    lite.monotonic += 899
    assert lite.check() == 0
    lite.monotonic += 1
    assert lite.check() == 1


def test_its_subscriptions_and_the_groups_deliveries_in_flight_go_with_it(lite):
    lite.send("a", b"a1")
    lite.send("b", b"b1")
    lite.subscribe("c1", "G", "a", "b")
    lite.subscribe("c2", "H", "a")
    delivered = lite.deliveries("c1", "G")  # in flight, not acked
    assert sorted(d.stored.body for d in delivered) == [b"a1", b"b1"]
    lite.now = T0 + 20 * MINUTE_MS
    lite.send("b", b"b2")  # b stays active
    lite.now = T0 + 31 * MINUTE_MS
    assert lite.check() == 1
    a = lmq_name(CHAT, "a")
    assert lite.lite.subscriptions.subscribers(a) == set()
    assert lite.lite.subscriptions.client("G", "c1").lmqs == {lmq_name(CHAT, "b")}
    assert lite.state.cursor(("G", a, 0)) is None  # its delivery in flight ended
    (a1,) = [d for d in delivered if d.stored.body == b"a1"]
    assert lite.ack(a1, "a") == pb.INVALID_RECEIPT_HANDLE  # as after a redelivery
    assert lite.state.cursor(("G", lmq_name(CHAT, "b"), 0)) is not None
    lite.now += 5 * MINUTE_MS  # past the invisibility: nothing of a comes back
    assert lite.receive("c1", "G") == [b"b1", b"b2"]
    # A message sent to it later starts it afresh; a client that names it again gets it.
    lite.send("a", b"a2")
    lite.subscribe("c1", "G", "a")
    assert lite.receive("c1", "G") == [b"a2"]
    lite.state.check()


def test_a_message_racing_the_expiry_is_kept_with_its_subscribers(lite):
    old = lite.send("a", b"old")
    lite.subscribe("c1", "G", "a")
    lite.now = T0 + 31 * MINUTE_MS
    due = lite.run(lite.expiry.due(lite.now))
    assert due == [(lmq_name(CHAT, "a"), old)]
    racing = lite.send("a", b"racing")  # after it was found idle, before it is deleted
    assert lite.run(lite.expiry._expire(due)) == 0
    assert lite.holds("a") == [old, racing]
    # Stored after the marker was decided (it names the newest message it saw): only
    # what the marker names goes, the lite topic and its subscribers stay.
    lmq = lmq_name(CHAT, "a")
    assert lite.store.put_messages([expiry_marker(lmq, old)]).ok
    assert lite.holds("a") == [racing]
    assert lite.receive("c1", "G") == [b"racing"]


def test_an_expiry_stays_after_a_crash_and_a_new_message_starts_it_afresh(lite):
    lite.send("a", b"a1")
    lite.send("a", b"a2")
    lite.subscribe("c1", "G", "a")
    assert lite.receive("c1", "G") == [b"a1", b"a2"]
    lite.now = T0 + 31 * MINUTE_MS
    assert lite.check() == 1
    lite.crash_and_reopen()  # the index is rebuilt, the POP state replayed
    lmq = lmq_name(CHAT, "a")
    assert not lite.index.exists(lmq) and lite.state.cursor(("G", lmq, 0)) is None
    fresh = lite.send("a", b"a3")
    lite.crash_and_reopen()
    assert lite.holds("a") == [fresh]
    lite.subscribe("c1", "G", "a")
    assert lite.receive("c1", "G") == [b"a3"]


def test_a_refused_append_changes_nothing(lite, monkeypatch):
    lite.send("a", b"a1")
    lite.subscribe("c1", "G", "a")
    assert lite.receive("c1", "G") == [b"a1"]
    lite.now = T0 + 31 * MINUTE_MS

    async def refused(records):
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)

    monkeypatch.setattr(lite.state, "append", refused)
    assert lite.check() == 0
    lmq = lmq_name(CHAT, "a")
    assert lite.holds("a") != [] and lite.lite.subscriptions.subscribers(lmq)
    assert lite.state.cursor(("G", lmq, 0)).in_flight  # the delivery is still in flight
    monkeypatch.undo()
    assert lite.check() == 1


def test_a_check_reads_no_message_of_an_active_lite_topic(lite, monkeypatch):
    idle = lite.send("idle")
    lite.now = T0 + 31 * MINUTE_MS
    for n in range(50):
        lite.send(f"busy-{n}")
    reads = []
    read = lite.store.read_message
    monkeypatch.setattr(lite.store, "read_message", lambda o: reads.append(o) or read(o))
    assert lite.check() == 1
    assert reads == [idle]  # its store time, to confirm; none of the 50 busy ones


def test_a_marker_a_cut_of_the_tail_removed_is_undone_on_promotion(lite):
    """A slave applied a marker its new master never had, then cut it: before it serves
    receives as master (``Node._reload_states``), the lite topic's messages are back."""
    first, second = lite.send("a"), lite.send("a", topic=CHAT)
    lite.send("b")
    lmq = lmq_name(CHAT, "a")
    marker = lite.store.put_messages([expiry_marker(lmq, second)])
    assert lite.holds("a") == []
    lite.store.truncate_to(marker.appended[0].physical_offset)
    assert lite.index.mend_cut() == 1
    assert lite.holds("a") == [first, second] and len(lite.holds("b")) == 1
    assert lite.index.mend_cut() == 0
