"""Which handlers a node serves on its remoting port: the NameServer role and the broker
role, registered in one ``Dispatch`` (the codes served are listed in docs/architecture.md,
"Remoting"). Later roles add their handler modules here.

Every handler is adapted once (``authentication.RemotingCallers``): the request's caller is
built (with ``[security] auth`` on, from its verified ACL 1.0 signature) and handed to the
handler, which hands it to its service; a request without valid credentials, or refused by
a service's ACL decision, is answered NO_PERMISSION (docs/security.md).
"""

from __future__ import annotations

from node.authentication import Verification
from node.config import NodeConfig
from node.remoting.admin_codes import AdminCodeHandlers
from node.remoting.authentication import DoorHandler, RemotingCallers
from node.remoting.broker_clients import ClientHandlers
from node.remoting.broker_config import BrokerConfigHandlers
from node.remoting.broker_direct import DirectHandlers
from node.remoting.broker_locks import LockHandlers
from node.remoting.broker_offsets import OffsetHandlers
from node.remoting.broker_pop import PopHandlers
from node.remoting.broker_pull import PullHandlers
from node.remoting.broker_queries import QueryHandlers
from node.remoting.broker_retry import RetryHandlers
from node.remoting.broker_send import SendHandlers
from node.remoting.broker_transactions import TransactionDoor
from node.remoting.client_config import ClientConfigHandlers
from node.remoting.dispatch import BODY_CODES, Dispatch
from node.remoting.ferry_data import FerryDataHandlers
from node.remoting.fetch_lane import FetchLane
from node.remoting.forwarding import RemotingForwarder
from node.remoting.name_server import NameServer
from node.remoting.produce_lane import ProduceLane
from node.services.registry import Services


def door_handlers(services: Services, config: NodeConfig) -> list[tuple[int, DoorHandler]]:
    """Every request code the remoting door serves, with its handler."""
    transactions = TransactionDoor(services)
    return [
        *NameServer(services.routes).handlers(),
        *SendHandlers(services, transactions).handlers(),
        *RetryHandlers(services).handlers(),
        *LockHandlers(services).handlers(),
        *PullHandlers(services).handlers(),
        *OffsetHandlers(services).handlers(),
        *ClientHandlers(services, transactions).handlers(),
        *DirectHandlers(services).handlers(),
        *transactions.handlers(),
        *QueryHandlers(services).handlers(),
        *ClientConfigHandlers(services).handlers(),
        *AdminCodeHandlers(services).handlers(),
        *BrokerConfigHandlers(services).handlers(),
        *PopHandlers(services, config.group).handlers(),
        *FerryDataHandlers(services).handlers(),
    ]


def build_dispatch(
    services: Services,
    config: NodeConfig,
    verification: Verification | None,
    forwarder: RemotingForwarder | None = None,
) -> Dispatch:
    # With auth on, the ACL 1.0 signature covers the body: every body is kept to be
    # verified (the byte limits still bound what a request holds).
    dispatch = Dispatch(body_codes=None if verification is not None else BODY_CODES)
    callers = RemotingCallers(verification, forwarder)
    dispatch.register_all(callers.adapt_all(door_handlers(services, config)))
    dispatch.add_lane(ProduceLane(services.send, callers))
    dispatch.add_lane(FetchLane(services.reads, callers))
    return dispatch
