"""Which lite topics each lite consumer subscribes to (RocketMQ 5.5's SyncLiteSubscription).

A lite consumer (Java's LitePushConsumer, Python's LiteSimpleConsumer and LitePushConsumer)
names the lite topics it wants, one LITE topic per consumer: PARTIAL_ADD and PARTIAL_REMOVE
as its application subscribes and unsubscribes, COMPLETE_ADD with its whole set every 30 s,
COMPLETE_REMOVE to drop everything. Its receives then deliver only from those lite topics,
each one's messages in order. The set lives where the receives are served, the master of
the topic's broker group, in memory, as in RocketMQ's broker: a client whose set this node
has not heard of (it restarted, or became master since) gets nothing until the client's
next COMPLETE_ADD (30 s at most), and a client silent for ``IDLE_S`` is forgotten.

A group created Exclusive (RocketMQ 5.5's ``lite.sub.model``) gives each lite topic to one
of its clients: the newest to subscribe to it (PARTIAL_ADD) takes it from the others, who
are told (``exclude_others``; the service sends NotifyUnsubscribeLiteCommand). A whole-set
sync excludes nobody, as in RocketMQ: a client that missed its notice re-adds the lite
topic with its next COMPLETE_ADD and shares it until someone subscribes again.

Quotas (LITE_SUBSCRIPTION_QUOTA_EXCEEDED): one request names at most ``REQUEST_MAX`` lite
topics (the per-client quota the settings announce, plus RocketMQ's slack of 300), and the
node holds at most ``subscriptions_max`` (client, lite topic) pairs.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.lite_names import lmq_name
from node.rpc_status import InvalidRequest

CLIENT_QUOTA = 2000  # lite topics per client, announced in its settings (RocketMQ's default)
REQUEST_MAX = CLIENT_QUOTA + 300
SUBSCRIPTIONS_MAX = 100_000  # (client, lite topic) pairs per node (maxLiteSubscriptionCount)
IDLE_S = 180.0  # a client that synced nothing for this long is forgotten (RocketMQ: 3 min)

ClientKey = tuple[str, str]  # (group, client id)


@dataclass
class LiteClient:
    """One lite consumer's subscription set. ``ready`` is the part of it a receive looks
    at: the lite topics that may have something for it (subscribed, a message arrived, a
    delivery ended), less those a receive found with nothing new and nothing in flight;
    so a receive costs what is ready, not the whole set (2,000 lite topics a client)."""

    group: str
    client_id: str
    topic: str  # the LITE topic its lite topics belong to
    lmqs: set[str] = field(default_factory=set)
    heard_at: float = 0.0
    ready: set[str] = field(default_factory=set)


class LiteSubscriptions:
    def __init__(
        self,
        subscriptions_max: int = SUBSCRIPTIONS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.subscriptions_max = subscriptions_max
        self.clock = clock
        self._clients: dict[ClientKey, LiteClient] = {}
        self._subscribers: dict[str, set[ClientKey]] = {}  # lmq name -> its clients
        self._count = 0

    # ---- changes -------------------------------------------------------------------
    def sync(
        self,
        action: int,
        group: str,
        client_id: str,
        topic: str,
        lite_topics: Iterable[str],
    ) -> set[str]:
        """Apply one SyncLiteSubscription; the lmq names it added. ``InvalidRequest``
        (LITE_SUBSCRIPTION_QUOTA_EXCEEDED) changes nothing."""
        names = set(lite_topics)
        if len(names) > REQUEST_MAX:
            raise InvalidRequest(
                pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                f"lite subscription quota exceeded: {CLIENT_QUOTA} (this request names "
                f"{len(names)} lite topics)",
            )
        lmqs = {lmq_name(topic, name) for name in names}
        key = (group, client_id)
        client = self._clients.get(key)
        if client is not None and client.topic != topic:
            self._remove(client, set(client.lmqs))  # it moved to another LITE topic
        if action == pb.COMPLETE_REMOVE:
            if client is not None:
                self._remove(client, set(client.lmqs))
                del self._clients[key]
            return set()
        if client is None or client.topic != topic:
            client = self._clients[key] = LiteClient(group, client_id, topic)
        client.heard_at = self.clock()
        if action == pb.PARTIAL_REMOVE:
            self._remove(client, lmqs & client.lmqs)
            return set()
        added = lmqs - client.lmqs
        dropped = client.lmqs - lmqs if action == pb.COMPLETE_ADD else set()
        if self._count - len(dropped) + len(added) > self.subscriptions_max:
            raise InvalidRequest(
                pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                f"lite subscription quota exceeded: this node holds {self._count} lite "
                f"subscriptions, the limit is {self.subscriptions_max}",
            )
        self._remove(client, dropped)
        for lmq in added:
            client.lmqs.add(lmq)
            self._subscribers.setdefault(lmq, set()).add(key)
        self._count += len(added)
        # Each named lite topic is looked at again: a new one may hold messages, and the
        # 30 s whole-set sync mends a mark missed (a delivery of another client of the
        # group that expired unacked).
        client.ready |= lmqs
        return added

    def exclude_others(
        self, group: str, client_id: str, lmqs: Iterable[str]
    ) -> list[tuple[str, str]]:
        """RocketMQ 5.5's Exclusive model: ``client_id`` subscribed to ``lmqs``, so every
        other client of ``group`` loses those of them it had; the (client id, lmq name)
        pairs taken away, for the notices they are owed."""
        excluded = []
        for lmq in lmqs:
            for key in sorted(self._subscribers.get(lmq, ())):
                if key[0] == group and key[1] != client_id:
                    self._remove(self._clients[key], {lmq})
                    excluded.append((key[1], lmq))
        return excluded

    def forget(self, group: str, client_id: str) -> None:
        """The client left (NotifyClientTermination)."""
        client = self._clients.pop((group, client_id), None)
        if client is not None:
            self._remove(client, set(client.lmqs))

    def expire(self) -> None:
        """Forget the clients silent for ``IDLE_S``."""
        limit = self.clock() - IDLE_S
        for key, client in list(self._clients.items()):
            if client.heard_at < limit:
                self._remove(client, set(client.lmqs))
                del self._clients[key]

    def drop_lite_topic(self, lmq: str) -> int:
        """``lmq`` expired (``node/lite_expiry.py``): no client subscribes to it any more.
        Clients are not told (RocketMQ's rule): one that names it again subscribes again.
        Returns how many subscriptions went."""
        keys = list(self._subscribers.get(lmq, ()))
        for key in keys:
            self._remove(self._clients[key], {lmq})
        return len(keys)

    def _remove(self, client: LiteClient, lmqs: set[str]) -> None:
        key = (client.group, client.client_id)
        for lmq in lmqs:
            client.lmqs.discard(lmq)
            client.ready.discard(lmq)
            subscribers = self._subscribers.get(lmq)
            if subscribers is not None:
                subscribers.discard(key)
                if not subscribers:
                    del self._subscribers[lmq]
        self._count -= len(lmqs)

    def mark_ready(self, lmq: str) -> None:
        """``lmq`` may have something to deliver (a message arrived, a delivery ended)."""
        for key in self._subscribers.get(lmq, ()):
            self._clients[key].ready.add(lmq)

    # ---- reading -------------------------------------------------------------------
    def client(self, group: str, client_id: str) -> LiteClient | None:
        return self._clients.get((group, client_id))

    def subscribers(self, lmq: str) -> set[ClientKey]:
        return self._subscribers.get(lmq, set())

    @property
    def count(self) -> int:
        """(client, lite topic) pairs held."""
        return self._count
