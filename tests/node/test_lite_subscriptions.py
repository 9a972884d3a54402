"""Lite consumers' subscription sets: the four actions, a client that moves to another LITE
topic, quotas, and clients forgotten after three silent minutes."""

from __future__ import annotations

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.lite_names import lmq_name
from node.lite_subscriptions import IDLE_S, LiteSubscriptions
from node.rpc_status import InvalidRequest


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def lmqs(*names: str, topic: str = "T") -> set[str]:
    return {lmq_name(topic, n) for n in names}


def test_the_four_actions_change_a_clients_set_as_rocketmq_does():
    subs = LiteSubscriptions()
    assert subs.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["a", "b"]) == lmqs("a", "b")
    assert subs.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["b", "c"]) == lmqs("c")
    subs.sync(pb.PARTIAL_REMOVE, "G", "c1", "T", ["a"])
    assert subs.client("G", "c1").lmqs == lmqs("b", "c")
    subs.sync(pb.COMPLETE_ADD, "G", "c1", "T", ["c", "d"])  # the whole set, every 30 s
    assert subs.client("G", "c1").lmqs == lmqs("c", "d")
    assert subs.subscribers(lmq_name("T", "c")) == {("G", "c1")}
    assert subs.subscribers(lmq_name("T", "b")) == set() and subs.count == 2
    subs.sync(pb.COMPLETE_REMOVE, "G", "c1", "T", [])
    assert subs.client("G", "c1") is None and subs.count == 0


def test_a_client_that_binds_another_topic_leaves_the_first():
    subs = LiteSubscriptions()
    subs.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["a"])
    subs.sync(pb.PARTIAL_ADD, "G", "c1", "U", ["a"])
    assert subs.client("G", "c1").lmqs == lmqs("a", topic="U")
    assert subs.subscribers(lmq_name("T", "a")) == set() and subs.count == 1


def test_the_nodes_total_is_bounded_and_a_refusal_changes_nothing():
    subs = LiteSubscriptions(subscriptions_max=3)
    subs.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["a", "b"])
    with pytest.raises(InvalidRequest) as refused:
        subs.sync(pb.PARTIAL_ADD, "G", "c2", "T", ["c", "d"])
    assert refused.value.code == pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    assert subs.client("G", "c2").lmqs == set() and subs.count == 2
    subs.sync(pb.COMPLETE_ADD, "G", "c1", "T", ["x", "y", "z"])  # replaces: within the bound
    assert subs.count == 3


def test_a_silent_client_is_forgotten_and_a_syncing_one_is_kept():
    clock = Clock()
    subs = LiteSubscriptions(clock=clock)
    subs.sync(pb.PARTIAL_ADD, "G", "quiet", "T", ["a"])
    subs.sync(pb.PARTIAL_ADD, "G", "busy", "T", ["a"])
    clock.now = IDLE_S - 1
    subs.sync(pb.COMPLETE_ADD, "G", "busy", "T", ["a"])
    clock.now = IDLE_S + 1
    subs.expire()
    assert subs.client("G", "quiet") is None and subs.client("G", "busy") is not None
    assert subs.subscribers(lmq_name("T", "a")) == {("G", "busy")}


def test_an_exclusive_subscription_takes_the_lite_topic_from_the_groups_other_clients():
    """RocketMQ 5.5's Exclusive model: the newest subscriber keeps a lite topic; the others
    of its group lose it (and are named, to be told); other groups keep theirs."""
    subs = LiteSubscriptions()
    subs.sync(pb.PARTIAL_ADD, "G", "c1", "T", ["a", "b"])
    subs.sync(pb.PARTIAL_ADD, "G", "c2", "T", ["a"])
    subs.sync(pb.PARTIAL_ADD, "H", "c3", "T", ["a"])
    assert subs.count == 4
    assert subs.exclude_others("G", "c2", lmqs("a")) == [("c1", lmq_name("T", "a"))]
    assert subs.client("G", "c1").lmqs == lmqs("b")
    assert lmq_name("T", "a") not in subs.client("G", "c1").ready
    assert subs.subscribers(lmq_name("T", "a")) == {("G", "c2"), ("H", "c3")}
    assert subs.count == 3
    assert subs.exclude_others("G", "c2", lmqs("a")) == []  # nobody left to exclude
