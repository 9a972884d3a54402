"""RocketMQ 5.3.2's recall through the 4.x door: a timer message sent with
``TIMER_DELIVER_MS`` (or ``TIMER_DELAY_SEC``) answers a ``recallHandle``; RECALL_MESSAGE
(370) cancels it before its time, and answers ILLEGAL_OPERATION for a handle that is not
this cluster's or a time that has come. The same service serves the gRPC door
(``tests/compat/test_compat_official_client.py``)."""

from __future__ import annotations

import time

import pytest

from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.remoting_client import RemotingClient, queue_records, send_v2
from tests.support.rpc import create_group, create_topic, stubs


@pytest.fixture(scope="module")
def prepared(module_node):
    channel, _, admin = stubs(module_node.address)
    create_topic(admin, "recall4", queues=1, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
    create_group(admin, "recall4-readers")
    channel.close()
    return module_node


def recall(client, topic: str, handle: str):
    return client.call(
        RequestCode.RECALL_MESSAGE,
        {"producerGroup": "producers", "topic": topic, "recallHandle": handle},
    )


def test_a_timer_message_is_recalled_before_its_time_and_its_twin_arrives(prepared):
    due = str(int(time.time() * 1000) + 2000)
    with RemotingClient(prepared.remoting) as client:
        gone = send_v2(client, "recall4", b"gone", UNIQ_KEY="ID-GONE", TIMER_DELIVER_MS=due)
        kept = send_v2(client, "recall4", b"kept", UNIQ_KEY="ID-KEPT", TIMER_DELIVER_MS=due)
        assert gone.code == kept.code == ResponseCode.SUCCESS, (gone, kept)
        handle = gone.ext_fields["recallHandle"]
        answer = recall(client, "recall4", handle)
        assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["msgId"] == "ID-GONE"
        records = until(
            lambda: queue_records(prepared.remoting, "recall4", "recall4-readers"),
            15,
            "the kept message delivered",
        )
        assert [r.body for r in records] == [b"kept"]
        late = recall(client, "recall4", kept.ext_fields["recallHandle"])
        assert late.code == ResponseCode.ILLEGAL_OPERATION and "has come" in late.remark


def test_a_delay_level_message_has_no_handle_and_a_bad_handle_is_refused(prepared):
    with RemotingClient(prepared.remoting) as client:
        leveled = send_v2(client, "recall4", b"leveled", DELAY="1")
        assert leveled.code == ResponseCode.SUCCESS and "recallHandle" not in leveled.ext_fields
        in_a_second = send_v2(
            client, "recall4", b"relative", UNIQ_KEY="ID-REL", TIMER_DELAY_SEC="60"
        )
        handle = in_a_second.ext_fields["recallHandle"]
        for bad, words in (
            ("", "empty"),
            ("djEgYSBiIGMgZA==", "not one this cluster issued"),  # "v1 a b c d"
            (handle[:-6] + "AAAA==", "recall handle"),
        ):
            answer = recall(client, "recall4", bad)
            assert answer.code == ResponseCode.ILLEGAL_OPERATION, answer
            assert words in answer.remark, answer
        other = recall(client, "other-topic", handle)
        assert other.code == ResponseCode.TOPIC_NOT_EXIST, other
        bad_time = send_v2(client, "recall4", b"x", TIMER_DELIVER_MS="soon")
        assert bad_time.code != ResponseCode.SUCCESS and "timer property" in bad_time.remark
        assert recall(client, "recall4", handle).code == ResponseCode.SUCCESS
