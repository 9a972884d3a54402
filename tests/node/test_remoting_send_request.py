"""How the 4.x door reads a send into the send service's request
(``node/remoting/broker_send.py``, ``SendHandlers._request``): a message without any
property that types it takes a short way; what it reads must be what every reading
applied in turn gives (the specification below)."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC, PROPERTY_PRIORITY
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode
from ferrymq.codec.remoting_messages import parse_sent_properties
from node.message_rules import born_host_bytes
from node.remoting.broker_send import (
    SYSFLAG_KEPT,
    SendHandlers,
    as_stored,
    delay_level_of,
    message_type_of,
    priority_of,
    timer_delivery_ms,
    v1_header,
)
from node.services.caller import Caller
from node.services.send import OutgoingMessage
from tests.support.remoting_client import properties_text, send_v2_fields

TYPED = {
    "TRAN_MSG": st.sampled_from(["true", "TRUE", "false"]),
    "DELAY": st.sampled_from(["0", "3", "x"]),
    "TIMER_DELAY_SEC": st.sampled_from(["10", "0"]),
    "TIMER_DELAY_MS": st.sampled_from(["1500"]),
    "TIMER_DELIVER_MS": st.sampled_from(["1733100000000"]),
    PROPERTY_PRIORITY: st.sampled_from(["5", "-1"]),
    PROPERTY_LITE_TOPIC: st.sampled_from(["lite-a"]),
}
PLAIN = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "user-a", "user-b"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=8),
    max_size=4,
)


def every_reading(properties: dict[str, str], sys_flag: int, now_ms: int) -> dict:
    """The specification: each reading of the message applied in turn, in the order the
    door applies them (``as_stored`` first; the timer's properties are taken out)."""
    stored = as_stored(properties)
    return dict(
        properties=stored,
        declared_type=message_type_of(properties, sys_flag),
        delivery_ms=timer_delivery_ms(properties, now_ms),
        priority=priority_of(properties),
        lite_topic=properties.get(PROPERTY_LITE_TOPIC),
        delay_level=delay_level_of(properties),
        sys_flag=sys_flag & SYSFLAG_KEPT,
    )


@settings(deadline=None, max_examples=300)
@given(
    PLAIN,
    st.fixed_dictionaries({}, optional=TYPED),
    st.sampled_from([0, 1, 2, 4, 8, 12, 4 | 1, 0x700]),
)
def test_a_sent_message_reads_as_every_reading_applied_in_turn(plain, typed, sys_flag):
    properties = {**plain, **typed}
    fields = send_v2_fields("T", 1) | {"f": str(sys_flag), "i": properties_text(properties)}
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 1, ext_fields=fields, body=b"x")
    caller = Caller("remoting", "SEND_MESSAGE_V2", None, "127.0.0.1", 4000)
    before = time.time_ns() // 1_000_000
    (read,) = SendHandlers._request(v1_header(request), request, caller, False).messages
    expected = every_reading(parse_sent_properties(fields["i"]), sys_flag, before)
    if expected["delivery_ms"] is not None and "TIMER_DELIVER_MS" not in properties:
        # A delay counts from the door's own clock, read a moment after ``before``.
        assert 0 <= read.delivery_ms - expected["delivery_ms"] < 10_000
        expected["delivery_ms"] = read.delivery_ms
    assert read == OutgoingMessage(
        b"x",
        pinned_queue=1,
        born_ms=int(fields["g"]),
        born_host=born_host_bytes(caller.address),
        **expected,
    )
