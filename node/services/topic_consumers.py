"""The consumer groups of a topic on this broker group, from what the node already keeps:
committed offsets (``node/consumer_offsets.py``), POP positions (``node/pop_state.py``) and
the live 4.x subscriptions heartbeats registered here (``node/consumer_subscriptions.py``).
Through Admin TopicConsumers (the SDK's ``Admin.topic_consumers``, the console's topic page),
asked of each broker group's master: the positions are current there only.

Who may: whoever may describe the topic (publish or subscribe on it), shown only the groups
they may consume as (admins: every group), so a topic's readers learn no other group's name.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.consumer_offsets import ConsumerOffsets
from node.consumer_subscriptions import Subscriptions
from node.pop_state import RESENT_QUEUE_ID, PopState
from node.services.admin import refused
from node.services.caller import Caller
from node.services.permissions import Permissions, describe, group_need
from node.topics import TopicError, TopicTable


@dataclass(frozen=True, slots=True)
class TopicConsumer:
    """One group consuming a topic on a broker group, and how this node knows it."""

    group: str
    broker_group: str
    committed: bool  # a committed offset of one of its queues here
    popping: bool  # a POP position on one of its queues here
    subscribed: bool  # a live 4.x consumer of the group subscribed to it here


class TopicConsumersService:
    def __init__(
        self,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        subscriptions: Subscriptions,
        permissions: Permissions,
        broker_group: str,
    ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.subscriptions = subscriptions
        self.permissions = permissions
        self.broker_group = broker_group

    def consumers(self, caller: Caller, topic: str) -> list[TopicConsumer]:
        """The groups consuming ``topic`` here, by name; NOT_FOUND for an unknown topic."""
        self.permissions.require(caller, describe(topic))
        try:
            self.topics.topic(topic)
        except TopicError as error:
            raise refused(error) from None
        committed = set(self.offsets.groups_of(topic))
        popping = {g for g, t, q in self.pop_state.cursors if t == topic and q != RESENT_QUEUE_ID}
        subscribed = set(self.subscriptions.groups_of(topic))
        return [
            TopicConsumer(
                group,
                self.broker_group,
                group in committed,
                group in popping,
                group in subscribed,
            )
            for group in sorted(committed | popping | subscribed)
            if self.permissions.may(caller, (group_need(group),))
        ]
