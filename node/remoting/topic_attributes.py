"""UPDATE_AND_CREATE_TOPIC's ``attributes`` header: RocketMQ 5's topic attributes, as
``mqadmin updateTopic -a`` and RocketMQ's admin clients send them.

The header is a comma-separated list of changes: ``+key=value`` sets an attribute,
``-key`` removes it (``+message.type=LITE,+lite.topic.expiration=1440``). Two keys mean
something here:

- ``message.type``: the topic's type (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, LITE;
  MIXED is ferrymq's untyped topic, which takes every type; UNSPECIFIED the node's default
  for an untyped one). A topic's type is set when it is created and never changed:
  naming another type for an existing topic is refused;
- ``lite.topic.expiration``: minutes a LITE topic's lite topic may go without a new message
  (``node/lite_expiry.py``); removing it is -1 (never). Its range and the topic's type are
  checked where every door's topic changes are (``routing.metadata.check_lite_expiration``).

Other keys (``queue.type``, ``cleanup.policy``...) are ignored, as every attribute was
before these two were read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from routing.metadata import LITE_EXPIRATION_NEVER, MessageType

MINUTES = re.compile(r"-?[0-9]{1,9}")  # not int()'s: it takes "1_0" and other digits
MESSAGE_TYPE = "message.type"
LITE_EXPIRATION = "lite.topic.expiration"
# RocketMQ's TopicMessageType names; None: the node's default for an untyped topic.
MESSAGE_TYPES: dict[str, MessageType | None] = {
    "UNSPECIFIED": None,
    "MIXED": MessageType.UNSPECIFIED,
    **{kind.value: kind for kind in MessageType if kind is not MessageType.UNSPECIFIED},
}


class BadAttributes(ValueError):
    """The header cannot be read, or names a value the key cannot have."""


@dataclass(frozen=True)
class TopicAttributes:
    """What the header asks of the two keys read here (None: nothing)."""

    message_type: MessageType | None = None
    lite_expiration_minutes: int | None = None


def parse_topic_attributes(text: str) -> TopicAttributes:
    """The changes of ``text`` (empty: none); ``BadAttributes`` says what is wrong."""
    message_type: MessageType | None = None
    expiration: int | None = None
    for change in text.split(","):
        change = change.strip()
        if not change:
            continue
        sign, body = change[0], change[1:]
        if sign == "-":
            if body == LITE_EXPIRATION:
                expiration = LITE_EXPIRATION_NEVER
            elif body == MESSAGE_TYPE:
                raise BadAttributes(f"attribute {MESSAGE_TYPE} cannot be removed")
            continue
        key, equals, value = body.partition("=")
        if sign != "+" or not equals or not key:
            raise BadAttributes(
                f"attribute change {change!r} is neither +key=value nor -key "
                "(e.g. +lite.topic.expiration=1440)"
            )
        if key == MESSAGE_TYPE:
            if value not in MESSAGE_TYPES:
                raise BadAttributes(
                    f"{MESSAGE_TYPE} {value!r} is none of {', '.join(sorted(MESSAGE_TYPES))}"
                )
            message_type = MESSAGE_TYPES[value]
        elif key == LITE_EXPIRATION:
            if not MINUTES.fullmatch(value):
                raise BadAttributes(
                    f"{LITE_EXPIRATION} must be a whole number of minutes, got {value!r}"
                )
            expiration = int(value)
    return TopicAttributes(message_type, expiration)
