"""RocketMQ 4.x consumer retries: a message a consumer failed goes to its group's retry
topic ``%RETRY%<group>`` after a delay level, and to ``%DLQ%<group>`` once it was consumed
again as often as allowed. The rule is here, once, for both ways a 4.x client hands a
failed message back (docs/architecture.md, "Remoting"):

- ``CONSUMER_SEND_MSG_BACK`` names the stored message by its CommitLog offset
  (``sent_back``);
- a client whose send-back failed, and an orderly consumer out of local retries, *send* a
  copy to ``%RETRY%<group>`` with ``reconsumeTimes`` and ``maxReconsumeTimes`` in the
  header and a delay level (``resent``).

As RocketMQ's broker: the attempts allowed are the client's ``maxReconsumeTimes`` (its
default is 16, the group's ``max_delivery_attempts`` when the client sends none); a message
consumed again that often, or sent back with a negative delay level, is dead-lettered;
otherwise it waits ``delay level`` (0: 3 + the times consumed again, so 10 s, 30 s, 1 min,
...) in the timer topic and then enters ``%RETRY%<group>``, whose consumers the 4.x
clients run beside the group's own. The copy keeps the message and carries what the
clients read: ``RETRY_TOPIC`` (the topic the producer sent to: the client shows it),
``ORIGIN_MESSAGE_ID`` (the first copy's offset message id), ``reconsume_times`` + 1, and
``DELAY``; once due it keeps ``REAL_TOPIC``/``REAL_QID`` as RocketMQ's (``node/parked.py``).
The delay itself is the timer service's, the one gRPC delayed messages use; the dead-letter
copy is ``node/dead_letters.py``'s, the one POP uses.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ferrymq.codec.commitlog_record import StoredMessage
from node.dead_letters import PROPERTY_DLQ_ORIGIN_TOPIC, dead_letter_copy
from node.delay_levels import level_delay_ms
from node.timer_service import TimerService
from node.topics import GroupConfig, TopicTable
from routing.metadata import RETRY_PREFIX
from store.message import Message

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_DELAY = "DELAY"
RETRY_FIRST_LEVEL = 3  # delay level 0 means 3 + the times the message was consumed again


def is_retry_topic(name: str) -> bool:
    return name.startswith(RETRY_PREFIX)


def group_of_retry_topic(name: str) -> str:
    return name[len(RETRY_PREFIX) :]


def exhausted(reconsume_times: int, max_reconsume_times: int, delay_level: int = 0) -> bool:
    """Whether a failed message goes to the dead-letter topic rather than another try."""
    return reconsume_times >= max_reconsume_times or delay_level < 0


def allowed(group: GroupConfig, max_reconsume_times: int | None) -> int:
    """The times a message may be consumed again: the client's, else the group's."""
    return group.max_delivery_attempts if max_reconsume_times is None else max_reconsume_times


def retry_level(reconsume_times: int, delay_level: int) -> int:
    return delay_level if delay_level > 0 else RETRY_FIRST_LEVEL + reconsume_times


class ConsumerRetries:
    def __init__(
        self,
        topics: TopicTable,
        levels_ms: tuple[int, ...],
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.topics = topics
        self.levels_ms = levels_ms
        self.clock_ms = clock_ms

    def delayed(self, message: Message, level: int) -> Message:
        """``message`` parked in the timer topic until ``level``'s delay has passed (the
        ``DELAY`` property of a 4.x send, and every retry)."""
        due_ms = self.clock_ms() + level_delay_ms(self.levels_ms, level)
        return TimerService.park(message, due_ms)

    def sent_back(
        self,
        group: GroupConfig,
        stored: StoredMessage,
        delay_level: int,
        max_reconsume_times: int | None,
    ) -> Message:
        """The record to append for ``stored``, failed by a consumer of ``group``."""
        maximum = allowed(group, max_reconsume_times)
        origin_topic = stored.properties.get(PROPERTY_RETRY_TOPIC) or stored.topic
        marks = {
            PROPERTY_RETRY_TOPIC: origin_topic,
            PROPERTY_ORIGIN_MESSAGE_ID: stored.properties.get(PROPERTY_ORIGIN_MESSAGE_ID)
            or stored.offset_message_id,
        }
        attempts = stored.reconsume_times + 1
        if exhausted(stored.reconsume_times, maximum, delay_level):
            dead_letters = self.topics.dead_letter_topic(group.name)
            return dead_letter_copy(dead_letters, stored, attempts, origin_topic, marks)
        level = retry_level(stored.reconsume_times, delay_level)
        properties = {**stored.properties, **marks, PROPERTY_DELAY: str(level)}
        copy = Message(
            self.topics.retry_topic(group.name).name,
            stored.body,
            0,
            properties,
            stored.flag,
            stored.sys_flag,
            stored.born_timestamp_ms,
            stored.born_host,
            attempts,
        )
        return self.delayed(copy, level)

    def resent(self, message: Message, max_reconsume_times: int | None) -> Message:
        """A copy a client sent to ``%RETRY%<group>`` itself: dead-lettered instead when it
        was consumed again as often as allowed (the header's ``reconsumeTimes``, now the
        record's); otherwise it goes as sent, its delay level parking it."""
        group = self.topics.group(group_of_retry_topic(message.topic))
        maximum = allowed(group, max_reconsume_times)
        if not exhausted(message.reconsume_times, maximum):
            return message
        properties = dict(message.properties)
        properties.pop(PROPERTY_DELAY, None)
        properties[PROPERTY_DLQ_ORIGIN_TOPIC] = properties.get(PROPERTY_RETRY_TOPIC, message.topic)
        dead_letters = self.topics.dead_letter_topic(group.name)
        return dataclasses.replace(
            message, topic=dead_letters.name, queue_id=0, properties=properties
        )
