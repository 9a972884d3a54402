"""The groups consuming a topic (``node/services/topic_consumers.py``) in-process over the
POP test broker: known by committed offsets, POP positions and live 4.x subscriptions,
named only to callers who may consume as them, and not by a group's resent dead letters."""

from __future__ import annotations

import pytest

from node.consumer_subscriptions import Subscription, Subscriptions
from node.pop_state import RESENT_QUEUE_ID
from node.rpc_status import AccessDenied
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from node.services.topic_consumers import TopicConsumer, TopicConsumersService
from node.topics import GroupConfig, TopicConfig
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from tests.support.pop_broker import closed, opened_broker

ADMIN = Caller(Door.FERRY, "TopicConsumers", User("root", b"x", admin=True))


@pytest.fixture
def broker(tmp_path):
    created = opened_broker(tmp_path)
    yield created
    closed(created)


def service(broker, subscriptions: Subscriptions) -> TopicConsumersService:
    return TopicConsumersService(
        broker.topics,
        broker.offsets,
        broker.state,
        subscriptions,
        Permissions(enabled=True),
        "group-1",
    )


def test_groups_are_found_by_offsets_pop_positions_and_live_subscriptions(broker):
    for name in ("committer", "popper", "pusher", "elsewhere"):
        broker.topics.put_group(GroupConfig(name))
    broker.topics.put_topic(TopicConfig("invoices", queue_count=1))
    broker.send("orders", 2)
    assert broker.run(broker.offsets.commit("committer", "orders", 1, 0)).ok
    assert broker.run(broker.offsets.commit("elsewhere", "invoices", 0, 0)).ok
    assert len(broker.receive("popper", "orders")) == 2
    subscriptions = Subscriptions()
    subscriptions.register("pusher", [Subscription("orders", "*", "TAG", 1)])
    subscriptions.register("elsewhere", [Subscription("invoices", "*", "TAG", 1)])
    found = service(broker, subscriptions).consumers(ADMIN, "orders")
    assert found == [
        TopicConsumer("committer", "group-1", True, False, False),
        TopicConsumer("popper", "group-1", False, True, False),
        TopicConsumer("pusher", "group-1", False, False, True),
    ]
    assert [c.group for c in service(broker, subscriptions).consumers(ADMIN, "invoices")] == [
        "elsewhere"
    ]


def test_a_reader_sees_only_the_groups_it_may_consume_as_and_a_stranger_nothing(broker):
    broker.topics.put_group(GroupConfig("mine"))
    broker.topics.put_group(GroupConfig("theirs"))
    broker.send("orders", 1)
    broker.receive("mine", "orders")
    broker.receive("theirs", "orders")
    rules = (
        AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "orders"),
        AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "mine"),
    )
    reader = Caller(Door.CONSOLE, "x", User("reader", b"x", acl=rules))
    found = service(broker, Subscriptions()).consumers(reader, "orders")
    assert [c.group for c in found] == ["mine"]
    stranger = Caller(Door.CONSOLE, "x", User("stranger", b"x"))
    with pytest.raises(AccessDenied):
        service(broker, Subscriptions()).consumers(stranger, "orders")


def test_an_unknown_topic_is_not_found_and_resent_dead_letters_are_not_a_position(broker):
    with pytest.raises(AdminRefused) as error:
        service(broker, Subscriptions()).consumers(ADMIN, "nothing")
    assert error.value.code == 5 and "nothing" in error.value.message
    broker.send("orders", 1)
    for _ in range(4):  # G's three attempts, then the message is dead-lettered
        broker.receive("G", "orders")
        broker.clock.ms += 10_000
    record = broker.state.resend(("G", "%DLQ%G", RESENT_QUEUE_ID), [0], "0" * 16, 0)
    broker.state.apply(record.properties, record.body)
    assert service(broker, Subscriptions()).consumers(ADMIN, "%DLQ%G") == []
    assert [c.group for c in service(broker, Subscriptions()).consumers(ADMIN, "orders")] == ["G"]
