"""The topics and consumer groups one node serves: its broker group's view of the routing
state (``routing/``), rebuilt on the event loop whenever a routing command is applied.

The services read this table on every request, so it holds plain ``TopicConfig`` records
(queue counts of this node's broker group) and dictionary lookups. The one Raft call is
``topic_caught_up``'s, for a name the table does not have: a topic created through another
node a moment ago is usable here at once (the node catches up with routing before it says
the topic does not exist). Changes go through the routing state machine, never through
this table.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

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
from routing.replica import RoutingUnavailable
from routing.state import RoutingState, group_topics

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
        # The state tables the last refresh read: (routes, groups, served here).
        self._refreshed_from: tuple[dict, dict, bool] | None = None
        # Applies here what routing committed before the call (``RoutingReplica.catch_up``);
        # the refresh it causes runs before it returns. None: nothing to catch up with.
        self.catch_up: Callable[[], Awaitable[None]] | None = None
        # Moves whenever a topic is added, changed or removed here: what a reader that
        # keeps something derived from the topics (the produce lane's snapshot,
        # ``SendService.lane_topics``) compares to know it must start again.
        self.version = 0

    def refresh(self, state: RoutingState, broker_group: str) -> None:
        """Replace the contents with what ``state`` says ``broker_group`` serves
        (``RoutingState.topics_on``). Whether this node takes writes is not the table's to
        say: ``ha/role.py`` answers it.

        Incremental, because it runs on the event loop after every routing change: the
        state replaces a table it changes and keeps every record it did not change (copy on
        write), so a route that is the same object as at the last refresh keeps its
        config, and tables that are the same objects are not walked at all. With 10,000
        topics a topic's creation costs one pass of identity checks, not 10,000 configs."""
        routes, groups = state.topics, state.groups
        served_here = broker_group in state.broker_groups
        last = self._refreshed_from
        if last is not None and last[0] is routes and last[1] is groups and last[2] == served_here:
            return  # no table this view reads was replaced
        previous_routes, previous = (last[0], self.topics) if last is not None else ({}, {})
        topics: dict[str, TopicConfig] = {}
        for name, route in routes.items():
            config = (
                previous.get(name) if previous_routes.get(name) is route else route.on(broker_group)
            )
            if config is not None:
                topics[name] = config
        if served_here:
            for group in groups:
                for config in group_topics(group):
                    topics[config.name] = previous.get(config.name) or config
        self.topics = topics
        self.version += 1
        if last is None or groups is not last[1]:
            self.groups = dict(groups)
        self._refreshed_from = (routes, groups, served_here)

    def put_topic(self, config: TopicConfig) -> None:
        self.topics[config.name] = config
        self.version += 1

    def put_group(self, config: GroupConfig) -> None:
        self.groups[config.name] = config

    def topic(self, name: str) -> TopicConfig:
        check_name("TOPIC", name)
        found = self.topics.get(name)
        if found is None:
            raise TopicError("TOPIC_NOT_FOUND", f"topic {name} does not exist on this node")
        return found

    async def topic_caught_up(self, name: str) -> TopicConfig:
        """``topic``, after catching up with routing when this node has not heard of
        ``name`` (``TopicError`` TOPIC_NOT_FOUND only once routing says so too; a routing
        that cannot answer leaves the answer at what this node knew)."""
        try:
            return self.topic(name)
        except TopicError as error:
            if error.reason != "TOPIC_NOT_FOUND" or self.catch_up is None:
                raise
            missing = error
        try:
            await self.catch_up()
        except RoutingUnavailable:
            raise missing from None
        return self.topic(name)

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
            self.version += 1
        return found
