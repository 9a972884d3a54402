"""Which handlers a node serves on its remoting port: the NameServer role and the broker
role, registered in one ``Dispatch`` (the codes served are listed in docs/architecture.md,
"Remoting"). Later roles add their handler modules here.

With ``[security] auth`` on, every request is refused NO_PERMISSION: RocketMQ's ACL 1.0
signatures are not checked on this port yet, and a request without valid credentials must
change nothing (docs/security.md).
"""

from __future__ import annotations

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import ResponseCode
from ha.replicated_store import ReplicatedStore
from node.admin_service import AdminService
from node.admission import Admission
from node.consumer_offsets import ConsumerOffsets
from node.consumer_retry import ConsumerRetries
from node.delay_levels import DEFAULT_LEVELS_MS
from node.group_members import GroupMembers
from node.long_polling import QueueWaiters
from node.queue_locks import QueueLocks
from node.remoting.admin_codes import AdminCodeHandlers
from node.remoting.broker_clients import ClientHandlers
from node.remoting.broker_locks import LockHandlers
from node.remoting.broker_offsets import OffsetHandlers
from node.remoting.broker_pull import PullHandlers
from node.remoting.broker_queries import QueryHandlers
from node.remoting.broker_retry import RetryHandlers
from node.remoting.broker_send import SendHandlers
from node.remoting.broker_transactions import TransactionHandlers
from node.remoting.client_config import ClientConfigHandlers
from node.remoting.dispatch import Dispatch, Handler
from node.remoting.name_server import NameServer
from node.remoting.subscriptions import Subscriptions
from node.topics import TopicTable
from node.transaction_service import TransactionService
from routing.replica import RoutingReplica

AUTH_REFUSAL = (
    "this node requires authentication, and RocketMQ ACL 1.0 signatures are not served on "
    "the remoting port yet: use the gRPC port"
)


async def refuse_unauthenticated(request: RemotingCommand, connection) -> RemotingCommand:
    return request.reply(ResponseCode.NO_PERMISSION, AUTH_REFUSAL)


def build_dispatch(
    *,
    store: ReplicatedStore,
    topics: TopicTable,
    routing: RoutingReplica,
    admission: Admission,
    offsets: ConsumerOffsets,
    waiters: QueueWaiters,
    members: GroupMembers,
    transactions: TransactionService,
    admin: AdminService,
    authenticated: bool,
    delay_levels_ms: tuple[int, ...] = DEFAULT_LEVELS_MS,
) -> Dispatch:
    subscriptions = Subscriptions()
    retries = ConsumerRetries(topics, delay_levels_ms)
    transaction_handlers = TransactionHandlers(transactions, admission)
    handlers: list[tuple[int, Handler]] = [
        *NameServer(routing).handlers(),
        *SendHandlers(store, admission, retries, transaction_handlers).handlers(),
        *RetryHandlers(store, admission, retries).handlers(),
        *LockHandlers(admission, QueueLocks()).handlers(),
        *PullHandlers(store, topics, offsets, waiters, subscriptions).handlers(),
        *OffsetHandlers(store, topics, offsets).handlers(),
        *ClientHandlers(topics, members, subscriptions).handlers(),
        *transaction_handlers.handlers(),
        *QueryHandlers(store, topics).handlers(),
        *ClientConfigHandlers().handlers(),
        *AdminCodeHandlers(admin).handlers(),
    ]
    handlers = transaction_handlers.observing_heartbeats(handlers)
    dispatch = Dispatch()
    if authenticated:
        dispatch.register_all((code, refuse_unauthenticated) for code, _ in handlers)
    else:
        dispatch.register_all(handlers)
    return dispatch
