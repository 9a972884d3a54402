"""Which handlers a node serves on its remoting port: the NameServer role and the broker
role, registered in one ``Dispatch`` (the codes served are listed in docs/architecture.md,
"Remoting"). Later roles add their handler modules here.

With ``[security] auth`` on, every handler is wrapped by ``access_rules.RemotingAccess``:
the request's ACL 1.0 signature and permissions are decided before it runs
(docs/security.md).
"""

from __future__ import annotations

from ha.replicated_store import ReplicatedStore
from node.admin_service import AdminService
from node.admission import Admission
from node.config import NodeConfig
from node.consumer_offsets import ConsumerOffsets
from node.consumer_retry import ConsumerRetries
from node.data_service import DataService
from node.delay_levels import DEFAULT_LEVELS_MS
from node.group_creation import GroupsOnFirstUse
from node.group_members import GroupMembers
from node.long_polling import QueueWaiters
from node.metrics_rpc import RpcMetrics
from node.pop_service import PopService
from node.queue_locks import QueueLocks
from node.remoting.access_rules import Lookups, RemotingAccess
from node.remoting.admin_codes import AdminCodeHandlers
from node.remoting.broker_clients import ClientHandlers
from node.remoting.broker_config import BrokerConfigHandlers
from node.remoting.broker_locks import LockHandlers
from node.remoting.broker_offsets import OffsetHandlers
from node.remoting.broker_pop import PopHandlers
from node.remoting.broker_pull import PullHandlers
from node.remoting.broker_queries import QueryHandlers
from node.remoting.broker_retry import RetryHandlers
from node.remoting.broker_send import SendHandlers
from node.remoting.broker_transactions import TransactionHandlers
from node.remoting.client_config import ClientConfigHandlers
from node.remoting.client_connections import ClientConnections, ConnectionHandlers
from node.remoting.dispatch import BODY_CODES, Dispatch, Handler
from node.remoting.ferry_data import FerryDataHandlers
from node.remoting.name_server import NameServer
from node.remoting.subscriptions import Subscriptions
from node.topics import TopicTable
from node.transaction_service import TransactionService
from routing.replica import RoutingReplica


def _topic_at(store: ReplicatedStore):
    def topic_at(offset: int) -> str | None:
        found = store.look_message_by_offset(offset)
        return found.topic if found is not None else None

    return topic_at


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
    pop: PopService,
    broker_name: str,
    config: NodeConfig,
    access: RemotingAccess | None,
    delay_levels_ms: tuple[int, ...] = DEFAULT_LEVELS_MS,
    rpc_metrics: RpcMetrics | None = None,
    groups: GroupsOnFirstUse | None = None,
) -> Dispatch:
    subscriptions = Subscriptions()
    connections = ClientConnections(members, subscriptions)
    retries = ConsumerRetries(topics, delay_levels_ms)
    transaction_handlers = TransactionHandlers(transactions, admission)
    handlers: list[tuple[int, Handler]] = [
        *NameServer(routing).handlers(),
        *SendHandlers(store, admission, retries, transaction_handlers).handlers(),
        *RetryHandlers(store, admission, retries).handlers(),
        *LockHandlers(admission, QueueLocks()).handlers(),
        *PullHandlers(store, topics, offsets, waiters, subscriptions, groups).handlers(),
        *OffsetHandlers(store, topics, offsets, groups).handlers(),
        *ClientHandlers(topics, members, subscriptions, connections, groups).handlers(),
        *ConnectionHandlers(connections).handlers(),
        *transaction_handlers.handlers(),
        *QueryHandlers(store, topics).handlers(),
        *ClientConfigHandlers().handlers(),
        *AdminCodeHandlers(admin).handlers(),
        *BrokerConfigHandlers(config, admin).handlers(),
        *PopHandlers(pop, topics, broker_name).handlers(),
        *FerryDataHandlers(
            DataService(store, topics, waiters, admission), routing, rpc_metrics
        ).handlers(),
    ]
    handlers = transaction_handlers.observing_heartbeats(handlers)
    # With auth on, the ACL 1.0 signature covers the body: the node must verify the body
    # that was signed, so none is dropped (the request budget still bounds them, and an
    # unauthenticated request is refused before it waits).
    dispatch = Dispatch(body_codes=None if access is not None else BODY_CODES)
    if access is not None:
        access.reading(Lookups(_topic_at(store), transactions.pending_topic))
        handlers = access.wrap_all(handlers)
    dispatch.register_all(handlers)
    return dispatch
