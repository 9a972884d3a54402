"""``ferrymq rollback --resend``: send what a node cut from its log again, as its
producers sent it.

A rollback file (``ha/rollback.py``) holds CommitLog records: messages of user topics,
and system records; so do the still valid records of a damaged range
(``store/damaged_ranges.py``), which are resent the same way unless the node's log holds
them again (``ferrymq/cli/rollback_listing.py``). Of those, delayed messages still waiting
in the timer topic are messages a producer sent too; they go again to their real topic
with their delivery time (one already due is delivered at once), unless the tail also
holds their delivered copy.
A delivered delayed message keeps its delivery time, which its DELAY topic requires.
Every other system record (transaction halves, retries, consumer offsets, POP state) is
the node's own bookkeeping and is counted, not sent; so is a committed transactional
message, whose commit belongs to its producer's transaction, not to this tool.

A message the node refuses is reported with its reason and the rest still go: one bad
record must not keep an operator's other messages out of the cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ferrymq.client import FerryError, Message, Producer
from ferrymq.codec.commitlog_record import StoredMessage
from ferrymq.codec.properties import (
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TRANSACTION_ID,
    SYSTEM_PROPERTY_NAMES,
)
from node.parked import as_sent
from store.message import TIMER_TOPIC

SKIPPED_DELIVERED = "delayed messages whose delivered copy is resent instead"
SKIPPED_TRANSACTIONAL = "committed transactional messages (their producer commits them)"
SKIPPED_SYSTEM = "system records (transaction halves, retries, offsets, POP state)"
SKIPPED_REFILLED = "damaged-range records the log holds again (refilled from its master)"


@dataclass
class ResendPlan:
    """The messages to send, in log order, and what is left out, counted by reason."""

    messages: list[Message] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class ResendFailure:
    message_id: str
    topic: str
    error: str


def plan_resend(records: Iterable[StoredMessage]) -> ResendPlan:
    """What to send again of ``records`` (rollback files' messages in log order)."""
    records = list(records)
    in_user_topics = {r.unique_key for r in records if not r.topic.startswith("%")}
    plan = ResendPlan()
    for stored in records:
        if stored.topic == TIMER_TOPIC:
            if stored.unique_key and stored.unique_key in in_user_topics:
                plan.skipped[SKIPPED_DELIVERED] += 1
                continue
            stored = as_sent(stored)
        elif stored.topic.startswith("%"):
            plan.skipped[SKIPPED_SYSTEM] += 1
            continue
        if PROPERTY_TRANSACTION_ID in stored.properties:
            plan.skipped[SKIPPED_TRANSACTIONAL] += 1
            continue
        plan.messages.append(message_as_sent(stored))
    return plan


def message_as_sent(stored: StoredMessage) -> Message:
    """The SDK message that stores ``stored`` again: id, tag, keys, message group,
    delivery time and the user's properties."""
    properties = stored.properties
    delivery = properties.get(PROPERTY_DELIVERY_TIME_MS)
    message = Message(
        stored.topic,
        stored.body,
        tag=stored.tags,
        keys=stored.keys,
        properties={k: v for k, v in properties.items() if k not in SYSTEM_PROPERTY_NAMES},
        message_group=properties.get(PROPERTY_MESSAGE_GROUP),
        delivery_time_ms=int(delivery) if delivery is not None else None,
    )
    if stored.unique_key:
        message.message_id = stored.unique_key
    return message


def resend(producer: Producer, messages: Iterable[Message]) -> tuple[int, list[ResendFailure]]:
    """Send each message; how many were stored and which were refused, and why."""
    sent, failures = 0, []
    for message in messages:
        try:
            producer.send(message)
        except FerryError as error:
            failures.append(ResendFailure(message.message_id, message.topic, str(error)))
        else:
            sent += 1
    return sent, failures
