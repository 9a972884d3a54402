"""Lite consumers (RocketMQ 5.5): SyncLiteSubscription, and receives that deliver from the
lite topics a client subscribed to (the POP service's ``pop_lite``).

A lite consumer's client id (its ``x-mq-client-id``) names its subscription set
(``node/lite_subscriptions.py``); its long poll wakes when a message arrives in one of its
lite topics and is readable (``LiteIndex.on_arrival``; under a read cap, when the cap
passes it: ``node.long_polling.HeldUntilReadable``, the queues' rule), when a delivery of one
ends (``on_lite_change``), and when the client subscribes to more.

An offset option (a PARTIAL_ADD's, Java's ``subscribeLite(topic, OffsetOption)``) sets where
the group starts a lite topic it has not consumed yet, or moves its cursor forward: MAX
skips what is stored, ``offset`` and ``tail_n`` count in the lite topic's offsets (CommitLog
offsets), ``timestamp`` starts at the first message stored then or later. A cursor never
moves back (the POP state's rule): MIN, or an earlier offset, changes nothing for a lite
topic the group has consumed from.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.group_creation import GroupsOnFirstUse
from node.lite_index import LiteIndex
from node.lite_names import check_lite_topic, lmq_name
from node.lite_notices import LiteNotices
from node.lite_subscriptions import ClientKey, LiteClient, LiteSubscriptions
from node.long_polling import HeldUntilReadable
from node.pop_state import CursorKey
from node.receipt_handle import new_delivery_id
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.permissions import Permissions, consume
from node.services.pop import Delivery, PopService
from node.topics import MessageType, TopicConfig, TopicError, TopicTable

EXPIRY_CHECK_S = 10.0  # how often silent clients are looked for


class LiteService:
    def __init__(
        self,
        topics: TopicTable,
        permissions: Permissions,
        groups: GroupsOnFirstUse,
        pop: PopService,
        index: LiteIndex,
        subscriptions: LiteSubscriptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        notices: LiteNotices | None = None,
        read_cap: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.topics = topics
        self.permissions = permissions
        self.groups = groups
        self.pop = pop
        self.index = index
        self.subscriptions = subscriptions or LiteSubscriptions(clock=clock)
        self.clock = clock
        self._waiting: dict[ClientKey, set[asyncio.Future[None]]] = {}
        self.notices = notices or LiteNotices()  # to clients that lost a lite topic
        self._expired_at = clock()
        self._readable: HeldUntilReadable[str] = HeldUntilReadable(read_cap)
        pop.on_lite_change = self.changed
        index.on_arrival = self.arrived

    # ---- which topics are lite -------------------------------------------------------
    def serves(self, topic_name: str) -> bool:
        """Whether receives of ``topic_name`` are lite receives (a LITE topic this node
        knows; an unknown one goes the usual way, which says so)."""
        try:
            return self.topics.topic(topic_name).message_type is MessageType.LITE
        except TopicError:
            return False

    async def _lite_topic(self, caller: Caller, topic_name: str, group_name: str) -> TopicConfig:
        self.permissions.require(caller, consume(topic_name, group_name))
        topic = await self.topics.topic_caught_up(topic_name)
        if topic.message_type is not MessageType.LITE:
            raise InvalidRequest(
                pb.BAD_REQUEST,
                f"topic {topic.name} is a {topic.message_type.value} topic, not a LITE one: "
                "lite consumers consume LITE topics",
            )
        return topic

    # ---- subscriptions ---------------------------------------------------------------
    async def sync(
        self,
        caller: Caller,
        client_id: str,
        action: int,
        topic_name: str,
        group_name: str,
        lite_topics: list[str],
        offset_option: pb.OffsetOption | None = None,
    ) -> None:
        """One SyncLiteSubscription. ``InvalidRequest`` or ``TopicError`` changes nothing."""
        if not client_id:
            raise InvalidRequest(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is required")
        topic = await self._lite_topic(caller, topic_name, group_name)
        group = await self.groups.group(group_name)
        if action == pb.PARTIAL_ADD:
            for name in lite_topics:
                check_lite_topic(name)
        self._expire()
        self.subscriptions.sync(action, group.name, client_id, topic.name, lite_topics)
        if action == pb.PARTIAL_ADD and group.lite_exclusive:
            await self._exclude_others(group.name, client_id, topic.name, lite_topics)
        if action == pb.PARTIAL_ADD and offset_option is not None:
            await self._start_at(group.name, topic.name, lite_topics, offset_option)
        self._wake((group.name, client_id))  # a new lite topic may have messages already

    async def _exclude_others(
        self, group: str, client_id: str, topic: str, lite_topics: list[str]
    ) -> None:
        """An Exclusive group: the other subscribers of these lite topics lose them, each
        told by a NotifyUnsubscribeLiteCommand on its Telemetry stream, on whichever node
        of the group that is (``node/lite_notices.py``)."""
        named = {lmq_name(topic, name): name for name in lite_topics}
        excluded = self.subscriptions.exclude_others(group, client_id, named)
        await self.notices.send([(other, named[lmq]) for other, lmq in excluded])

    # ---- notices to clients ----------------------------------------------------------
    def listen(self, client_id: str, notify: Callable[[str], bool]) -> None:
        """``notify(lite_topic)`` tells the lite consumer ``client_id`` it lost a lite
        topic (its Telemetry stream here)."""
        self.notices.listen(client_id, notify)

    def unlisten(self, client_id: str, notify: Callable[[str], bool]) -> None:
        self.notices.unlisten(client_id, notify)

    def forget(self, group: str, client_id: str) -> None:
        """The client left (NotifyClientTermination)."""
        self.subscriptions.forget(group, client_id)

    def _expire(self) -> None:
        now = self.clock()
        if now - self._expired_at >= EXPIRY_CHECK_S:
            self._expired_at = now
            self.subscriptions.expire()

    async def _start_at(
        self, group: str, topic: str, lite_topics: list[str], option: pb.OffsetOption
    ) -> None:
        records, undo = [], []
        state = self.pop.state
        for name in lite_topics:
            lmq = lmq_name(topic, name)
            key: CursorKey = (group, lmq, 0)
            target = self._target(lmq, option)
            cursor = state.cursor(key)
            if target is None or target <= (cursor.next_offset if cursor else 0):
                continue  # a cursor only moves forward
            before = None if cursor is None else cursor.next_offset
            records.append(state.pop(key, [], target, new_delivery_id(), 0))
            undo.append(lambda k=key, b=before: _move_back(state, k, b))
        if records:
            await self.pop._append(records, undo)

    def _target(self, lmq: str, option: pb.OffsetOption) -> int | None:
        kind = option.WhichOneof("offset_type")
        if kind == "policy":
            return self.index.end(lmq) if option.policy == pb.OffsetOption.MAX else None
        if kind == "offset":
            return option.offset
        if kind == "tail_n":
            return self.index.nth_from_end(lmq, option.tail_n)
        if kind == "timestamp":
            return self._first_stored_at(lmq, option.timestamp)
        return None

    def _first_stored_at(self, lmq: str, timestamp_ms: int) -> int:
        """The offset of ``lmq``'s first message stored at ``timestamp_ms`` or later (its
        end if none): store times rise with offsets, so a binary search."""
        offsets = self.index.offsets(lmq)
        low, high = 0, len(offsets)
        while low < high:
            middle = (low + high) // 2
            stored = self.index.message_at(lmq, offsets[middle])
            if stored is not None and stored.store_timestamp_ms >= timestamp_ms:
                high = middle
            else:
                low = middle + 1
        return offsets[low] if low < len(offsets) else self.index.end(lmq)

    # ---- receiving -------------------------------------------------------------------
    async def receive(
        self,
        caller: Caller,
        client_id: str,
        group_name: str,
        topic_name: str,
        batch_size: int,
        invisible_ms: int | None,
        wait_s: float,
    ) -> list[Delivery]:
        if not client_id:
            raise InvalidRequest(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is required")
        topic = await self._lite_topic(caller, topic_name, group_name)
        self._expire()
        return await self.pop.pop_lite(
            group_name,
            topic,
            lambda group: self.subscriptions.client(group, client_id),
            batch_size,
            invisible_ms,
            wait_s,
            lambda client, seconds: self._wait(client, client_id, seconds),
        )

    async def _wait(self, client: LiteClient | None, client_id: str, timeout_s: float) -> None:
        """Until something may be ready for ``client``, or ``timeout_s``. A client this
        node holds no subscriptions of waits for its sync (``sync`` wakes its group's
        key; its group is unknown here, so any sync of that client id does)."""
        key = (client.group, client_id) if client is not None else ("", client_id)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiting.setdefault(key, set())
        waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiting.get(key) is waiters:
                del self._waiting[key]

    def changed(self, lmq: str) -> None:
        """``lmq`` may have something to deliver: its subscribers look at it again, and
        their long polls wake."""
        self.subscriptions.mark_ready(lmq)
        for key in self.subscriptions.subscribers(lmq):
            self._wake(key)

    def arrived(self, lmqs: list[str], end: int) -> None:
        """Messages of ``lmqs`` were dispatched, up to log offset ``end``: those readable
        now change their lite topics; the others wait for the read cap to pass them."""
        for lmq in self._readable.dispatched(lmqs, end):
            self.changed(lmq)

    def readable_moved(self) -> None:
        """The read cap moved: the lite topics whose messages it may have passed change."""
        for lmq in self._readable.cap_moved():
            self.changed(lmq)

    def _wake(self, key: ClientKey) -> None:
        for each in (key, ("", key[1])):
            for waiter in self._waiting.pop(each, ()):
                if not waiter.done():
                    waiter.set_result(None)


def _move_back(state, key: CursorKey, before: int | None) -> None:
    """Undo a refused cursor move (the log never had it)."""
    if before is None:
        state.cursors.pop(key, None)
    else:
        cursor = state.cursor(key)
        if cursor is not None:
            cursor.next_offset = before
