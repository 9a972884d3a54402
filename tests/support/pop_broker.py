"""A broker in one process for POP tests: a real store, the topic table, consumer offsets,
POP state and service on one loop, with an injected clock, reopenable after an abrupt
stop; and the offset reset service over its states."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.consumer_offsets import ConsumerOffsets
from node.group_creation import GroupsOnFirstUse
from node.grpc.messaging import MessagingService
from node.handle_key import receipt_handle_key
from node.long_polling import QueueWaiters
from node.pop_state import PopState
from node.receipt_handle import ReceiptHandles
from node.services.dead_letter_resend import DeadLetterResendService
from node.services.lite import LiteService
from node.services.offset_reset import OffsetResetService
from node.services.peer_admin import PeerAdmin
from node.services.permissions import Permissions
from node.services.pop import PopService
from node.topics import GroupConfig, TopicConfig, TopicTable
from routing.metadata import BrokerGroup, Member, TopicRoute
from routing.state import RoutingState
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore

SMALL_STORE = dict(
    commitlog_segment_bytes=8 * 1024 * 1024,
    consume_queue_entries_per_file=1000,
    index_slot_count=101,
    index_entry_count=4000,
)
T0 = 1_800_000_000_000
CLUSTER_SECRET = "pop-test-cluster-secret"


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


class Broker:
    """A store, topic table and PopService on one loop, reopenable after an abrupt stop."""

    def __init__(self, tmp_path, loop: asyncio.AbstractEventLoop) -> None:
        self.tmp_path = tmp_path
        self.loop = loop
        self.clock = Clock()
        self.handles = ReceiptHandles(receipt_handle_key(CLUSTER_SECRET, str(tmp_path)))
        self.open()

    def open(self, **store_options) -> None:
        options = SMALL_STORE | store_options
        self.store = MessageStore.open(StoreConfig(str(self.tmp_path / "data"), **options))
        # Topics and groups live in routing, not in the store: they outlive a store crash.
        self.topics = getattr(self, "topics", None) or TopicTable()
        self.offsets = ConsumerOffsets(self.store)
        self.offsets.load()
        self.state = PopState(self.store)
        self.state.replay()
        self.service = PopService(
            self.store,
            self.topics,
            self.offsets,
            self.state,
            QueueWaiters(self.loop),
            self.handles,
            Permissions(enabled=False),
            clock_ms=self.clock,
        )
        # The RocketMQ 5 door over it: its answers are what these tests read.
        lite = LiteService(
            self.topics,
            Permissions(enabled=False),
            GroupsOnFirstUse(self.topics, None, enabled=False),
            self.service,
            self.service.lite_index,
        )
        self.lite = lite
        self.door = MessagingService(SimpleNamespace(pop=self.service, lite=lite), 4 << 20)

    def crash_and_reopen(self) -> None:
        self.store.close_abruptly_for_tests()
        self.open()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def send(self, topic: str, count: int, queue_id: int = 0, **build) -> None:
        for i in range(count):
            message = Message.build(topic, b"body-%d" % i, queue_id=queue_id, **build)
            assert self.store.put_message(message).ok

    def receive(
        self, group: str, topic: str, batch: int = 32, invisible_ms: int = 10_000, tags=None
    ):
        return self.run(
            self.service.receive(
                self.topics.group(group), self.topics.topic(topic), tags, batch, invisible_ms
            )
        )

    def ack(self, group: str, topic: str, *handles: str) -> rpc.AckMessageResponse:
        request = rpc.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[rpc.AckMessageEntry(message_id="m", receipt_handle=h) for h in handles],
        )
        return self.run(self.door.AckMessage(request, None))

    def change(self, group: str, topic: str, handle: str, seconds: int, suspend: bool = False):
        request = rpc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=handle,
            message_id="m",
            suspend=suspend,
        )
        request.invisible_duration.seconds = seconds
        return self.run(self.door.ChangeInvisibleDuration(request, None))

    def forward(self, group: str, topic: str, handle: str):
        request = rpc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle
        )
        return self.run(self.door.ForwardMessageToDeadLetterQueue(request, None))

    def dead_letters(self, group: str) -> list[bytes]:
        result = self.store.get_messages(f"%DLQ%{group}", 0, 0, 1000)
        return [m.body for m in result.messages]


class OneMaster:
    """The store as the offset reset service sees a master's (``is_master``)."""

    def __init__(self, store) -> None:
        self._store = store
        self.is_master = True

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def reset_service(broker) -> OffsetResetService:
    """The offset reset service over ``broker``'s states: routing knows ``orders`` with two
    queues on this node's broker group, ``group-1``."""
    routing = RoutingState()
    routing.topics["orders"] = TopicRoute("orders", (("group-1", 2),))
    reads = SimpleNamespace(read=lambda view: view(routing))
    return OffsetResetService(
        OneMaster(broker.store),
        broker.topics,
        broker.offsets,
        broker.state,
        reads,
        Permissions(enabled=False),
        "group-1",
        unreachable_peers(routing),
    )


def opened_broker(tmp_path) -> Broker:
    """A broker with the topic ``orders`` (2 queues) and the group ``G`` (3 attempts)."""
    created = Broker(tmp_path, asyncio.new_event_loop())
    created.topics.put_topic(TopicConfig("orders", queue_count=2))
    created.topics.put_group(GroupConfig("G", max_delivery_attempts=3))
    return created


def closed(broker: Broker) -> None:
    broker.store.shutdown()
    broker.loop.close()


def resend_service(
    broker, permissions=None, is_master=True, master: str | None = "node-2"
) -> DeadLetterResendService:
    """The service over ``broker``'s states, this node (``node-1``) the master of
    ``group-1`` (or a slave of it whose master is ``master``, None: none now), with a
    ``PeerAdmin`` that finds masters in that routing but reaches no node."""
    routing = RoutingState()
    routing.broker_groups["group-1"] = BrokerGroup("group-1", master=master)
    routing.members["node-2"] = Member("node-2", "group-1", "127.0.0.1:1", "", "")
    store = OneMaster(broker.store)
    store.is_master = is_master
    return DeadLetterResendService(
        store,
        broker.topics,
        broker.state,
        QueueWaiters(broker.loop),
        SimpleNamespace(read=lambda view: view(routing)),
        permissions or Permissions(enabled=False),
        "group-1",
        unreachable_peers(routing),
        clock_ms=broker.clock,
    )


def unreachable_peers(routing: RoutingState) -> PeerAdmin:
    def no_channel(address: str):
        raise AssertionError(f"a unit test asked {address}")

    return PeerAdmin(
        no_channel,
        lambda user: (),
        lambda group: (group in routing.broker_groups, routing.master_of(group)),
        "node-1",
    )
