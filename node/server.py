"""The broker process: one store, the gRPC services on one port, a clean stop on SIGTERM.

``python -m node --config node.toml [--data DIR] [--port P]`` (also ``ferrymq node``).
On start it writes the effective configuration to ``<data>/node.toml`` and prints one line
``ferrymq node <id> ready on <host>:<port>`` — with ``--port 0`` the OS picks the port and
that line says which. The line before it, ``ferrymq node <id> metrics on <host>:<port>``,
names the Prometheus endpoint (``[metrics] host`` and ``ports.metrics``, 0 = any), and
``ferrymq node <id> remoting on <host>:<port>`` RocketMQ 4.x clients' port (``ports.remoting``:
the broker and NameServer roles, ``node/remoting/``). The event loop is uvloop's
(``node/run.py``). Replication and Raft listen on ``node.internal_host`` (default:
``node.host``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import logging
import os
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Callable

import grpc

from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2, admin_pb2_grpc, data_pb2_grpc
from ha import rollback
from ha.replicated_store import ReplicatedStore
from ha.role import ReplicationRole
from node.admission import Admission
from node.authentication import Authenticator, Verification, signature_headers
from node.client_port import (
    FIRST_BYTE_TIMEOUT_S,
    GrpcRelay,
    SniffingListener,
    waiting_at_most,
)
from node.client_registry import ClientConnections
from node.config import LARGEST_REQUEST_BYTES, NodeConfig, render_node_config
from node.console.api import ConsoleApi
from node.console.masters import MasterReads
from node.console.server import ConsoleServer
from node.consumer_offsets import ConsumerOffsets
from node.consumer_retry import ConsumerRetries
from node.consumer_subscriptions import Subscriptions
from node.forward_proof import ForwardProofs
from node.group_creation import GroupsOnFirstUse
from node.group_members import GroupMembers
from node.grpc.admin import AdminDoor
from node.grpc.authentication import CallAuthentication
from node.grpc.data import DataService
from node.grpc.forwarding import Forwarder
from node.grpc.messaging import MessagingService
from node.grpc.method_wrapping import add_wrapped
from node.grpc.namespaces import wrap_namespaces
from node.grpc.request_bytes import HeldRequests
from node.grpc.request_decoding import tolerate_malformed
from node.handle_key import receipt_handle_key
from node.lite_expiry import LiteExpiry
from node.lite_index import LiteIndex
from node.lite_notices import LiteNotices
from node.liveness import LivenessLoop
from node.long_polling import QueueWaiters
from node.metrics import NodeMetrics, RoutingStatus
from node.metrics_http import MetricsHttpServer
from node.pending_resets import PendingResets
from node.pop_state import PopState
from node.port_holds import adopt_inherited, hold_port, port_of
from node.queue_locks import QueueLocks
from node.recall_handle import RecallHandles
from node.receipt_handle import ReceiptHandles
from node.remoting.dispatch import Dispatch
from node.remoting.forwarding import RemotingForwarder
from node.remoting.roles import build_dispatch
from node.remoting.server import RemotingServer, transport_limits
from node.request_budget import RequestBudget
from node.routing_channel import Setup
from node.routing_proxy import RoutingProxy
from node.secret_box import SecretBox
from node.services.admin import AdminService
from node.services.caller import Caller
from node.services.check_relay import CheckRelay
from node.services.dead_letter_resend import DeadLetterResendService
from node.services.delivery_history import DeliveryHistoryService
from node.services.direct_consume import DirectConsumeService
from node.services.lite import LiteService
from node.services.locks import QueueLockService
from node.services.membership import MembershipService
from node.services.node_settings import NodeSettingsService
from node.services.offset_reset import OffsetResetService
from node.services.offsets import OffsetService
from node.services.peer_admin import PeerAdmin
from node.services.permissions import Permissions
from node.services.pop import PopService
from node.services.queries import QueryService
from node.services.reads import ReadService
from node.services.recall import RecallService
from node.services.registry import Services
from node.services.retries import RetryService
from node.services.routes import RouteService
from node.services.send import SendService
from node.services.topic_consumers import TopicConsumersService
from node.services.transactions import TransactionService
from node.stop_signals import stop_on
from node.tail_reads import TailReads
from node.timer_service import TimerService
from node.tls import (
    client_tls,
    grpc_relay_ssl_context,
    peer_channel_credentials,
    remoting_ssl_context,
    server_credentials,
)
from node.topics import MessageType, TopicTable
from node.wakeups import watch_wakeups
from routing.acl import User
from routing.commands import CatchUp, CreateUser, NodeHeartbeat, RegisterNode
from routing.formats import NEWEST_FORMAT
from routing.metadata import Member
from routing.replica import RoutingUnavailable
from store import sync_ledger
from store.message_store import MessageStore

REGISTER_CATCH_UP_S = 2.0  # the read barrier before a registration (``_register``)
# What this node tells routing it runs (ClusterStatus shows it; docs/upgrades.md).
SOFTWARE_VERSION = importlib.metadata.version("ferrymq")
log = logging.getLogger("ferrymq.node")
HOUSEKEEPING_INTERVAL_S = 1.0
# A console's failover handed to the master: its wait for the target's log, and the vote.
CONSOLE_FAILOVER_TIMEOUT_S = 60
MAX_MESSAGE_BYTES = LARGEST_REQUEST_BYTES


def grpc_server_options(max_concurrent_rpcs: int) -> list[tuple[str, int]]:
    """The client port's channel options. gRPC's core queues the calls that arrive before
    the asyncio server takes them, and past 1,000 queued (its default) it cancels them:
    a client with 2,048 sends in flight saw some end CANCELLED, unanswered. The queue is
    allowed as many calls as ``max_concurrent_rpcs`` (twice as many before core refuses
    outright), so that a flood gets the limiter's RESOURCE_EXHAUSTED, not a cancellation."""
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.server.max_pending_requests", max_concurrent_rpcs),
        ("grpc.server.max_pending_requests_hard_limit", 2 * max_concurrent_rpcs),
    ]


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.store: MessageStore | None = None
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.metrics_port = 0  # 0 while /metrics is not served
        self.metrics_http: MetricsHttpServer | None = None
        self.console: ConsoleServer | None = None  # with [console] enabled
        self.console_port = 0
        self.remoting: RemotingServer | None = None
        self.grpc_front: SniffingListener | None = None  # client_tls = optional
        self.verification: Verification | None = None  # with [security] auth
        self.remoting_port = 0
        self._housekeeping: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._check_task: asyncio.Task[None] | None = None
        self._lite_expiry_task: asyncio.Task[None] | None = None
        self._starved_until = 0.0  # this node's loop woke up late until then (wakeups.py)
        self._routing_tasks: list[asyncio.Task[None]] = []
        # The node's side of its routing host (node/routing_proxy.py): samples out, the
        # state's changes and the lease's renewals in.
        self.liveness = LivenessLoop()
        self.routing: RoutingProxy | None = None
        self._raft_port_held: socket.socket | None = None  # a standalone voter's port
        self.topics = TopicTable()
        self._states_ready = False
        self.services: Services | None = None
        self.peer_admin: PeerAdmin | None = None  # admin calls to other nodes' client ports
        self.must_stop: asyncio.Event | None = None  # set by a signal, or a lost host
        self.failure: str | None = None  # why the node stopped unasked

    @property
    def grpc_address(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def remoting_address(self) -> str:
        return f"{self.config.host}:{self.remoting_port}"

    async def start(self) -> None:
        config = self.config
        self.must_stop = asyncio.Event()
        os.makedirs(config.data_dir, exist_ok=True)
        # First: a key file that cannot be used stops the node before it touches anything.
        handle_key = receipt_handle_key(config.cluster.secret, config.data_dir)
        handles = ReceiptHandles(handle_key)
        self.recall_handles = RecallHandles(handle_key)
        loop = asyncio.get_running_loop()
        sync_ledger.enable_if_asked(config.data_dir)  # the chaos suite's power losses
        # Recovery reads and fsyncs files: keep the loop free while it runs.
        self.raw_store = await loop.run_in_executor(None, MessageStore.open, config.store_config())
        self.waiters = QueueWaiters(loop, read_cap=self.raw_store.read_cap)
        self.tail_reads = TailReads(self.raw_store)
        # The served methods take the metrics wrapper now; the states the collector reads
        # are attached once they exist (nothing scrapes before the metrics port opens).
        self.metrics = NodeMetrics(
            config.id, config.group, self.raw_store, self.topics, None, None, None
        )
        # What the client ports speak (a certificate is made on the first start).
        self.client_tls = client_tls(config)
        wrappers = self._client_port()
        # Join routing before serving: the services answer from the routing state, and
        # the node registers the addresses it really listens on.
        await self._join_routing(loop)
        # Every service writes through the replication role's checks.
        self.store = store = ReplicatedStore(self.raw_store, self.replication)
        self.offsets = ConsumerOffsets(store)
        self.offsets.load()
        self.pop_state = PopState(store)
        self.pop_state.replay()
        self.timers = TimerService(store, lambda name: name in self.topics.topics)
        self.timers.load(loop)
        self.lite_index = LiteIndex(store)
        self.lite_index.load(
            loop,
            [t.name for t in self.topics.topics.values() if t.message_type is MessageType.LITE],
        )
        self.lite_notices = LiteNotices(store)
        self.lite_notices.attach(loop)
        self.peer_admin = PeerAdmin(self._peer_channel, self._signed_as, self._master_of, config.id)
        self.services = self._services(store, handles)
        self.transactions = self.services.transactions
        self.transactions.load()
        self._open_doors(self.services, wrappers, loop)
        # Before a role can keep a cut tail: no keep is under way, so a half-written
        # rollback file is a crash's leftover.
        await loop.run_in_executor(None, self._remove_expired_rollbacks, True)
        # Take the role routing says before serving (the states were loaded just above).
        await self.replication.follow_routing()
        self._states_ready = True
        await self.server.start()
        if self.grpc_front is not None:
            self.grpc_front.serve()
        await self.remoting.serve()
        await self._serve_metrics()
        await self._serve_console()
        with open(os.path.join(config.data_dir, "node.toml"), "w", encoding="utf-8") as f:
            f.write(render_node_config(config))
        self._start_background_tasks()

    def _client_port(self) -> list:
        """The gRPC server of the client port, bound, and the wrappers of its methods."""
        config, security = self.config, self.config.security
        # Every method is wrapped once, at registration (node/grpc/method_wrapping.py), the
        # first wrapper outermost: malformed bodies answer INVALID_ARGUMENT before
        # anything else looks at them; then the request's bytes are held against the
        # node's budget for the call; then a call for another node's master goes there
        # (timed and authenticated where it is served); then RocketMQ namespaces
        # (node/grpc/namespaces.py: the services see the qualified names); then timing;
        # then authentication. What a caller may do is each service's decision.
        self.forwarder = Forwarder(
            node_id=config.id,
            broker_group=config.group,
            proofs=ForwardProofs(config.cluster.secret, config.id),
            state=lambda: self.routing.state,
            is_master=lambda: self.replication.is_master,
            channel_for=self._peer_channel,
        )
        # What every request of either door holds while handled: one budget for the node.
        messages = config.messages
        self.request_bytes = RequestBudget(
            messages.max_request_bytes, messages.max_request_bytes_per_connection
        )
        wrappers = [tolerate_malformed, HeldRequests(self.request_bytes).wrap]
        wrappers += [self.forwarder.wrap, wrap_namespaces, self.metrics.wrap_method]
        self.secret_box = SecretBox(config.cluster.secret) if config.cluster.secret else None
        if security.auth:
            authenticator = Authenticator(
                lambda access_key: self.routing.state.users.get(access_key),
                self.secret_box,
                security.clock_skew_s,
            )
            self.verification = Verification(authenticator)
            wrappers.append(CallAuthentication(self.verification).wrap)
            if self.client_tls.plaintext:
                log.warning(PLAINTEXT_AUTH_WARNING, config.security.clock_skew_s)
        limit = config.messages.max_concurrent_rpcs
        self.server = grpc.aio.server(
            options=grpc_server_options(limit), maximum_concurrent_rpcs=limit
        )
        listen = f"{config.host}:{config.ports.grpc}"
        tls = self.client_tls
        if tls.mode == "required":
            self.port = self.server.add_secure_port(listen, server_credentials(tls))
        elif tls.mode == "off":
            self.port = self.server.add_insecure_port(listen)
        else:  # both on one port: the relay ends TLS (node/client_port.py)
            backend_port = self.server.add_insecure_port("127.0.0.1:0")
            relay = GrpcRelay(backend_port, grpc_relay_ssl_context(tls), FIRST_BYTE_TIMEOUT_S)
            # Only connections still silent are bounded here (gRPC's own limits follow).
            waiting = waiting_at_most(
                config.remoting.max_connections, config.remoting.max_connections_per_address
            )
            self.grpc_front = SniffingListener(relay.accepted, FIRST_BYTE_TIMEOUT_S, waiting)
            self.port = self.grpc_front.bind(config.host, config.ports.grpc)
        return wrappers

    def _open_doors(self, services: Services, wrappers: list, loop) -> None:
        """Every door over the one set of services: the remoting port's handlers and the
        gRPC port's three services; and what listens to the store for them."""
        config, store = self.config, self.store
        self.remoting_forwarder = RemotingForwarder(
            self.forwarder.proofs,
            is_master=lambda: self.replication.is_master,
            master_address=self._master_remoting_address,
        )
        self.remoting.dispatch = build_dispatch(
            services, config, self.verification, self.remoting_forwarder
        )
        remoting = self.remoting
        self.metrics.remoting.watch(remoting.dispatch.codes, lambda: len(remoting.connections))
        self.raw_store.add_dispatch_listener(self.waiters.on_dispatch)
        self.raw_store.set_run_reader(self.tail_reads.on_run)
        # Under SYNC_FLUSH a record is readable once on disk (``MessageStore.read_cap``).
        self.raw_store.add_flush_listener(self._readable_moved)
        # The master's orphan checks reach the producers connected to the other nodes.
        relay = CheckRelay(
            self.raw_store, services.transactions.targets, lambda: store.is_master, loop
        )
        self.raw_store.add_dispatch_listener(relay.on_dispatch, topics=CheckRelay.TOPICS)
        self.metrics.offsets, self.metrics.pop_state = self.offsets, self.pop_state
        self.metrics.members = services.membership.members
        self.metrics.replication_status = self.replication.status
        self.metrics.routing_status = self._routing_status
        self.metrics.heartbeat_times = self.routing.heartbeat_times
        add_service = functools.partial(add_wrapped, self.server, wrappers=wrappers)
        add_service(
            service_pb2_grpc.add_MessagingServiceServicer_to_server,
            MessagingService(
                services, store.config.max_message_body_bytes, config.messages.long_polling_s
            ),
        )
        add_service(
            admin_pb2_grpc.add_AdminServicer_to_server,
            AdminDoor(services, config.group, self.peer_admin),
        )
        add_service(data_pb2_grpc.add_DataServicer_to_server, DataService(services))

    async def _serve_metrics(self) -> None:
        config = self.config
        self.metrics_http = MetricsHttpServer(
            self.metrics.registry, bearer_token=config.metrics.bearer_token
        )
        try:
            self.metrics_port = await self.metrics_http.start(
                config.metrics.host, config.ports.metrics
            )
        except OSError as error:  # messages keep flowing; Prometheus sees the target down
            log.error(
                "metrics port %s:%s unavailable (%s): no /metrics",
                config.metrics.host,
                config.ports.metrics,
                error,
            )

    async def _serve_console(self) -> None:
        """The web console (``node/console/``), when enabled: a port that cannot be bound
        stops the start, as the client ports do (an operator asked for it)."""
        config = self.config
        if not config.console.enabled:
            return
        api = ConsoleApi(
            self.services,
            node_facts=lambda: {
                "id": config.id,
                "broker_group": config.group,
                "software_version": SOFTWARE_VERSION,
                "routing_format": NEWEST_FORMAT,
                "grpc_address": self.grpc_address,
                "remoting_address": self.remoting_address,
            },
            run_failover=self._console_failover,
            retention_ms=self.raw_store.config.retention_ms,
            segment_bytes=self.raw_store.config.commitlog_segment_bytes,
            masters=MasterReads(
                self.services,
                config.id,
                config.group,
                master_of=lambda broker_group: self.routing.state.master_of(broker_group),
                peers=self.peer_admin,
            ),
        )
        security = config.security
        ssl_context = None
        if security.tls:
            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(security.tls_cert, security.tls_key)
        self.console = ConsoleServer(
            config.console,
            api,
            self.verification,
            lambda access_key: self.routing.state.users.get(access_key),
            config.cluster.secret,
            config.host,
            ssl_context,
        )
        self.console_port = await self.console.start()

    async def _console_failover(
        self, caller: Caller, master: Member, broker_group: str, target: str
    ) -> tuple[str, int, int]:
        """A planned failover the console asked for: decided here when this node is the
        group's master, else by the master's Admin door, called as the console's user
        (signed with that user's own key, as the user's client would)."""
        if master.node_id == self.config.id:
            admin = self.services.admin
            new_master, epoch, paused_ms = await admin.failover(caller, target or None)
            return new_master, epoch, int(paused_ms)
        request = admin_pb2.FailoverRequest(broker_group=broker_group, target_node=target)
        answer = await self.peer_admin.call(
            caller, master, "Failover", request, CONSOLE_FAILOVER_TIMEOUT_S
        )
        return answer.new_master, answer.epoch, answer.writes_unavailable_ms

    def _signed_as(self, user: User | None) -> tuple[tuple[str, str], ...]:
        """The signature headers of a call this node makes to another's Admin door as
        ``user`` (the console's), signed with the user's own key as its client would;
        none with authentication off."""
        if user is None or self.verification is None:
            return ()
        secret = self.verification.authenticator.secret_of(user)
        return signature_headers(user.access_key, secret)

    def _start_background_tasks(self) -> None:
        self._housekeeping = asyncio.create_task(self._housekeep())
        self._timer_task = asyncio.create_task(self.timers.run())
        self._check_task = asyncio.create_task(self.transactions.run_checks())
        self.lite_expiry = LiteExpiry(
            self.store,
            self.lite_index,
            self.topics,
            self.pop_state,
            self.services.lite.subscriptions,
            is_master=lambda: self.replication.is_master,
            interval_s=self.config.lite.expiry_check_interval_s,
            min_expiry_s=self.config.lite.min_expiry_s,
        )
        self._lite_expiry_task = asyncio.create_task(self.lite_expiry.run())
        self.routing.start_liveness()
        self._routing_tasks = [
            asyncio.create_task(self.replication.maintain()),
            asyncio.create_task(watch_wakeups(self._mark_starved, 2 * self._lease_s)),
        ]

    def _mark_starved(self, until: float) -> None:
        self._starved_until = until

    def _host_starved(self) -> bool:
        """Whether this node's loop or its routing host woke up late lately
        (``node/wakeups.py``): a lapse of the lease now is overload."""
        until = max(self._starved_until, self.routing.lease.starved_until)
        return time.monotonic() < until

    def _services(self, store: ReplicatedStore, handles: ReceiptHandles) -> Services:
        """Every service once, so every door shares each one's state (one round-robin
        position per topic, one table of members, one set of check targets)."""
        config, topics = self.config, self.topics
        messages = config.messages
        permissions = Permissions(config.security.auth)
        groups = GroupsOnFirstUse(topics, self.routing, messages.auto_create_groups)
        admission = Admission(store, topics, self.routing, config.group)
        retries = ConsumerRetries(topics, messages.delay_levels_ms)
        metrics = self.metrics.rpc
        transactions = TransactionService(
            store,
            messages.transaction_check_interval_ms,
            messages.transaction_max_checks,
            permissions,
            check_master=admission.check_master,
            is_master=lambda: store.is_master,
            max_producer_groups=messages.max_producer_groups_per_client,
        )
        members = GroupMembers()
        subscriptions = Subscriptions()
        pending_resets = PendingResets()  # between the offset reset and the read service
        pop = PopService(
            store,
            topics,
            self.offsets,
            self.pop_state,
            self.waiters,
            handles,
            permissions,
            groups=groups,
            metrics=metrics,
            lite_index=self.lite_index,
        )
        return Services(
            permissions=permissions,
            send=SendService(
                store,
                admission,
                permissions,
                transactions,
                retries,
                metrics,
                messages.max_delay_ms,
                self.recall_handles,
                config.group,
                lite_quota=self.lite_index.check_quota,
            ),
            reads=ReadService(
                store,
                topics,
                self.waiters,
                groups,
                permissions,
                metrics,
                pending_resets,
                self.tail_reads,
            ),
            offsets=OffsetService(store, topics, self.offsets, groups, permissions),
            pop=pop,
            lite=LiteService(
                topics,
                permissions,
                groups,
                pop,
                self.lite_index,
                notices=self.lite_notices,
                read_cap=self.raw_store.read_cap,
            ),
            transactions=transactions,
            membership=MembershipService(
                members,
                subscriptions,
                ClientConnections(
                    members,
                    subscriptions,
                    max_producer_groups=messages.max_producer_groups_per_client,
                ),
                groups,
                permissions,
            ),
            queries=QueryService(store, permissions),
            retries=RetryService(store, topics, retries, permissions, admission.check_master),
            locks=QueueLockService(QueueLocks(), permissions, admission.check_master),
            admin=AdminService(
                store,
                topics,
                self.offsets,
                self.pop_state,
                config.group,
                self.routing,
                permissions,
                config.id,
                self.replication,
                secret_box=self.secret_box,
                untyped_topics=MessageType.UNSPECIFIED
                if messages.untyped_topics_take_any_type
                else MessageType.NORMAL,
                stats=metrics.stats,
                max_open_sends=messages.max_concurrent_rpcs,
                lite_index=self.lite_index,
            ),
            routes=RouteService(self.routing, groups, permissions),
            recall=RecallService(
                admission, permissions, self.recall_handles, self.timers, config.group
            ),
            offset_reset=OffsetResetService(
                store,
                topics,
                self.offsets,
                self.pop_state,
                self.routing,
                permissions,
                config.group,
                self.peer_admin,
                pending_resets,
                subscriptions,
            ),
            delivery_history=DeliveryHistoryService(
                store, topics, self.offsets, self.pop_state, permissions, config.group
            ),
            dead_letter_resend=DeadLetterResendService(
                store,
                topics,
                self.pop_state,
                self.waiters,
                self.routing,
                permissions,
                config.group,
                self.peer_admin,
                lite_changed=lambda lmq: self.services.lite.changed(lmq),
            ),
            topic_consumers=TopicConsumersService(
                topics, self.offsets, self.pop_state, subscriptions, permissions, config.group
            ),
            direct_consume=DirectConsumeService(
                store, topics, members.live, permissions, config.group
            ),
            node_settings=NodeSettingsService(
                config, self.routing, permissions, is_master=lambda: store.is_master
            ),
        )

    def _master_of(self, broker_group: str) -> tuple[bool, Member | None]:
        """Whether routing knows ``broker_group``, and its master (``PeerAdmin``)."""
        return self.routing.read(
            lambda state: (broker_group in state.broker_groups, state.master_of(broker_group))
        )

    def _peer_channel(self, address: str) -> grpc.aio.Channel:
        """A channel to another node's client port, with TLS when this port has it, that
        carries any message the port takes (a forwarded call relays a client's)."""
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        if self.config.security.tls:
            credentials = peer_channel_credentials(self.config.security)
            return grpc.aio.secure_channel(address, credentials, options)
        return grpc.aio.insecure_channel(address, options)

    def _routing_status(self) -> RoutingStatus:
        raft = self.routing.status()
        return RoutingStatus(
            voter=raft.voter,
            leader=raft.leader or None,  # the leader's Raft address
            is_leader=self.routing.is_leader(),
            term=raft.term,
            commit_index=raft.commit_index,
        )

    def _readable_moved(self) -> None:
        """The read cap moved: readers waiting for more may read now."""
        self.waiters.readable_moved()
        if self.services is not None:
            self.services.lite.readable_moved()

    def _reload_states(self) -> None:
        """A promoted slave rebuilds everything it derives from the log."""
        if not self._states_ready:
            return  # the first start loads them after joining
        self.offsets.reload()
        self.pop_state.reload()
        self.lite_index.mend_cut()
        self.timers.reload()
        self.transactions.reload()

    # ---- routing -----------------------------------------------------------------------
    @property
    def _lease_s(self) -> float:
        return self.config.cluster.lease_ms / 1000

    async def _join_routing(self, loop: asyncio.AbstractEventLoop) -> None:
        config, cluster = self.config, self.config.cluster
        setup = self._routing_setup()
        self.routing = RoutingProxy(
            setup,
            self.liveness,
            sample=self._heartbeat_sample,
            on_applied=lambda command, result: self._routing_applied(loop, command),
            on_restored=lambda: loop.call_soon_threadsafe(self._routing_changed),
            on_lost=lambda why: loop.call_soon_threadsafe(self._stop_unasked, why),
        )
        self.routing.start()
        self.topics.catch_up = self.routing.catch_up
        deadline = time.monotonic() + cluster.join_timeout_ms / 1000
        await self.routing.wait_ready(cluster.join_timeout_ms / 1000)
        self.replication = ReplicationRole(
            self.raw_store,
            self.routing,
            node_id=config.id,
            broker_group=config.group,
            data_dir=config.data_dir,
            options=config.replication,
            lease_s=self._lease_s,
            secret=setup.secret,
            standalone=cluster.standalone,
            reload_states=self._reload_states,
            on_confirmed=lambda offset: self._readable_moved(),
            renew_lease_now=self.routing.renew_now,
            lease_renewed_at=lambda: self.routing.lease.renewed_at,
            host_starved=self._host_starved,
        )
        await self._bind_ports()
        await self._register(deadline)
        await self._ensure_admin_user(deadline)
        self._refresh_topics()

    def _routing_setup(self) -> Setup:
        """What this node's routing host joins routing with."""
        config, cluster = self.config, self.config.cluster
        if cluster.standalone:
            # A cluster of one: nobody dials this voter, so any free loopback port will
            # do, and a secret made up now keeps everybody else out. The port stays
            # held until the node stops (``node/port_holds.py``): the routing host binds
            # it when pysyncobj gets to it.
            self._raft_port_held = hold_port("127.0.0.1")
            address = f"127.0.0.1:{port_of(self._raft_port_held)}"
            voters, secret, self_address = [address], secrets.token_hex(16), address
        else:
            voters, secret = list(cluster.voters), cluster.secret
            # A voter's listener binds its Raft address (internal_host), not every
            # interface as pysyncobj would by default.
            self_address = config.raft_address if config.is_voter else None
        return Setup(
            node_id=config.id,
            self_address=self_address,
            voters=voters,
            secret=secret,
            data_dir=config.data_dir,
            lease_s=self._lease_s,
            heartbeat_interval_s=cluster.heartbeat_interval_ms / 1000,
            unclean_election=config.replication.unclean_election,
            join_timeout_s=cluster.join_timeout_ms / 1000,
        )

    def _routing_applied(self, loop: asyncio.AbstractEventLoop, command: object) -> None:
        # Heartbeats and read barriers change no topic or role.
        if not isinstance(command, (NodeHeartbeat, CatchUp)):
            loop.call_soon_threadsafe(self._routing_changed)

    async def _bind_ports(self) -> None:
        """The replication and remoting ports, bound before the node registers them."""
        config = self.config
        # A standalone node has no slaves to dial it: any free port will do.
        ha_port = 0 if config.cluster.standalone else config.ports.replication
        self.ha_port = await self.replication.master.listen(config.peer_host, ha_port)
        # Bound now, served once every handler is registered: routing learns the address.
        # (After the routing replica is ready, as the replication port: a node that cannot
        # join says so first.)
        self.remoting = RemotingServer(
            Dispatch(),
            transport_limits(config.remoting),
            observe=self.metrics.remoting.observe,
            budget=self.request_bytes,
        )
        tls = self.client_tls
        self.remoting_port = await self.remoting.bind(
            config.host,
            config.ports.remoting,
            None if tls.mode == "off" else remoting_ssl_context(tls),
            plaintext_too=tls.mode == "optional",
        )
        # Offset message ids carry the remoting address: 4.x clients and mqadmin ask the
        # address in an id for its message (VIEW_MESSAGE_BY_ID).
        self.raw_store.set_store_host(config.host, self.remoting_port)

    def _routing_changed(self) -> None:
        self._refresh_topics()
        self.forwarder.routing_changed()
        if self._states_ready:
            task = asyncio.ensure_future(self.replication.follow_routing())
            task.add_done_callback(_log_failure)

    async def _register(self, deadline: float) -> None:
        while True:
            try:
                # The log first: whether a node of an older release follows it decides how
                # this node writes commands (routing/formats.py), and a replica that has not
                # heard the log yet (a read-only one, just started) cannot know.
                await self.routing.catch_up(REGISTER_CATCH_UP_S)
                result = await self.routing.submit(
                    RegisterNode(
                        node_id=self.config.id,
                        broker_group=self.config.group,
                        grpc_address=self.grpc_address,
                        remoting_address=self.remoting_address,
                        raft_address=self.routing.self_address or "",
                        ha_address=f"{self.config.peer_host}:{self.ha_port}",
                        max_offset=self.raw_store.write_offset,
                        wall_ms=int(time.time() * 1000),
                        lease_ms=self.config.cluster.lease_ms,
                        damaged_log=self.raw_store.damage.unrefilled,
                        software_version=SOFTWARE_VERSION,
                        routing_format=NEWEST_FORMAT,
                    )
                )
            except RoutingUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                log.info("registration not committed yet: %s", error.detail)
                await asyncio.sleep(0.2)
                continue
            if not result.ok:
                raise RoutingUnavailable(f"routing refused this node: {result.detail}")
            return

    async def _ensure_admin_user(self, deadline: float) -> None:
        """With ``[security] admin_access_key``, make sure that admin exists (the first
        user of a cluster with auth on). An existing user is left as it is: its secret and
        rights are changed with ``ferrymq user update``, not by restarting nodes."""
        access_key = self.config.security.admin_access_key
        if not access_key or access_key in self.routing.state.users:
            return
        sealed = self.secret_box.seal(access_key, self.config.security.admin_secret_key)
        while True:
            try:
                result = await self.routing.submit(CreateUser(access_key, sealed, admin=True))
            except RoutingUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                log.info("admin user not created yet: %s", error.detail)
                await asyncio.sleep(0.2)
                continue
            if not result.ok and result.reason != "USER_EXISTS":
                raise RoutingUnavailable(f"routing refused the admin user: {result.detail}")
            if result.ok:
                log.info("created admin user %s", access_key)
            return

    def _master_remoting_address(self) -> str | None:
        """Where this node's group's master takes remoting requests (None: no master, or
        this node)."""
        master = self.routing.state.master_of(self.config.group)
        if master is None or master.node_id == self.config.id or not master.remoting_address:
            return None
        return master.remoting_address

    def _refresh_topics(self) -> None:
        assert self.routing is not None
        self.routing.read(lambda state: self.topics.refresh(state, self.config.group))

    def _heartbeat_sample(self) -> NodeHeartbeat:
        store = self.raw_store
        return NodeHeartbeat(
            self.config.id,
            store.write_offset,
            int(time.time() * 1000),
            damaged_log=store.damage.unrefilled,
        )

    def _stop_unasked(self, why: str) -> None:
        """The routing host ended: without it this node can neither keep a lease nor see
        routing change. It stops, as a crashed node would, and says why."""
        self.failure = why
        self.must_stop.set()

    async def _housekeep(self) -> None:
        loop = asyncio.get_running_loop()
        retention_check_s = self.raw_store.config.retention_check_interval_ms / 1000
        rollbacks_checked_at = time.monotonic()
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            self.metrics.rpc.stats.sample()  # the runtime table's rates and daily counts
            if time.monotonic() - rollbacks_checked_at >= retention_check_s:
                rollbacks_checked_at = time.monotonic()
                try:  # a deposed node's rollback files expire like its segments
                    await loop.run_in_executor(None, self._remove_expired_rollbacks, False)
                except OSError as error:
                    log.error("could not remove expired rollback files: %s", error)
            if not self.replication.is_master:
                continue  # a slave's log is its master's: it writes nothing of its own
            try:
                await self.offsets.snapshot_if_due()
                await self.pop_state.snapshot_if_due()
                # Timer records older than half the retention are re-appended before
                # retention can delete them while they wait.
                retention_ms = self.store.config.retention_ms
                await self.timers.roll_forward(self.timers.clock_ms() - retention_ms // 2)
            except Exception:  # one failed round must not end housekeeping
                log.exception("housekeeping round failed")

    def _remove_expired_rollbacks(self, partial: bool) -> None:
        """Rollback files and damaged ranges expire like the segments they came from."""
        retention_s = self.raw_store.config.retention_ms / 1000
        for path in rollback.remove_expired(self.config.data_dir, retention_s, partial=partial):
            log.info("removed rollback file %s (past the retention, or half-written)", path)
        for path in self.raw_store.damage.remove_expired(retention_s, partial=partial):
            log.info("removed damaged-range file %s (past the retention, or half-written)", path)

    async def stop(self, grace_s: float = 5.0) -> None:
        background = (self._housekeeping, self._timer_task, self._check_task)
        for task in (*background, self._lite_expiry_task, *self._routing_tasks):
            if task is not None:
                task.cancel()
        if self.metrics_http is not None:
            await self.metrics_http.close()
        if self.console is not None:
            await self.console.close()
        if self.remoting is not None:
            await self.remoting.close()
        if self.grpc_front is not None:
            await self.grpc_front.close()
        if self.server is not None:
            await self.server.stop(grace_s)
        await self.forwarder.close()
        if self.peer_admin is not None:
            await self.peer_admin.close()
        if getattr(self, "remoting_forwarder", None) is not None:
            self.remoting_forwarder.close()
        if getattr(self, "replication", None) is not None:
            await self.replication.close()
        if self.routing is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.routing.close)
        # Only now: the liveness loop holds the channel to the routing host, whose end
        # (EOF) ended the host at once, out of order and still leading routing, while this
        # node had yet to leave replication (its master then waited for an election to
        # drop it from the in-sync set, holding SYNC writes ~1 s).
        await asyncio.get_running_loop().run_in_executor(None, self.liveness.stop)
        if self._raft_port_held is not None:
            self._raft_port_held.close()
        if getattr(self, "raw_store", None) is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.raw_store.shutdown)


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("role change failed", exc_info=task.exception())


PLAINTEXT_AUTH_WARNING = (
    "security.auth is on and the client ports take plaintext: a plaintext client's "
    "signature travels in clear text and anyone who captures one can make any call as its "
    "user for the next %d s (clock_skew_s); set tls_cert and tls_key, and client_tls = "
    "required (docs/security.md)"
)


def keep_private(data_dir: str) -> None:
    """Messages, offsets, the Raft journal and sealed secrets are the node's alone: what it
    creates from now on is readable by its own user only (umask 077), and its data
    directory, also one an older version created with the default umask, is closed to
    others (0700)."""
    os.umask(0o077)
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    os.chmod(data_dir, 0o700)


async def serve(config: NodeConfig, on_ready: Callable[[Node], None] | None = None) -> None:
    """Run a node until SIGTERM or SIGINT; ``on_ready`` runs once it serves."""
    # Ports a launcher held for this node stay held until it stops: pysyncobj binds its
    # port on its own thread, whenever it gets to it (``node/port_holds.py``).
    holds = adopt_inherited()
    keep_private(config.data_dir)
    try:
        await _serve(config, on_ready)
    finally:
        for held in holds:
            held.close()


async def _serve(config: NodeConfig, on_ready: Callable[[Node], None] | None) -> None:
    node = Node(config)
    await node.start()
    metrics = f"{config.metrics.host}:{node.metrics_port}" if node.metrics_port else "off"
    print(f"ferrymq node {config.id} metrics on {metrics}", flush=True)
    if node.console is not None:
        print(
            f"ferrymq node {config.id} console on {config.console.host}:{node.console_port}",
            flush=True,
        )
    print(f"ferrymq node {config.id} remoting on {node.remoting_address}", flush=True)
    print(f"ferrymq node {config.id} ready on {config.host}:{node.port}", flush=True)
    if on_ready is not None:
        on_ready(node)
    with stop_on((signal.SIGTERM, signal.SIGINT), node.must_stop.set):
        await node.must_stop.wait()
    await node.stop()
    if node.failure is not None:
        raise RoutingUnavailable(f"node {config.id} stopped: {node.failure}")
    print(f"ferrymq node {config.id} stopped", flush=True)
