"""Lite topics (RocketMQ 5.5): a consumer of some of a LITE topic's lite topics.

It names the lite topics it wants (``subscribe``, ``unsubscribe``) to the master of each of
the topic's broker groups, which holds the set in memory under this client's id; its
receives then deliver only those lite topics, each in order (POP, as ``SimpleConsumer``).
A master that has not heard the set (it was promoted, or restarted) is told again before
the next receive, and every ``RESYNC_S`` anyway, as the official clients' whole-set sync
does."""

from __future__ import annotations

import time
from collections.abc import Iterable

from ferrymq.client.connection import DEFAULT_ADDRESS
from ferrymq.client.errors import check
from ferrymq.client.messages import ReceivedMessage
from ferrymq.client.security import ClientSecurity
from ferrymq.client.simple_consumer import SimpleConsumer
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc

RESYNC_S = 30.0


class LiteConsumer(SimpleConsumer):
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        group: str = "",
        topic: str = "",
        *,
        timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        super().__init__(address, group, topic, timeout_s=timeout_s, security=security)
        self.lite_topics: set[str] = set()
        self._told: dict[str, tuple[str, float]] = {}  # broker group -> (master, when)

    def subscribe(self, lite_topics: Iterable[str]) -> None:
        names = list(lite_topics)
        self._sync(pb.PARTIAL_ADD, names)
        self.lite_topics.update(names)

    def unsubscribe(self, lite_topics: Iterable[str]) -> None:
        names = [n for n in lite_topics if n in self.lite_topics]
        self._sync(pb.PARTIAL_REMOVE, names)
        self.lite_topics.difference_update(names)

    def receive(
        self, max_messages: int = 16, invisible_s: float = 30.0, wait_s: float = 5.0
    ) -> list[ReceivedMessage]:
        self._tell_masters()
        return super().receive(max_messages, invisible_s, wait_s)

    def _sync(self, action: int, names: list[str]) -> None:
        for broker_group in self.endpoints.route(self.topic).broker_groups:
            self._sync_one(broker_group, action, names)

    def _sync_one(self, broker_group: str, action: int, names: list[str]) -> None:
        master = self.endpoints.master(self.topic, broker_group)
        answer = master.call(
            master.messaging.SyncLiteSubscription,
            rpc.SyncLiteSubscriptionRequest(
                action=action,
                topic=pb.Resource(name=self.topic),
                group=pb.Resource(name=self.group),
                lite_topic_set=names,
            ),
        )
        check(answer.status)
        self._told[broker_group] = (master.address, time.monotonic())

    def _tell_masters(self) -> None:
        """The whole set to each master that may not hold it (a new one, or not told for
        ``RESYNC_S``)."""
        now = time.monotonic()
        for broker_group in self.endpoints.route(self.topic).broker_groups:
            master = self.endpoints.master(self.topic, broker_group)
            told = self._told.get(broker_group)
            if told is None or told[0] != master.address or now - told[1] >= RESYNC_S:
                self._sync_one(broker_group, pb.COMPLETE_ADD, sorted(self.lite_topics))
