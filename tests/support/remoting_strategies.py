"""Hypothesis strategies for RocketMQ remoting requests, for fuzzing a node's remoting port.

A request is drawn from a valid template of its code (the fields a 4.x client sends) with
fields changed, dropped or added, or from scratch: header values lean to the edges that
break parsers (``proto_strategies.strings``: empty, huge, NUL, non-ASCII; integers at the
Java bounds; numbers that are not numbers), bodies to random bytes, JSON of the wrong
shape, and batches that are not whole messages. Long polls are kept short
(``suspendTimeoutMillis`` and ``pollTime`` at most ``MAX_SUSPEND_MS``) so each call
answers quickly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import strategies as st

from ferrymq.codec.remoting import FLAG_ONEWAY, SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from ferrymq.codec.remoting_codes import RequestCode
from ferrymq.codec.remoting_messages import BatchedMessage, encode_batch
from tests.support.proto_strategies import INT32, INT64, Pools, integers_at_bounds, strings

MAX_SUSPEND_MS = 300
PROPERTY_TEXTS = ("", "TAGS\x01t\x02KEYS\x01k", "UNIQ_KEY\x01U1", "no-separator", "\x01\x02\x01")


@dataclass(frozen=True)
class RemotingRequest:
    code: int
    fields: dict[str, str]
    body: bytes
    serialize_type: int
    flag: int


def _templates(topic: str, group: str) -> dict[int, tuple[dict[str, str], bytes]]:
    """A valid request of each code, as a 4.x client sends it."""
    pull = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "100",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    send_v2 = {
        "a": "producers",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "0",
        "h": "0",
        "i": "TAGS\x01t",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    heartbeat = {
        "clientID": "fuzz-client",
        "consumerDataSet": [
            {
                "groupName": group,
                "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}],
            }
        ],
        "producerDataSet": [{"groupName": "producers"}],
    }
    batch = encode_batch([BatchedMessage(0, b"fz-batch", b"TAGS\x01b")])
    offsets = {"consumerGroup": group, "topic": topic, "queueId": "0"}
    pop_ack = {**offsets, "offset": "0"}
    extra_info = "0 1700000000000 60000 12345 0 group-1 0 0"
    return {
        RequestCode.SEND_MESSAGE_V2: (send_v2, b"fz-body"),
        RequestCode.SEND_BATCH_MESSAGE: ({**send_v2, "m": "true"}, batch),
        RequestCode.SEND_MESSAGE: (
            {"producerGroup": "producers", "topic": topic, "queueId": "0", "sysFlag": "0"},
            b"fz-body",
        ),
        RequestCode.PULL_MESSAGE: (pull, b""),
        RequestCode.QUERY_CONSUMER_OFFSET: (offsets, b""),
        RequestCode.UPDATE_CONSUMER_OFFSET: ({**offsets, "commitOffset": "0"}, b""),
        RequestCode.GET_MAX_OFFSET: ({"topic": topic, "queueId": "0"}, b""),
        RequestCode.GET_MIN_OFFSET: ({"topic": topic, "queueId": "0"}, b""),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: (
            {"topic": topic, "queueId": "0", "timestamp": "0"},
            b"",
        ),
        RequestCode.HEART_BEAT: ({}, json.dumps(heartbeat).encode()),
        RequestCode.UNREGISTER_CLIENT: (
            {"clientID": "fuzz-client", "consumerGroup": group, "producerGroup": "producers"},
            b"",
        ),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: ({"consumerGroup": group}, b""),
        RequestCode.GET_ROUTEINFO_BY_TOPIC: ({"topic": topic}, b""),
        RequestCode.GET_KV_CONFIG: ({"namespace": "ORDER_TOPIC_CONFIG", "key": topic}, b""),
        RequestCode.POP_MESSAGE: (
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": "-1",
                "maxMsgNums": "4",
                "invisibleTime": "60000",
                "pollTime": "100",
                "expType": "TAG",
                "exp": "*",
            },
            b"",
        ),
        RequestCode.ACK_MESSAGE: ({**pop_ack, "extraInfo": extra_info}, b""),
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: (
            {**pop_ack, "extraInfo": extra_info, "invisibleTime": "5000"},
            b"",
        ),
    }


def header_values(pools: Pools) -> st.SearchStrategy[str]:
    return st.one_of(
        strings(pools),
        integers_at_bounds(*INT64).map(str),
        integers_at_bounds(*INT32).map(str),
        st.sampled_from(["", " 1", "1 ", "+1", "0x10", "1e3", "\u0661", "true", "TRUE", "null"]),
        st.sampled_from(PROPERTY_TEXTS),
    )


def bodies(pools: Pools) -> st.SearchStrategy[bytes]:
    batch = st.lists(
        st.builds(
            BatchedMessage, st.integers(*INT32), st.binary(max_size=40), st.binary(max_size=40)
        ),
        min_size=1,
        max_size=4,
    ).map(encode_batch)
    cut_batch = st.tuples(batch, st.integers(1, 12)).map(lambda b: b[0][: -b[1]])
    odd_json = st.sampled_from(
        [b"{}", b"[]", b"null", b'{"clientID": 5}', b'{"consumerDataSet": {}}', b"{", b'"x"']
    )
    return st.one_of(
        st.just(b""),
        st.binary(max_size=200),
        batch,
        cut_batch,
        odd_json,
        st.sampled_from([b"\xa5" * (pools.body_limit + 1), b"\xa5" * pools.body_limit]),
    )


def _suspend_bounded(fields: dict[str, str]) -> dict[str, str]:
    for name in ("suspendTimeoutMillis", "pollTime"):
        value = fields.get(name, "")
        digits = value.lstrip("+-")
        if digits.isascii() and digits.isdigit() and int(value) > MAX_SUSPEND_MS:
            fields[name] = str(MAX_SUSPEND_MS)
    return fields


@st.composite
def remoting_requests(draw, code: int, pools: Pools, topic: str, group: str) -> RemotingRequest:
    """A request of ``code``: its template (or nothing) with random changes."""
    template = _templates(topic, group).get(code, ({}, b""))
    fields = dict(template[0])
    body = template[1]
    names = sorted(
        {*fields, "topic", "queueId", "consumerGroup", "b", "e", "i", "sysFlag", "extraInfo"}
    )
    for _ in range(draw(st.integers(0, 3), label="changes")):
        change = draw(st.sampled_from(["set", "drop", "add"]), label="change")
        if change == "drop" and fields:
            del fields[draw(st.sampled_from(sorted(fields)), label="dropped")]
        elif change == "set":
            name = draw(st.sampled_from(names), label="field")
            fields[name] = draw(header_values(pools), label="value")
        else:
            fields[draw(st.text(max_size=12), label="new field")] = draw(header_values(pools))
    if draw(st.booleans(), label="other body"):
        body = draw(bodies(pools), label="body")
    serialize_type = draw(st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]), label="form")
    flag = draw(st.sampled_from([0, 0, 0, FLAG_ONEWAY]), label="flag")
    return RemotingRequest(code, _suspend_bounded(fields), body, serialize_type, flag)


def request_codes() -> list[int]:
    """Every request code ferrymq knows, and a few it does not serve."""
    return [*sorted(int(c) for c in RequestCode), 0, 999, 65535, INT32[1]]
