"""Recall handles (``node/recall_handle.py``): RocketMQ's format, which its 4.x client
decodes to find the broker, with a MAC no client can make up."""

from __future__ import annotations

import base64

import pytest

from node.recall_handle import (
    InvalidRecallHandle,
    RecallHandles,
    RecallTarget,
    broker_group_named,
)

KEY = bytes(range(32))
TARGET = RecallTarget("orders", "group-1", 1_795_000_000_123, "0102FC00000001")


def test_a_handle_reads_as_rocketmqs_and_verifies_for_its_topic():
    handle = RecallHandles(KEY).issue(TARGET)
    # RocketMQ's reader: URL-safe base64, "v1 topic broker time id" (it ignores the rest).
    items = base64.urlsafe_b64decode(handle).decode().split(" ")
    assert items[:5] == ["v1", "orders", "group-1", "1795000000123", "0102FC00000001"]
    assert RecallHandles(KEY).verify(handle, "orders") == TARGET
    assert broker_group_named(handle) == "group-1"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda h: h, "for topic 'orders', not 'other'"),
        (lambda h: "", "empty"),
        (lambda h: "v1 orders group-1 1 x", "base64"),
        (lambda h: "A" * 2000, "too long"),
        (lambda h: base64.urlsafe_b64encode(b"v2 a b 1 c d").decode(), "not one this cluster"),
        (lambda h: base64.urlsafe_b64encode(b"v1 a b soon c d").decode(), "malformed"),
    ],
)
def test_malformed_or_other_topics_handles_are_refused(make, words):
    handle = RecallHandles(KEY).issue(TARGET)
    with pytest.raises(InvalidRecallHandle, match=words):
        RecallHandles(KEY).verify(make(handle), "other")


def test_a_handle_another_key_made_or_with_an_altered_field_does_not_verify():
    forged = RecallHandles(bytes(32)).issue(TARGET)
    with pytest.raises(InvalidRecallHandle, match="does not verify"):
        RecallHandles(KEY).verify(forged, "orders")
    raw = base64.urlsafe_b64decode(RecallHandles(KEY).issue(TARGET)).decode()
    moved = raw.replace("1795000000123", "1795000000124")
    with pytest.raises(InvalidRecallHandle, match="does not verify"):
        RecallHandles(KEY).verify(base64.urlsafe_b64encode(moved.encode()).decode(), "orders")
    assert broker_group_named("not a handle") is None
