"""The topics and consumer groups one node serves: its broker group's view of the routing
state (``routing/``), rebuilt on the event loop whenever a routing command is applied.

The services read this table on every request, so it holds plain ``TopicConfig`` records
(queue counts of this node's broker group) and dictionary lookups, never Raft calls.
Changes go through the routing state machine, never through this table.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from routing.metadata import (
    GroupConfig,
    MessageType,
    Permission,
    TopicConfig,
    TopicError,
    check_name,
    dead_letter_topic_of,
    retry_topic_of,
)
from routing.state import RoutingState

__all__ = [
    "GroupConfig",
    "MessageType",
    "Permission",
    "TopicConfig",
    "TopicError",
    "TopicTable",
    "dead_letter_topic_of",
    "retry_topic_of",
]


class TopicTable:
    def __init__(
        self,
        topics: list[TopicConfig] | None = None,
        groups: list[GroupConfig] | None = None,
    ) -> None:
        self.topics: dict[str, TopicConfig] = {t.name: t for t in topics or []}
        self.groups: dict[str, GroupConfig] = {g.name: g for g in groups or []}

    def refresh(self, state: RoutingState, broker_group: str) -> None:
        """Replace the contents with what ``state`` says ``broker_group`` serves. Whether
        this node takes writes is not the table's to say: ``ha/role.py`` answers it."""
        self.topics = state.topics_on(broker_group)
        self.groups = dict(state.groups)

    def put_topic(self, config: TopicConfig) -> None:
        self.topics[config.name] = config

    def put_group(self, config: GroupConfig) -> None:
        self.groups[config.name] = config

    def topic(self, name: str) -> TopicConfig:
        check_name("TOPIC", name)
        found = self.topics.get(name)
        if found is None:
            raise TopicError("TOPIC_NOT_FOUND", f"topic {name} does not exist on this node")
        return found

    def group(self, name: str) -> GroupConfig:
        check_name("CONSUMER_GROUP", name)
        found = self.groups.get(name)
        if found is None:
            raise TopicError("CONSUMER_GROUP_NOT_FOUND", f"group {name} does not exist")
        return found

    def dead_letter_topic(self, group: str) -> TopicConfig:
        """The group's ``%DLQ%<group>`` topic: it exists, one queue on every broker group,
        for as long as the group does (the routing state derives it)."""
        return self._group_topic(TopicConfig(dead_letter_topic_of(group), 1))

    def retry_topic(self, group: str) -> TopicConfig:
        """The group's ``%RETRY%<group>`` topic, derived like its dead-letter topic
        (untyped: its copies arrive delayed)."""
        return self._group_topic(TopicConfig(retry_topic_of(group), 1, MessageType.UNSPECIFIED))

    def _group_topic(self, derived: TopicConfig) -> TopicConfig:
        found = self.topics.get(derived.name)
        if found is None:
            # The group was deleted while one of its messages was failing: keep the
            # message reachable under its group's topic on this node.
            found = self.topics[derived.name] = derived
        return found
