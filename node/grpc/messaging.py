"""The RocketMQ 5 door: ``apache.rocketmq.v2.MessagingService`` translated to the services.

Every method reads its protobuf request into a service's plain request (``node/services/``)
and the result back into a response. Every response carries a status (the official
clients reject code 0); a refusal, whoever decided it (the ACL, admission, the store),
answers with its precise ``Code`` in the status and changes nothing.

Thread-safety: all handlers run on the node's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from google.protobuf import duration_pb2

from ferrymq.codec.headers import (
    ANSWER_QUEUES_HEADER,
    PINNED_QUEUE_HEADER,
    PINNED_QUEUE_VALUE,
    QUEUES_TRAILER,
    RESEND_HEADER,
    RESEND_VALUE,
)
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from node.admission import accepted_types, store_refusal
from node.group_members import MembershipRefused
from node.grpc.authentication import caller_of
from node.grpc.route_endpoints import group_endpoints, one_address, takes_one_address
from node.grpc.telemetry_outbox import TelemetryOutbox
from node.grpc.telemetry_verify import PendingVerifications, StreamVerifications
from node.grpc.wire import millis_of, outgoing, timestamp_of, to_wire_message
from node.lite_names import LITE_TOPIC_MAX_BYTES
from node.lite_subscriptions import CLIENT_QUOTA as LITE_CLIENT_QUOTA
from node.long_polling import LONG_POLLING_DEFAULT_S, poll_budget_s
from node.parked import as_sent
from node.rpc_status import OK, InvalidRequest, seconds_of, status, topic_error_status
from node.services.caller import Caller, Door
from node.services.membership import ClientHeartbeat, ConsumerMembership
from node.services.pop import RECEIVE_BATCH_MAX, Delivery, PopFailed
from node.services.reads import ReadRequest
from node.services.recall import RecallReason, RecallRefused
from node.services.registry import Services
from node.services.send import SEND_MESSAGES_MAX, SendRequest
from node.services.transactions import EndRequest
from node.topics import GroupConfig, Permission, TopicError
from routing.metadata import TopicRoute
from routing.state import RoutingState
from store.results import GetResult, GetStatus

PULL_BATCH_MAX = 256
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


def metadata_value(context, name: str) -> str:
    """The caller's header ``name``; empty when it sent none."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value
    return ""


def client_id_of(context) -> str:
    """The caller's ``x-mq-client-id``; empty when it sent none."""
    return metadata_value(context, "x-mq-client-id")


def lite_topic_of(entries) -> str | None:
    """The lite topic an ack's entries name (the official clients ack one lite topic's
    message per call); ``InvalidRequest`` when they name different ones or mix."""
    named = {entry.lite_topic if entry.HasField("lite_topic") else None for entry in entries}
    if len(named) > 1:
        raise InvalidRequest(pb.BAD_REQUEST, "one ack names one lite topic (or none)")
    return named.pop() if named else None


def refused(error: InvalidRequest | TopicError | MembershipRefused) -> pb.Status:
    """The status of a refusal, whoever made it."""
    if isinstance(error, TopicError):
        return topic_error_status(error)
    return status(error.code, str(error))


# RocketMQ's proxy answers every broker refusal of a recall INTERNAL_SERVER_ERROR; ferrymq
# says which (the message says why, as the proxy's does).
RECALL_CODES = {
    RecallReason.INVALID_HANDLE: pb.BAD_REQUEST,
    RecallReason.OTHER_GROUP: pb.BAD_REQUEST,
    RecallReason.WRONG_TYPE: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    RecallReason.NOT_PENDING: pb.PRECONDITION_FAILED,
}


def recall_refusal(error: RecallRefused) -> pb.Status:
    if error.reason is RecallReason.NOT_STORED:
        return store_refusal(error.put_result)
    return status(RECALL_CODES[error.reason], str(error))


def caller_left(context) -> bool:
    """True when the call is over for its client: cancelled, or past its deadline."""
    if context is None:
        return False
    if context.cancelled():
        return True
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def overall(answers: list[pb.Status]) -> pb.Status:
    """One status for per-entry answers: theirs when they agree, else MULTIPLE_RESULTS."""
    codes = {a.code for a in answers}
    if len(codes) == 1:
        return answers[0]
    return status(pb.MULTIPLE_RESULTS, "entries have different results; see each entry")


LITE_CONSUMERS = (pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER)


def check_command(half) -> rpc.TelemetryCommand:
    """The orphan check of a stored half, as a producer's Telemetry stream carries it."""
    return rpc.TelemetryCommand(
        recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
            message=to_wire_message(as_sent(half)),
            transaction_id=half.properties[PROPERTY_TRANSACTION_ID],
        )
    )


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        services: Services,
        max_body_bytes: int,
        long_polling_s: float = LONG_POLLING_DEFAULT_S,
    ) -> None:
        """``long_polling_s``: the long poll push consumers are told to use, and the longest
        a receive waits (``[messages] long_polling_s``)."""
        self.services = services
        self.max_body_bytes = max_body_bytes
        self.long_polling_s = long_polling_s
        self.verifications = PendingVerifications()  # direct consumptions, every stream's

    @staticmethod
    def _caller(context, method: str) -> Caller:
        return caller_of(context, Door.MESSAGING, method)

    # ---- routing ---------------------------------------------------------------------
    def _queues(self, state: RoutingState, route: TopicRoute, context) -> list[pb.MessageQueue]:
        """Every queue of ``route``, each naming every node of its broker group, master
        first (``node/grpc/route_endpoints.py``): clients send every other RPC to the
        endpoints a route names, so one access point reaches the whole cluster, and any of
        the nodes serves the call (``node/grpc/forwarding.py``), also while a master is
        being elected. A client that takes one address gets this node's."""
        one = takes_one_address(metadata_value(context, "x-mq-language"))
        queues = []
        for broker_group, count in route.queues:
            if one:
                endpoints = one_address(state, broker_group, self.services.admin.node_id)
            else:
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
        caller = self._caller(context, "QueryRoute")
        try:
            queues = await self.services.routes.read_caught_up(
                caller,
                lambda state: self._queues(state, state.topic(request.topic.name), context),
            )
        except (InvalidRequest, TopicError) as error:
            return rpc.QueryRouteResponse(status=refused(error))
        return rpc.QueryRouteResponse(status=OK, message_queues=queues)

    async def QueryAssignment(self, request, context):
        """What a push consumer should poll. A receive pops the whole topic on the node it
        reaches, so a normal group gets one assignment per broker group (queue id -1, as
        the Java proxy answers); a FIFO group gets every queue, one poll loop each, so one
        held queue blocks no other."""
        caller = self._caller(context, "QueryAssignment")

        def assignments_of(state: RoutingState) -> list[pb.MessageQueue]:
            route = state.topic(request.topic.name)
            queues = self._queues(state, route, context)
            if group.fifo:
                return queues
            one_per_broker = {}
            for queue in queues:
                one_per_broker.setdefault(queue.broker.name, queue)
            for queue in one_per_broker.values():
                queue.id = -1
            return list(one_per_broker.values())

        try:
            group = self.services.routes.group(caller, request.group.name)
            queues = await self.services.routes.read_caught_up(caller, assignments_of)
        except (InvalidRequest, TopicError) as error:
            return rpc.QueryAssignmentResponse(status=refused(error))
        assignments = [pb.Assignment(message_queue=queue) for queue in queues]
        return rpc.QueryAssignmentResponse(status=OK, assignments=assignments)

    # ---- membership --------------------------------------------------------------------
    async def Heartbeat(self, request, context):
        """A consumer's heartbeat names its group, which must exist or is created now; a
        producer's names none and is only answered."""
        if not request.HasField("group"):
            return rpc.HeartbeatResponse(status=OK)
        caller = self._caller(context, "Heartbeat")
        group = request.group.name
        heartbeat = ClientHeartbeat(client_id_of(context), {group: ConsumerMembership()})
        try:
            outcome = await self.services.membership.heartbeat(caller, heartbeat)
        except (InvalidRequest, MembershipRefused) as error:
            return rpc.HeartbeatResponse(status=refused(error))
        if outcome.unknown:
            return rpc.HeartbeatResponse(status=topic_error_status(outcome.unknown[0]))
        return rpc.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):
        """A consumer leaves its group at once."""
        if not request.HasField("group"):
            return rpc.NotifyClientTerminationResponse(status=OK)
        caller = self._caller(context, "NotifyClientTermination")
        try:
            self.services.membership.leave(caller, request.group.name, client_id_of(context))
            self.services.lite.forget(request.group.name, client_id_of(context))
        except (InvalidRequest, TopicError, MembershipRefused) as error:
            return rpc.NotifyClientTerminationResponse(status=refused(error))
        return rpc.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[pb.TelemetryCommand]:
        """Answer each settings write with the settings the client must use, and push
        orphan-transaction checks to producers; the stream stays open until the client
        closes it (the clients expect that). A client that does not read its answers is
        cut off once ``OUTBOX_MAX`` wait (``node/grpc/telemetry_outbox.py``)."""
        caller = self._caller(context, "Telemetry")
        outbox = TelemetryOutbox()
        verifications = StreamVerifications(outbox, self.verifications)
        overflowed = False
        lite_client = None  # a lite consumer's client id: its notices come here

        async def read_commands() -> None:
            nonlocal overflowed, lite_client
            try:
                async for command in request_iterator:
                    if verifications.answered(command):
                        continue  # a direct consumption's answer
                    if command.WhichOneof("command") != "settings":
                        continue  # results of commands we never send
                    self._direct_consumer(caller, context, command.settings, verifications)
                    if command.settings.client_type in LITE_CONSUMERS and lite_client is None:
                        lite_client = client_id_of(context)
                        self.services.lite.listen(lite_client, outbox.notify_unsubscribe_lite)
                    if not outbox.offer(self._settings_answer(caller, command.settings, outbox)):
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
            self.services.transactions.targets.unregister(outbox)
            self.services.direct_consume.consumers.unregister(outbox)
            verifications.close()
            if lite_client is not None:
                self.services.lite.unlisten(lite_client, outbox.notify_unsubscribe_lite)
        if overflowed:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{outbox.limit} Telemetry answers wait unread: the client does not read "
                "its stream",
            )

    def _direct_consumer(
        self, caller: Caller, context, settings: pb.Settings, verifications: StreamVerifications
    ) -> None:
        """A consumer's stream is one stored messages can be handed to directly
        (``node/grpc/telemetry_verify.py``), for its group, until it ends."""
        if settings.WhichOneof("pub_sub") != "subscription":
            return
        group, client_id = settings.subscription.group.name, client_id_of(context)
        if not group or not client_id:
            return
        consumer = verifications.consumer(settings.client_type, caller)
        consumers = self.services.direct_consume.consumers
        consumers.unregister(verifications.outbox)  # a stream is one client of one group
        consumers.register(verifications.outbox, group, client_id, consumer)

    def _settings_answer(self, caller: Caller, settings: pb.Settings, outbox: TelemetryOutbox):
        """The answer to one settings command; a producer's also registers the stream for
        the orphan checks of the topics it publishes (the service asks each check of a
        topic only of producers that may publish to it)."""
        try:
            if settings.WhichOneof("pub_sub") == "publishing":
                self.services.transactions.targets.register(
                    outbox,
                    caller,
                    lambda _, half: outbox.offer(check_command(half)),
                    topics=[t.name for t in settings.publishing.topics],
                )
            answer = self._settings_for(caller, settings)
        except (InvalidRequest, TopicError) as error:
            return rpc.TelemetryCommand(status=refused(error))
        return rpc.TelemetryCommand(status=OK, settings=answer)

    def _settings_for(self, caller: Caller, settings: pb.Settings) -> pb.Settings:
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
            answer.publishing.max_body_size = self.max_body_bytes
            answer.publishing.validate_message_type = True
            backoff = answer.backoff_policy
            backoff.max_attempts = backoff.max_attempts or PRODUCER_MAX_ATTEMPTS
            backoff.exponential_backoff.CopyFrom(PRODUCER_BACKOFF)
        elif settings.WhichOneof("pub_sub") == "subscription" or settings.client_type in (
            pb.PUSH_CONSUMER,
            pb.SIMPLE_CONSUMER,
            pb.PULL_CONSUMER,
            pb.LITE_PUSH_CONSUMER,
            pb.LITE_SIMPLE_CONSUMER,
        ):
            subscription = answer.subscription
            group = self.services.routes.settings_group(caller, settings.subscription.group.name)
            if not subscription.long_polling_timeout.seconds:
                subscription.long_polling_timeout.seconds = int(self.long_polling_s)
            subscription.receive_batch_size = RECEIVE_BATCH_MAX
            subscription.fifo = group.fifo
            # Every consumer, as RocketMQ's proxy: a lite consumer without them takes its
            # quota as 0 and refuses every subscription.
            subscription.lite_subscription_quota = LITE_CLIENT_QUOTA
            subscription.max_lite_topic_size = LITE_TOPIC_MAX_BYTES
            answer.backoff_policy.CopyFrom(
                consumer_backoff(group, settings.user_agent.language == pb.NODE_JS)
            )
        answer.metric.Clear()
        answer.metric.on = False  # a client told "on" starts exporting to our endpoints
        return answer

    # ---- producing -------------------------------------------------------------------
    async def SendMessage(self, request, context):
        caller = self._caller(context, "SendMessage")
        try:
            names = {m.topic.name for m in request.messages}
            if len(names) > 1:
                raise InvalidRequest(pb.BAD_REQUEST, "a batch must target one topic")
            pinned = pins_queues(context)
            sent = SendRequest(
                names.pop() if names else "",
                [outgoing(m, pinned) for m in request.messages],
                resend=metadata_value(context, RESEND_HEADER) == RESEND_VALUE,
            )
            outcome = await self.services.send.send(caller, sent)
        except (InvalidRequest, TopicError) as error:
            return self._send_refused(request, refused(error))
        if outcome.status.code != pb.OK:
            return self._send_refused(request, outcome.status)
        if metadata_value(context, ANSWER_QUEUES_HEADER) == "1":
            queues = ",".join(str(queue) for queue in outcome.queues)
            context.set_trailing_metadata(((QUEUES_TRAILER, queues),))
        entries = [
            rpc.SendResultEntry(
                status=OK,
                message_id=message.system_properties.message_id,
                offset=appended.queue_offset,
                transaction_id=transaction_id or "",
                recall_handle=recall_handle,
            )
            for message, appended, transaction_id, recall_handle in zip(
                request.messages,
                outcome.appended,
                outcome.transaction_ids,
                outcome.recall_handles,
                strict=True,
            )
        ]
        return rpc.SendMessageResponse(status=OK, entries=entries)

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

    async def EndTransaction(self, request, context):
        caller = self._caller(context, "EndTransaction")
        ending = EndRequest(
            request.transaction_id,
            request.resolution,
            source=request.source,
            topic=request.topic.name,
        )
        try:
            answer = await self.services.transactions.end(caller, ending)
        except InvalidRequest as error:
            answer = refused(error)
        return rpc.EndTransactionResponse(status=answer)

    async def RecallMessage(self, request, context):
        caller = self._caller(context, "RecallMessage")
        try:
            message_id = await self.services.recall.recall(
                caller, request.topic.name, request.recall_handle
            )
        except (InvalidRequest, TopicError) as error:
            return rpc.RecallMessageResponse(status=refused(error))
        except RecallRefused as error:
            return rpc.RecallMessageResponse(status=recall_refusal(error))
        return rpc.RecallMessageResponse(status=OK, message_id=message_id)

    # ---- POP consumption ---------------------------------------------------------------
    async def ReceiveMessage(self, request, context):
        caller = self._caller(context, "ReceiveMessage")
        invisible_ms = None
        if request.HasField("invisible_duration"):
            invisible_ms = int(seconds_of(request.invisible_duration) * 1000)
        requested_s = self.long_polling_s  # at most, as RocketMQ's proxy clamps it
        if request.HasField("long_polling_timeout"):
            requested_s = min(seconds_of(request.long_polling_timeout), requested_s)
        pop = self.services.pop
        topic = request.message_queue.topic.name
        try:
            if self.services.lite.serves(topic):
                deliveries = await self.services.lite.receive(
                    caller,
                    client_id_of(context),
                    request.group.name,
                    topic,
                    request.batch_size,
                    invisible_ms,
                    poll_budget_s(requested_s, context),
                )
            else:
                deliveries = await pop.pop(
                    caller,
                    request.group.name,
                    topic,
                    request.filter_expression,
                    request.batch_size,
                    invisible_ms,
                    poll_budget_s(requested_s, context),
                )
        except (InvalidRequest, TopicError) as error:
            yield rpc.ReceiveMessageResponse(status=refused(error))
            return
        except PopFailed as failed:
            yield rpc.ReceiveMessageResponse(status=failed.status)
            return
        if not deliveries:
            yield rpc.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND))
            return
        if caller_left(context):  # its deadline passed while the pop was appended
            await pop.hand_back(deliveries)
            return
        async for response in self._delivered(deliveries):
            yield response

    async def _delivered(self, deliveries: list[Delivery]):
        pop = self.services.pop
        try:
            yield rpc.ReceiveMessageResponse(status=OK)
            for delivery in deliveries:
                yield rpc.ReceiveMessageResponse(
                    message=to_wire_message(
                        delivery.stored,
                        receipt_handle=delivery.handle,
                        delivery_attempt=delivery.attempt,
                    )
                )
            yield rpc.ReceiveMessageResponse(delivery_timestamp=timestamp_of(pop.clock_ms()))
        except (GeneratorExit, asyncio.CancelledError):
            # The call ended before the whole answer was written: the client may have
            # none of it. Give them back (a handle it did get then answers stale, and
            # the message comes again), in the background: this generator is closing.
            pop.in_background(pop.hand_back(deliveries))
            raise

    async def AckMessage(self, request, context):
        caller = self._caller(context, "AckMessage")
        try:
            answers = await self.services.pop.ack(
                caller,
                request.group.name,
                request.topic.name,
                [entry.receipt_handle for entry in request.entries],
                lite_topic_of(request.entries),
            )
        except (InvalidRequest, TopicError) as error:
            return rpc.AckMessageResponse(status=refused(error))
        results = [
            rpc.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=answer
            )
            for entry, answer in zip(request.entries, answers, strict=True)
        ]
        return rpc.AckMessageResponse(status=overall(answers), entries=results)

    async def ChangeInvisibleDuration(self, request, context):
        caller = self._caller(context, "ChangeInvisibleDuration")
        try:
            answer, handle = await self.services.pop.change_invisible(
                caller,
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                int(seconds_of(request.invisible_duration) * 1000),
                request.lite_topic if request.HasField("lite_topic") else None,
                suspend=request.suspend,
            )
        except (InvalidRequest, TopicError) as error:
            # The official client takes the returned handle before it looks at the status.
            answer, handle = refused(error), request.receipt_handle
        return rpc.ChangeInvisibleDurationResponse(status=answer, receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        caller = self._caller(context, "ForwardMessageToDeadLetterQueue")
        try:
            answer = await self.services.pop.forward_to_dead_letters(
                caller,
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                request.lite_topic if request.HasField("lite_topic") else None,
            )
        except (InvalidRequest, TopicError) as error:
            answer = refused(error)
        return rpc.ForwardMessageToDeadLetterQueueResponse(status=answer)

    # ---- lite subscriptions -----------------------------------------------------------
    async def SyncLiteSubscription(self, request, context):
        caller = self._caller(context, "SyncLiteSubscription")
        try:
            await self.services.lite.sync(
                caller,
                client_id_of(context),
                request.action,
                request.topic.name,
                request.group.name,
                list(request.lite_topic_set),
                request.offset_option if request.HasField("offset_option") else None,
            )
        except (InvalidRequest, TopicError) as error:
            return rpc.SyncLiteSubscriptionResponse(status=refused(error))
        return rpc.SyncLiteSubscriptionResponse(status=OK)

    # ---- offset-based consumption ------------------------------------------------------
    async def PullMessage(self, request, context):
        caller = self._caller(context, "PullMessage")
        queue = request.message_queue
        offset = request.offset
        read = ReadRequest(
            queue.topic.name,
            request.group.name,
            queue.id,
            offset,
            max(1, min(request.batch_size or 32, PULL_BATCH_MAX)),
            expression=request.filter_expression,
            records=False,
            wait_s=poll_budget_s(seconds_of(request.long_polling_timeout), context),
        )
        try:
            answers, _ = await self.services.reads.read(caller, read, self._pull_answers(offset))
        except (InvalidRequest, TopicError) as error:
            yield rpc.PullMessageResponse(status=refused(error))
            return
        if answers is None:
            answers = [
                rpc.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND)),
                rpc.PullMessageResponse(next_offset=offset),
            ]
        for answer in answers:
            yield answer

    @staticmethod
    def _pull_answers(offset: int):
        def answers_of(result: GetResult) -> list[rpc.PullMessageResponse] | None:
            beyond_empty_queue = result.status is GetStatus.NO_MESSAGE_IN_QUEUE and offset != 0
            if beyond_empty_queue or result.status in (
                GetStatus.OFFSET_TOO_SMALL,
                GetStatus.OFFSET_OVERFLOW_BADLY,
                GetStatus.OFFSET_RESET,
            ):
                illegal = status(
                    pb.ILLEGAL_OFFSET,
                    f"the group's offsets were reset: go on from {result.next_begin_offset}"
                    if result.status is GetStatus.OFFSET_RESET
                    else f"offset {offset} outside [{result.min_offset}, {result.max_offset}]",
                )
                return [
                    rpc.PullMessageResponse(status=illegal),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            if result.messages:
                return [
                    rpc.PullMessageResponse(status=OK),
                    *(rpc.PullMessageResponse(message=to_wire_message(m)) for m in result.messages),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            if result.next_begin_offset > offset:
                # Filtered everything in the window: tell the client where to go on.
                return [
                    rpc.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND)),
                    rpc.PullMessageResponse(next_offset=result.next_begin_offset),
                ]
            return None

        return answers_of

    async def UpdateOffset(self, request, context):
        caller = self._caller(context, "UpdateOffset")
        queue = request.message_queue
        try:
            answer = await self.services.offsets.commit(
                caller, request.group.name, queue.topic.name, queue.id, request.offset
            )
        except (InvalidRequest, TopicError) as error:
            answer = refused(error)
        return rpc.UpdateOffsetResponse(status=answer)

    async def GetOffset(self, request, context):
        caller = self._caller(context, "GetOffset")
        queue = request.message_queue
        try:
            committed, _ = await self.services.offsets.committed(
                caller, request.group.name, queue.topic.name, queue.id
            )
        except (InvalidRequest, TopicError) as error:
            return rpc.GetOffsetResponse(status=refused(error))
        if committed is None:
            return rpc.GetOffsetResponse(
                status=status(pb.OFFSET_NOT_FOUND, "the group committed no offset for this queue")
            )
        return rpc.GetOffsetResponse(status=OK, offset=committed)

    async def QueryOffset(self, request, context):
        caller = self._caller(context, "QueryOffset")
        queue = request.message_queue
        offsets = self.services.offsets
        policy = request.query_offset_policy
        try:
            if policy == pb.BEGINNING:
                offset = await offsets.min_offset(caller, queue.topic.name, queue.id)
            elif policy == pb.END:
                offset = await offsets.max_offset(caller, queue.topic.name, queue.id)
            elif not request.HasField("timestamp"):
                raise InvalidRequest(pb.BAD_REQUEST, "TIMESTAMP policy needs a timestamp")
            else:
                offset = await offsets.offset_by_time(
                    caller, queue.topic.name, queue.id, millis_of(request.timestamp)
                )
        except (InvalidRequest, TopicError) as error:
            return rpc.QueryOffsetResponse(status=refused(error))
        return rpc.QueryOffsetResponse(status=OK, offset=offset)
