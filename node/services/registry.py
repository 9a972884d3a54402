"""The services one node runs, handed to every door (``node/server.py`` builds them once, so
every door shares each service's state: one round-robin position per topic, one table of
members, one set of check targets)."""

from __future__ import annotations

from dataclasses import dataclass

from node.services.admin import AdminService
from node.services.dead_letter_resend import DeadLetterResendService
from node.services.delivery_history import DeliveryHistoryService
from node.services.direct_consume import DirectConsumeService
from node.services.lite import LiteService
from node.services.locks import QueueLockService
from node.services.membership import MembershipService
from node.services.node_settings import NodeSettingsService
from node.services.offset_reset import OffsetResetService
from node.services.offsets import OffsetService
from node.services.permissions import Permissions
from node.services.pop import PopService
from node.services.queries import QueryService
from node.services.reads import ReadService
from node.services.recall import RecallService
from node.services.retries import RetryService
from node.services.routes import RouteService
from node.services.send import SendService
from node.services.topic_consumers import TopicConsumersService
from node.services.transactions import TransactionService


@dataclass(frozen=True)
class Services:
    permissions: Permissions
    send: SendService
    reads: ReadService
    offsets: OffsetService
    pop: PopService
    transactions: TransactionService
    membership: MembershipService
    queries: QueryService
    retries: RetryService
    locks: QueueLockService
    admin: AdminService
    routes: RouteService
    recall: RecallService
    lite: LiteService
    offset_reset: OffsetResetService
    delivery_history: DeliveryHistoryService
    dead_letter_resend: DeadLetterResendService
    topic_consumers: TopicConsumersService
    direct_consume: DirectConsumeService
    node_settings: NodeSettingsService
