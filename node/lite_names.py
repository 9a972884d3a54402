"""Lite topics' names (RocketMQ 5.5, RIP-83): the rule a lite topic's name follows, and the
name of the queue that holds one.

A LITE topic holds any number of lite topics, each made by its first message (the
message's ``lite_topic``). RocketMQ stores each in a light message queue (LMQ) named
``%LMQ%$<topic>$<lite topic>``; ferrymq names the same thing so: the POP state, receipt
handles and offsets of a lite topic are keyed by that name (``node/lite_index.py`` says
where its messages are).
"""

from __future__ import annotations

import re

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest

LMQ_PREFIX = "%LMQ%$"
LITE_TOPIC_MAX_BYTES = 64  # RocketMQ's proxy default (maxLiteTopicSize)
LITE_TOPIC_PATTERN = re.compile(r"[a-zA-Z0-9_-]+")


def check_lite_topic(name: str) -> None:
    """``InvalidRequest`` ILLEGAL_LITE_TOPIC unless ``name`` is a lite topic's name, with
    RocketMQ's words (the official clients show them)."""
    if not name.strip():
        raise InvalidRequest(
            pb.ILLEGAL_LITE_TOPIC, "lite topic cannot be the char sequence of whitespace"
        )
    if len(name.encode()) > LITE_TOPIC_MAX_BYTES:
        raise InvalidRequest(
            pb.ILLEGAL_LITE_TOPIC, f"lite topic exceed the max size {LITE_TOPIC_MAX_BYTES}"
        )
    if not LITE_TOPIC_PATTERN.fullmatch(name):
        raise InvalidRequest(
            pb.ILLEGAL_LITE_TOPIC,
            "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)",
        )


def lmq_name(topic: str, lite_topic: str) -> str:
    """The queue name of ``lite_topic`` in ``topic``: ``$`` is in neither name."""
    return f"{LMQ_PREFIX}{topic}${lite_topic}"


def is_lmq(name: str) -> bool:
    return name.startswith(LMQ_PREFIX)


def lite_topic_of(lmq: str) -> str:
    """The lite topic an LMQ queue name names (``lmq_name``'s second part)."""
    return lmq[len(LMQ_PREFIX) :].partition("$")[2]


def parent_topic(lmq: str) -> str:
    """The LITE topic of the lite topic whose queue is ``lmq`` (a topic name has no ``$``)."""
    return lmq[len(LMQ_PREFIX) :].partition("$")[0]
