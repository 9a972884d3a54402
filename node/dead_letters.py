"""The copy of a message for its group's dead-letter topic ``%DLQ%<group>``, made in one
place for both consumption models: a POP delivery out of attempts (``pop_service``) and a
4.x consumer's message out of reconsume times (``consumer_retry``).

The copy keeps the message (body, properties, flag, born time and host) and says where it
came from: ``DLQ_ORIGIN_TOPIC``, ``DLQ_ORIGIN_QUEUE`` and ``DLQ_ORIGIN_OFFSET`` (the topic a
producer sent to, even when the failed delivery was a copy in ``%RETRY%<group>``), and
``reconsume_times`` = the attempts made.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import StoredMessage
from node.topics import TopicConfig
from store.message import Message

PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_QUEUE = "DLQ_ORIGIN_QUEUE"
PROPERTY_DLQ_ORIGIN_OFFSET = "DLQ_ORIGIN_OFFSET"


def dead_letter_copy(
    dead_letters: TopicConfig,
    stored: StoredMessage,
    attempts: int,
    origin_topic: str | None = None,
    extra: dict[str, str] | None = None,
) -> Message:
    """``stored`` for ``dead_letters`` after ``attempts`` deliveries; ``origin_topic``
    when the producer's topic is not the one ``stored`` was read from."""
    properties = dict(stored.properties)
    properties.update(extra or {})
    properties[PROPERTY_DLQ_ORIGIN_TOPIC] = origin_topic or stored.topic
    properties[PROPERTY_DLQ_ORIGIN_QUEUE] = str(stored.queue_id)
    properties[PROPERTY_DLQ_ORIGIN_OFFSET] = str(stored.queue_offset)
    return Message(
        dead_letters.name,
        stored.body,
        properties=properties,
        flag=stored.flag,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        reconsume_times=attempts,
    )
