"""Which handlers a node serves on its remoting port: the NameServer role and the broker
role, registered in one ``Dispatch`` (the codes served are listed in docs/architecture.md,
"Remoting"). Later roles add their handler modules here.

With ``[security] auth`` on, every handler is wrapped by ``access_rules.RemotingAccess``:
the request's ACL 1.0 signature and permissions are decided before it runs
(docs/security.md).
"""

from __future__ import annotations

from ha.replicated_store import ReplicatedStore
from node.admission import Admission
from node.consumer_offsets import ConsumerOffsets
from node.group_members import GroupMembers
from node.long_polling import QueueWaiters
from node.pop_service import PopService
from node.remoting.access_rules import RemotingAccess
from node.remoting.broker_clients import ClientHandlers
from node.remoting.broker_offsets import OffsetHandlers
from node.remoting.broker_pop import PopHandlers
from node.remoting.broker_pull import PullHandlers
from node.remoting.broker_send import SendHandlers
from node.remoting.dispatch import Dispatch, Handler
from node.remoting.name_server import NameServer
from node.remoting.subscriptions import Subscriptions
from node.topics import TopicTable
from routing.replica import RoutingReplica


def build_dispatch(
    *,
    store: ReplicatedStore,
    topics: TopicTable,
    routing: RoutingReplica,
    admission: Admission,
    offsets: ConsumerOffsets,
    waiters: QueueWaiters,
    members: GroupMembers,
    pop: PopService,
    broker_name: str,
    access: RemotingAccess | None,
) -> Dispatch:
    subscriptions = Subscriptions()
    handlers: list[tuple[int, Handler]] = [
        *NameServer(routing).handlers(),
        *SendHandlers(store, admission).handlers(),
        *PullHandlers(store, topics, offsets, waiters, subscriptions).handlers(),
        *OffsetHandlers(store, topics, offsets).handlers(),
        *ClientHandlers(topics, members, subscriptions).handlers(),
        *PopHandlers(pop, topics, broker_name).handlers(),
    ]
    dispatch = Dispatch()
    dispatch.register_all(access.wrap_all(handlers) if access is not None else handlers)
    return dispatch
