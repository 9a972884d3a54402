"""BATCH_ACK_MESSAGE's body as RocketMQ 5's client writes it (fastjson2's short names, a
base64 ``java.util.BitSet``), and what is refused before anything is acked."""

from __future__ import annotations

import base64
import json

import pytest

from node.remoting.batch_ack import MalformedBatchAck, parse_batch_ack, set_bits
from node.remoting.broker_config import escaped
from node.services.pop import ACK_ENTRIES_MAX


def body(**fields) -> bytes:
    ack = {"c": "g", "t": "t", "r": "0", "so": 10, "q": 1, "rq": 5, "pt": 100, "it": 60_000}
    return json.dumps({"brokerName": "b", "acks": [ack | fields]}).encode()


def test_bit_i_of_java_bitset_bytes_names_start_offset_plus_i():
    # BitSet.toByteArray(): little-endian bits within a byte, byte i // 8.
    assert set_bits(base64.b64encode(bytes([0b00000101, 0b10000000])).decode()) == [0, 2, 15]
    (ack,) = parse_batch_ack(body(b=base64.b64encode(bytes([0b00000110])).decode()))
    assert ack.offsets == (11, 12)
    assert (ack.group, ack.topic, ack.queue_id, ack.revive_qid) == ("g", "t", 1, 5)
    assert (ack.pop_time_ms, ack.invisible_ms) == (100, 60_000)


def test_the_long_names_are_read_too():
    long = {"consumerGroup": "g2", "topic": "t2", "startOffset": 0, "queueId": 0}
    long |= {"reviveQueueId": 0, "popTime": 1, "invisibleTime": 2, "bitSet": "AQ=="}
    (ack,) = parse_batch_ack(json.dumps({"acks": [long]}).encode())
    assert (ack.group, ack.topic, ack.offsets) == ("g2", "t2", (0,))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"{", "body is not JSON"),
        (b"[]", '"acks"'),
        (json.dumps({"acks": [1]}).encode(), "not an object"),
        (body(q="1"), "q (queueId) is not a int"),
        (body(b="***"), "bit set is not base64"),
        (body(b=base64.b64encode(b"\xff" * (ACK_ENTRIES_MAX // 8 + 1)).decode()), "the limit"),
    ],
)
def test_a_body_that_is_not_a_batch_ack_is_refused_saying_why(data, said):
    with pytest.raises(MalformedBatchAck, match=None) as refused:
        parse_batch_ack(data)
    assert said in str(refused.value)


def test_broker_config_values_are_escaped_as_java_properties_reads_them():
    assert escaped("1s 5s") == "1s 5s"
    assert escaped("a=b:c\\d") == "a\\=b\\:c\\\\d"
    assert escaped(" lead") == "\\ lead"
    assert escaped("x\ny") == "x\\ny"
    assert escaped("é") == "\\u00e9"
