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
from node.admission import Admission
from node.consumer_offsets import ConsumerOffsets
from node.data_service import DataService
from node.group_members import GroupMembers
from node.long_polling import QueueWaiters
from node.metrics_rpc import RpcMetrics
from node.remoting.broker_clients import ClientHandlers
from node.remoting.broker_offsets import OffsetHandlers
from node.remoting.broker_pull import PullHandlers
from node.remoting.broker_send import SendHandlers
from node.remoting.dispatch import Dispatch, Handler
from node.remoting.ferry_data import FerryDataHandlers
from node.remoting.name_server import NameServer
from node.remoting.subscriptions import Subscriptions
from node.topics import TopicTable
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
    authenticated: bool,
    rpc_metrics: RpcMetrics | None = None,
) -> Dispatch:
    subscriptions = Subscriptions()
    handlers: list[tuple[int, Handler]] = [
        *NameServer(routing).handlers(),
        *SendHandlers(store, admission).handlers(),
        *PullHandlers(store, topics, offsets, waiters, subscriptions).handlers(),
        *OffsetHandlers(store, topics, offsets).handlers(),
        *ClientHandlers(topics, members, subscriptions).handlers(),
        *FerryDataHandlers(
            DataService(store, topics, waiters, admission), routing, rpc_metrics
        ).handlers(),
    ]
    dispatch = Dispatch()
    if authenticated:
        dispatch.register_all((code, refuse_unauthenticated) for code, _ in handlers)
    else:
        dispatch.register_all(handlers)
    return dispatch
