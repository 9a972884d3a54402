"""Messages parked in a system topic until the node releases them to their real topic:
delayed messages (``%SYS%TIMER``) and transaction halves (``%SYS%TRANS_HALF``).

The parked record keeps everything of the message and names its real topic and queue in
two properties, so releasing it is a pure function of the record (and a replica or a
restarted node releases exactly the same message).
"""

from __future__ import annotations

import dataclasses

from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import PROPERTY_DELIVERY_TIME_MS
from store.message import Message

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE = "REAL_QID"
PROPERTY_DELAY_LEVEL = "DELAY"  # a RocketMQ 4.x delay level (node/delay_levels.py)


def park(message: Message, system_topic: str, extra: dict[str, str]) -> Message:
    """The record that holds ``message`` in ``system_topic`` (queue 0)."""
    properties = dict(message.properties)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE] = str(message.queue_id)
    properties.update(extra)
    return dataclasses.replace(message, topic=system_topic, queue_id=0, properties=properties)


def real_topic_of(parked: StoredMessage) -> str:
    return parked.properties.get(PROPERTY_REAL_TOPIC, "")


def release(parked: StoredMessage) -> Message:
    """The message for its real topic, as it was sent (system properties added on parking,
    such as the delivery time or the transaction id, stay: consumers see them). A message
    delayed by a 4.x delay level comes out as RocketMQ's broker releases it: without
    ``DELAY`` (nor the delivery time), with ``REAL_TOPIC`` and ``REAL_QID``."""
    properties = dict(parked.properties)
    if properties.pop(PROPERTY_DELAY_LEVEL, None) is not None:
        properties.pop(PROPERTY_DELIVERY_TIME_MS, None)
        topic = properties.get(PROPERTY_REAL_TOPIC, "")
        queue_id = int(properties.get(PROPERTY_REAL_QUEUE, "0"))
    else:
        topic = properties.pop(PROPERTY_REAL_TOPIC, "")
        queue_id = int(properties.pop(PROPERTY_REAL_QUEUE, "0"))
    return Message(
        topic,
        parked.body,
        queue_id=queue_id,
        properties=properties,
        flag=parked.flag,
        sys_flag=parked.sys_flag,
        born_timestamp_ms=parked.born_timestamp_ms,
        born_host=parked.born_host,
        reconsume_times=parked.reconsume_times,
    )


def as_sent(parked: StoredMessage) -> StoredMessage:
    """The parked record seen as its producer sent it: real topic and queue."""
    released = release(parked)
    return dataclasses.replace(
        parked, topic=released.topic, queue_id=released.queue_id, properties=released.properties
    )
