"""A send's receipt (``ferrymq.client.SendReceipt``) is a value: compared and hashed by its
fields, as when it was a frozen dataclass, with no room for stray attributes."""

from __future__ import annotations

import dataclasses

import pytest

from ferrymq.client import SendReceipt


def test_receipts_with_the_same_fields_are_equal_and_hash_alike():
    first, again = SendReceipt("ID-1", 7), SendReceipt("ID-1", 7, "")
    assert first == again and hash(first) == hash(again)
    assert len({first, again, SendReceipt("ID-1", 8), SendReceipt("ID-1", 7, "tx")}) == 3
    assert dataclasses.asdict(first) == {
        "message_id": "ID-1",
        "queue_offset": 7,
        "transaction_id": "",
    }


def test_a_receipt_has_no_room_for_other_attributes():
    with pytest.raises(AttributeError):
        SendReceipt("ID-1", 7).queue_id = 3  # type: ignore[attr-defined]
