"""``apache.rocketmq.v2.MessagingService`` on top of one node's store.

Every response carries a status (the official clients reject code 0). Validation errors
answer with the precise ``Code`` and change nothing; a produced message is admitted by
``node.admission``, which also maps the store's refusals to codes. Every RPC of the
service is served: the POP ones by ``pop_service``, EndTransaction and orphan checks by
``transaction_service``.

Thread-safety: all handlers run on the node's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf import duration_pb2

from ferrymq.codec.headers import PINNED_QUEUE_HEADER, PINNED_QUEUE_VALUE
from ferrymq.codec.properties import PROPERTY_DELIVERY_TIME_MS, PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ha.replicated_store import ReplicatedStore
from node.admission import (
    Admission,
    accepted_types,
    check_batch_bytes,
    check_batch_count,
    check_body_size,
    message_kind,
    store_refusal,
)
from node.config import MessagingOptions
from node.consumer_offsets import ConsumerOffsets
from node.convert import (
    delivery_ms,
    millis_of,
    to_store_message,
    to_wire_message,
)
from node.filter_expression import selection
from node.group_creation import GroupsOnFirstUse
from node.group_members import (
    GroupMembers,
    MembershipRefused,
    caller_identity,
    client_id_of,
)
from node.long_polling import LONG_POLLING_DEFAULT_S, QueueWaiters, long_poll, poll_budget_s
from node.parked import real_topic_of
from node.pop_service import RECEIVE_BATCH_MAX, PopService, now_ms
from node.route_endpoints import group_endpoints
from node.rpc_status import (
    OK,
    InvalidRequest,
    seconds_of,
    status,
    topic_error_status,
)
from node.telemetry_outbox import TelemetryOutbox
from node.timer_service import TimerService
from node.topics import (
    GroupConfig,
    MessageType,
    Permission,
    TopicConfig,
    TopicError,
    TopicTable,
)
from node.transaction_service import HALF_TOPIC, TransactionService
from routing.metadata import TopicRoute, check_name
from routing.replica import RoutingReplica
from routing.state import RoutingState
from store.message import Message
from store.results import GetStatus, PutStatus

PULL_BATCH_MAX = 256
# Every message of a request is converted and validated in one turn of the event loop: the
# bound keeps that turn short. The SDK sends at most 128 per request, the official
# clients one (or a small batch).
SEND_MESSAGES_MAX = 1024
# Delay before a failed message comes back (the client asks via ChangeInvisibleDuration).
DEFAULT_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800)
# FIFO consumers retry locally while the delivery stays invisible and the node does not
# renew it: short fixed pauses keep all attempts inside the default invisibility (60 s).
FIFO_BACKOFF_S = (1,)
# What the official producers are told about retries (Apache RocketMQ's proxy defaults): a
# client that announces its own attempts keeps them; the delay doubles from 10 ms to 1 s.
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF = pb.ExponentialBackoff(
    initial=duration_pb2.Duration(nanos=10_000_000),
    max=duration_pb2.Duration(seconds=1),
    multiplier=2.0,
)
DEFAULT_REQUEST_TIMEOUT_S = 3
# A producer's settings name the topics it publishes; the stream is registered for the
# orphan checks of each, so a bound keeps one stream's share of that registry small.
MAX_PUBLISHING_TOPICS = 1024

PERMISSIONS = {
    Permission.READ: pb.READ,
    Permission.WRITE: pb.WRITE,
    Permission.READ_WRITE: pb.READ_WRITE,
}


def consumer_backoff(group: GroupConfig, exponential: bool) -> pb.RetryPolicy:
    """When a consumer retries a failed message: the group's attempts and the delays of
    ``DEFAULT_BACKOFF_S`` (``FIFO_BACKOFF_S`` for a FIFO group), as a customized backoff
    (Apache RocketMQ's proxy's default for a group), or, for a client that implements only
    the exponential kind (``exponential``: the Node.js client), the exponential one closest
    to it (FIFO: a fixed delay)."""
    delays = FIFO_BACKOFF_S if group.fifo else DEFAULT_BACKOFF_S
    policy = pb.RetryPolicy(max_attempts=group.max_delivery_attempts)
    if exponential:
        policy.exponential_backoff.initial.seconds = delays[0]
        policy.exponential_backoff.max.seconds = delays[-1]
        policy.exponential_backoff.multiplier = 1.0 if len(delays) == 1 else 2.0
    else:
        policy.customized_backoff.next.extend(duration_pb2.Duration(seconds=s) for s in delays)
    return policy


def pins_queues(context) -> bool:
    """Whether the caller names the queue of each message on purpose
    (``ferrymq.codec.headers``); the official clients never do."""
    for key, value in context.invocation_metadata() or ():
        if key == PINNED_QUEUE_HEADER:
            return value == PINNED_QUEUE_VALUE
    return False


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        waiters: QueueWaiters,
        pop: PopService,
        broker_name: str,
        routing: RoutingReplica,
        transactions: TransactionService,
        members: GroupMembers,
        options: MessagingOptions | None = None,
        clock_ms: Callable[[], int] = now_ms,
        authenticated: bool = False,
        groups: GroupsOnFirstUse | None = None,
    ) -> None:
        self.authenticated = authenticated  # calls passed access control (node.access)
        self.groups = groups or GroupsOnFirstUse(topics, None, enabled=False)
        self.pop = pop
        self.transactions = transactions
        self.members = members
        self.options = options or MessagingOptions()
        self.clock_ms = clock_ms
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.waiters = waiters
        self.broker_name = broker_name
        self.routing = routing
        self.admission = Admission(store, topics, routing, broker_name)

    # ---- routing ---------------------------------------------------------------------
    @staticmethod
    def _queues(state: RoutingState, route: TopicRoute) -> list[pb.MessageQueue]:
        """Every queue of ``route``, each naming every node of its broker group, master
        first (``node.route_endpoints``): clients send every other RPC to the endpoints a
        route names, so one access point reaches the whole cluster, and any of the nodes
        serves the call (``node.forwarding``), also while a master is being elected."""
        queues = []
        for broker_group, count in route.queues:
            endpoints = group_endpoints(state, broker_group)
            if endpoints is None:
                continue  # no node registered yet
            broker = pb.Broker(name=broker_group, id=0, endpoints=endpoints)
            queues.extend(
                pb.MessageQueue(
                    topic=pb.Resource(name=route.name),
                    id=queue_id,
                    permission=PERMISSIONS[route.permission],
                    broker=broker,
                    accept_message_types=accepted_types(route.message_type),
                )
                for queue_id in range(count)
            )
        return queues

    async def QueryRoute(self, request, context):
        try:
            queues = self.routing.read(
                lambda state: self._queues(state, state.topic(request.topic.name))
            )
        except TopicError as error:
            return rpc.QueryRouteResponse(status=topic_error_status(error))
        return rpc.QueryRouteResponse(status=OK, message_queues=queues)

    async def QueryAssignment(self, request, context):
        """What a push consumer should poll. A receive pops the whole topic on the node it
        reaches, so a normal group gets one assignment per broker group (queue id -1, as
        the Java proxy answers); a FIFO group gets every queue, one poll loop each, so one
        held queue blocks no other."""

        def assignments_of(state: RoutingState) -> list[pb.MessageQueue]:
            route = state.topic(request.topic.name)
            queues = self._queues(state, route)
            if group.fifo:
                return queues
            one_per_broker = {}
            for queue in queues:
                one_per_broker.setdefault(queue.broker.name, queue)
            for queue in one_per_broker.values():
                queue.id = -1
            return list(one_per_broker.values())

        try:
            # Needs no permission on the group, so it never creates one: an unknown group
            # is answered for as the default group it would become.
            group = self.groups.default(request.group.name)
            queues = self.routing.read(assignments_of)
        except TopicError as error:
            return rpc.QueryAssignmentResponse(status=topic_error_status(error))
        assignments = [pb.Assignment(message_queue=queue) for queue in queues]
        return rpc.QueryAssignmentResponse(status=OK, assignments=assignments)

    async def Heartbeat(self, request, context):
        """A consumer's heartbeat names its group, which must exist or is created now
        (``node.group_creation``); a producer's names none and is only answered."""
        if not request.HasField("group"):
            return rpc.HeartbeatResponse(status=OK)
        try:
            identity = caller_identity(context, self.authenticated)
            group = await self.groups.group(request.group.name)
            self.members.heartbeat(group.name, client_id_of(context), identity)
        except TopicError as error:
            return rpc.HeartbeatResponse(status=topic_error_status(error))
        except InvalidRequest as error:
            return rpc.HeartbeatResponse(status=status(error.code, str(error)))
        except MembershipRefused as refused:
            return rpc.HeartbeatResponse(status=status(refused.code, str(refused)))
        return rpc.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):
        """A consumer leaves its group at once. The group need not exist any more (it may
        have been deleted while the client ran); its name must be legal."""
        if not request.HasField("group"):
            return rpc.NotifyClientTerminationResponse(status=OK)
        try:
            check_name("CONSUMER_GROUP", request.group.name)
            identity = caller_identity(context, self.authenticated)
            self.members.leave(request.group.name, client_id_of(context), identity)
        except TopicError as error:
            return rpc.NotifyClientTerminationResponse(status=topic_error_status(error))
        except MembershipRefused as refused:
            return rpc.NotifyClientTerminationResponse(status=status(refused.code, str(refused)))
        return rpc.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[pb.TelemetryCommand]:
        """Answer each settings write with the settings the client must use, and push
        orphan-transaction checks to producers; the stream stays open until the client
        closes it (the clients expect that). A client that does not read its answers is
        cut off once ``OUTBOX_MAX`` wait (``node.telemetry_outbox``)."""
        outbox = TelemetryOutbox()
        overflowed = False

        async def read_commands() -> None:
            nonlocal overflowed
            try:
                async for command in request_iterator:
                    if command.WhichOneof("command") != "settings":
                        continue  # results of commands we never send
                    if not outbox.offer(self._settings_answer(command.settings, outbox)):
                        overflowed = True
                        return
            finally:
                outbox.close()

        reader = asyncio.ensure_future(read_commands())
        try:
            while (command := await outbox.next()) is not None:
                yield command
        finally:
            reader.cancel()
            self.transactions.producers.unregister(outbox)
        if overflowed:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{outbox.limit} Telemetry answers wait unread: the client does not read "
                "its stream",
            )

    def _settings_answer(self, settings: pb.Settings, outbox: TelemetryOutbox):
        """The answer to one settings command; a producer's also registers the stream for
        the orphan checks of the topics it publishes."""
        if settings.WhichOneof("pub_sub") == "publishing":
            topics = [t.name for t in settings.publishing.topics]
            if len(topics) > MAX_PUBLISHING_TOPICS:
                return rpc.TelemetryCommand(
                    status=status(
                        pb.BAD_REQUEST,
                        f"publishing names {len(topics)} topics, the limit is "
                        f"{MAX_PUBLISHING_TOPICS}",
                    )
                )
            self.transactions.producers.register(outbox, topics)
        return rpc.TelemetryCommand(status=OK, settings=self._settings_for(settings))

    def _settings_for(self, settings: pb.Settings) -> pb.Settings:
        """The client's settings with what the node decides filled in: every field an
        official client reads (docs/architecture.md, "Settings"). The Node.js client reads
        the backoff policy unconditionally, the push consumers take their batch size, long
        poll and FIFO mode from here, and the Python producer's body limit becomes 0
        without ``publishing``."""
        answer = pb.Settings()
        answer.CopyFrom(settings)
        if seconds_of(answer.request_timeout) <= 0:
            answer.request_timeout.seconds = DEFAULT_REQUEST_TIMEOUT_S
        if settings.WhichOneof("pub_sub") == "publishing" or settings.client_type == pb.PRODUCER:
            answer.publishing.max_body_size = self.store.config.max_message_body_bytes
            answer.publishing.validate_message_type = True
            backoff = answer.backoff_policy
            backoff.max_attempts = backoff.max_attempts or PRODUCER_MAX_ATTEMPTS
            backoff.exponential_backoff.CopyFrom(PRODUCER_BACKOFF)
        elif settings.WhichOneof("pub_sub") == "subscription" or settings.client_type in (
            pb.PUSH_CONSUMER,
            pb.SIMPLE_CONSUMER,
            pb.PULL_CONSUMER,
        ):
            subscription = answer.subscription
            group = self.groups.known(settings.subscription.group.name) or GroupConfig("-")
            if not subscription.long_polling_timeout.seconds:
                subscription.long_polling_timeout.seconds = int(LONG_POLLING_DEFAULT_S)
            subscription.receive_batch_size = RECEIVE_BATCH_MAX
            subscription.fifo = group.fifo
            answer.backoff_policy.CopyFrom(
                consumer_backoff(group, settings.user_agent.language == pb.NODE_JS)
            )
        answer.metric.Clear()
        answer.metric.on = False  # a client told "on" starts exporting to our endpoints
        return answer

    # ---- producing -------------------------------------------------------------------
    async def SendMessage(self, request, context):
        try:
            self.admission.check_master()
            messages = self._messages_to_store(request, pins_queues(context))
        except InvalidRequest as error:
            return self._send_refused(request, status(error.code, str(error)))
        except TopicError as error:
            return self._send_refused(request, topic_error_status(error))
        result = await self.store.put_messages_async(messages)
        if result.status is not PutStatus.OK:
            return self._send_refused(request, store_refusal(result))
        entries = [
            rpc.SendResultEntry(
                status=OK,
                message_id=sent.system_properties.message_id,
                offset=appended.queue_offset,
            )
            for sent, appended in zip(request.messages, result.appended, strict=True)
        ]
        for entry, message, appended in zip(entries, messages, result.appended, strict=True):
            if message.topic == HALF_TOPIC:
                entry.transaction_id = message.properties[PROPERTY_TRANSACTION_ID]
                self.transactions.sent(
                    entry.transaction_id, real_topic_of(message), appended.queue_offset
                )
        return rpc.SendMessageResponse(status=OK, entries=entries)

    async def EndTransaction(self, request, context):
        return await self.transactions.end_transaction(request)

    @staticmethod
    def _send_refused(request, answer: pb.Status) -> rpc.SendMessageResponse:
        """One entry per message, as the clients expect; none for a request beyond the
        message limit, so a refusal is never larger than an answer can be."""
        if len(request.messages) > SEND_MESSAGES_MAX:
            return rpc.SendMessageResponse(status=answer)
        return rpc.SendMessageResponse(
            status=answer,
            entries=[
                rpc.SendResultEntry(status=answer, message_id=m.system_properties.message_id)
                for m in request.messages
            ],
        )

    def _messages_to_store(self, request, pinned: bool):
        """The messages to append; ``pinned``: each goes to the queue it names."""
        admission = self.admission
        check_batch_count(len(request.messages), SEND_MESSAGES_MAX)
        check_batch_bytes(sum(len(m.body) for m in request.messages), admission.batch_limit)
        names = {m.topic.name for m in request.messages}
        if len(names) != 1:
            raise InvalidRequest(pb.BAD_REQUEST, "a batch must target one topic")
        topic = admission.writable_topic(names.pop())
        limit = admission.body_limit
        messages = []
        for message in request.messages:
            system = message.system_properties
            check_body_size(len(message.body), limit)
            kind = message_kind(topic, system.message_type)
            queue_id = admission.send_queue(
                topic, kind, system.message_group, system.queue_id if pinned else None
            )
            stored = to_store_message(message, queue_id, topic.name)
            if kind is MessageType.DELAY:
                stored = self._delayed(stored, system)
            elif kind is MessageType.TRANSACTION:
                stored, _ = TransactionService.half_of(stored)
            messages.append(stored)
        return messages

    def _delayed(self, message: Message, system: pb.SystemProperties) -> Message:
        """Park a delayed message in the timer topic, unless it is already due."""
        if not system.HasField("delivery_timestamp"):
            raise InvalidRequest(pb.ILLEGAL_DELIVERY_TIME, "DELAY messages need a delivery time")
        due_ms = delivery_ms(system.delivery_timestamp)
        if due_ms < 0:
            # Far enough before 1970 it would not convert back to a Timestamp, and every
            # pull or receive of its queue would fail on it.
            raise InvalidRequest(
                pb.ILLEGAL_DELIVERY_TIME, f"delivery time {due_ms} ms is before 1970"
            )
        now = self.clock_ms()
        if due_ms - now > self.options.max_delay_ms:
            raise InvalidRequest(
                pb.ILLEGAL_DELIVERY_TIME,
                f"delivery time is {due_ms - now} ms ahead, the limit is "
                f"{self.options.max_delay_ms} ms",
            )
        message.properties[PROPERTY_DELIVERY_TIME_MS] = str(due_ms)
        return message if due_ms <= now else TimerService.park(message, due_ms)

    # ---- POP consumption (node.pop_service) -----------------------------------------
    async def ReceiveMessage(self, request, context):
        async for response in self.pop.receive_message(request, context):
            yield response

    async def AckMessage(self, request, context):
        return await self.pop.ack_message(request, context)

    async def ChangeInvisibleDuration(self, request, context):
        return await self.pop.change_invisible_duration(request, context)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self.pop.forward_to_dead_letter_queue(request, context)

    # ---- offset-based consumption ------------------------------------------------------
    def _queue_of(self, message_queue: pb.MessageQueue) -> tuple[TopicConfig, int]:
        topic = self.topics.topic(message_queue.topic.name)
        if not 0 <= message_queue.id < topic.queue_count:
            raise InvalidRequest(
                pb.BAD_REQUEST, f"queue {message_queue.id} does not exist in topic {topic.name}"
            )
        return topic, message_queue.id

    async def PullMessage(self, request, context):
        try:
            topic, queue_id = self._queue_of(request.message_queue)
            selected = selection(request.filter_expression)
            await self.groups.group(request.group.name)
        except TopicError as error:
            yield rpc.PullMessageResponse(status=topic_error_status(error))
            return
        except InvalidRequest as error:
            yield rpc.PullMessageResponse(status=status(error.code, str(error)))
            return
        batch = max(1, min(request.batch_size or 32, PULL_BATCH_MAX))
        offset = request.offset

        async def pull() -> list[rpc.PullMessageResponse] | None:
            result = self.store.get_messages(topic.name, queue_id, offset, batch, selected.tags)
            messages = result.messages
            if selected.sql is not None:  # what it refuses is passed over, as tags are
                messages = [m for m in messages if selected.sql(m.properties)]
            beyond_empty_queue = result.status is GetStatus.NO_MESSAGE_IN_QUEUE and offset != 0
            if beyond_empty_queue or result.status in (
                GetStatus.OFFSET_TOO_SMALL,
                GetStatus.OFFSET_OVERFLOW_BADLY,
            ):
                refused = status(
                    pb.ILLEGAL_OFFSET,
                    f"offset {offset} outside [{result.min_offset}, {result.max_offset}]",
                )
                return [
                    rpc.PullMessageResponse(status=refused),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            if messages:
                return [
                    rpc.PullMessageResponse(status=OK),
                    *(rpc.PullMessageResponse(message=to_wire_message(m)) for m in messages),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            if result.next_begin_offset > offset:
                # Filtered everything in the window: tell the client where to go on.
                return [
                    rpc.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND)),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            return None

        answers = await long_poll(
            pull,
            lambda wait_s: self.waiters.wait(topic.name, queue_id, wait_s),
            poll_budget_s(seconds_of(request.long_polling_timeout), context),
        )
        if answers is None:
            answers = [
                rpc.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND)),
                rpc.PullMessageResponse(next_offset=offset),
            ]
        for answer in answers:
            yield answer

    async def UpdateOffset(self, request, context):
        try:
            topic, queue_id = self._queue_of(request.message_queue)
            await self.groups.group(request.group.name)
        except TopicError as error:
            return rpc.UpdateOffsetResponse(status=topic_error_status(error))
        except InvalidRequest as error:
            return rpc.UpdateOffsetResponse(status=status(error.code, str(error)))
        high = self.store.max_offset_in_queue(topic.name, queue_id)
        if not 0 <= request.offset <= high:
            return rpc.UpdateOffsetResponse(
                status=status(pb.ILLEGAL_OFFSET, f"offset {request.offset} outside [0, {high}]")
            )
        result = await self.offsets.commit(request.group.name, topic.name, queue_id, request.offset)
        if result.status is not PutStatus.OK:
            return rpc.UpdateOffsetResponse(status=store_refusal(result))
        return rpc.UpdateOffsetResponse(status=OK)

    async def GetOffset(self, request, context):
        try:
            topic, queue_id = self._queue_of(request.message_queue)
            await self.groups.group(request.group.name)
        except TopicError as error:
            return rpc.GetOffsetResponse(status=topic_error_status(error))
        except InvalidRequest as error:
            return rpc.GetOffsetResponse(status=status(error.code, str(error)))
        committed = self.offsets.get(request.group.name, topic.name, queue_id)
        if committed is None:
            return rpc.GetOffsetResponse(
                status=status(pb.OFFSET_NOT_FOUND, "the group committed no offset for this queue")
            )
        return rpc.GetOffsetResponse(status=OK, offset=committed)

    async def QueryOffset(self, request, context):
        try:
            topic, queue_id = self._queue_of(request.message_queue)
        except TopicError as error:
            return rpc.QueryOffsetResponse(status=topic_error_status(error))
        except InvalidRequest as error:
            return rpc.QueryOffsetResponse(status=status(error.code, str(error)))
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = self.store.min_offset_in_queue(topic.name, queue_id)
        elif policy == pb.END:
            offset = self.store.max_offset_in_queue(topic.name, queue_id)
        else:
            if not request.HasField("timestamp"):
                return rpc.QueryOffsetResponse(
                    status=status(pb.BAD_REQUEST, "TIMESTAMP policy needs a timestamp")
                )
            offset = self.store.offset_by_time(topic.name, queue_id, millis_of(request.timestamp))
        return rpc.QueryOffsetResponse(status=OK, offset=offset)
