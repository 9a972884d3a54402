"""The produce scan's specification for the tests that check its C loop
(``scan_produce_records``) against Python: the limits they use and the expected scan,
built from ``read_produce_record``."""

from __future__ import annotations

from ferrymq.codec.produce_records import MalformedRecords, produce_record_at
from node.message_rules import read_produce_record
from node.rpc_status import InvalidRequest

TYPE_TEXT = "1"
BODY_LIMIT = 8


def read_in_python(records: bytes, count: int) -> list:
    """What ``scan_produce_records`` promises, built from ``read_produce_record``."""
    items: list = []
    position = 0
    for _ in range(count):
        try:
            item = read_produce_record(records, position, BODY_LIMIT, TYPE_TEXT)
        except InvalidRequest:
            items.append(position)
            position = produce_record_at(records, position)[0]
            continue
        except MalformedRecords:
            items.append(position)
            break
        items.append(item)
        position = item[0]
    return items
