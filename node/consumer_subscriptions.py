"""What each consumer group subscribes to, as RocketMQ 4.x consumers register it with their
heartbeats: the Java push consumer and the Go client pull without a subscription of
their own (PULL_MESSAGE's subscription flag clear), and the broker filters with the one
registered here.

Per group and topic the newest registration wins (its ``subVersion``, the client's
subscription time, is not older). Soft state like the members it belongs to
(``node/group_members.py``): a restarted node learns it again from the next heartbeats,
and a group's entries go when its last member leaves. Bounded: at most ``MAX_GROUPS``
groups and ``MAX_TOPICS_PER_GROUP`` topics each; a registration past a bound is refused.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_GROUPS = 10_000
MAX_TOPICS_PER_GROUP = 1024
MAX_EXPRESSION_CHARS = 4096


class SubscriptionRefused(Exception):
    """A registration past a bound."""


@dataclass(frozen=True)
class Subscription:
    topic: str
    expression: str  # "*", "a || b", or SQL92
    expression_type: str  # "TAG" or "SQL92"
    version: int  # the client's subVersion


class Subscriptions:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Subscription]] = {}

    def register(self, group: str, subscriptions: list[Subscription]) -> None:
        topics = self._groups.get(group)
        if topics is None:
            if len(self._groups) >= MAX_GROUPS:
                raise SubscriptionRefused(f"this node holds subscriptions of {MAX_GROUPS} groups")
            topics = {}
        for subscription in subscriptions:
            if len(subscription.expression) > MAX_EXPRESSION_CHARS:
                raise SubscriptionRefused(
                    f"subscription of {subscription.topic} is {len(subscription.expression)} "
                    f"characters, the limit is {MAX_EXPRESSION_CHARS}"
                )
            known = topics.get(subscription.topic)
            if known is None and len(topics) >= MAX_TOPICS_PER_GROUP:
                raise SubscriptionRefused(
                    f"group {group} subscribes to {MAX_TOPICS_PER_GROUP} topics, the limit"
                )
            if known is None or known.version <= subscription.version:
                topics[subscription.topic] = subscription
        self._groups[group] = topics

    def get(self, group: str, topic: str) -> Subscription | None:
        topics = self._groups.get(group)
        return topics.get(topic) if topics is not None else None

    def of(self, group: str) -> list[Subscription]:
        """Every topic the group subscribes to, as registered."""
        return list(self._groups.get(group, {}).values())

    def groups_of(self, topic: str) -> list[str]:
        """The groups with a live subscription to ``topic`` (a pass over the groups, at
        most ``MAX_GROUPS``: an admin's question, not the data path's)."""
        return [group for group, topics in self._groups.items() if topic in topics]

    def forget(self, group: str) -> None:
        """The group's last member left."""
        self._groups.pop(group, None)

    def __len__(self) -> int:
        return len(self._groups)
