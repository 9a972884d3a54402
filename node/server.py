"""The broker process: one store, the gRPC services on one port, a clean stop on SIGTERM.

``python -m node --config node.toml [--data DIR] [--port P]`` (also ``ferrymq node``).
On start it writes the effective configuration to ``<data>/node.toml`` and prints one line
``ferrymq node <id> ready on <host>:<port>`` — with ``--port 0`` the OS picks the port and
that line says which. The line before it, ``ferrymq node <id> metrics on <host>:<port>``,
names the Prometheus endpoint (``ports.metrics``, 0 = any; ``node.metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

import grpc

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2_grpc, data_pb2_grpc
from node.admin_service import AdminService
from node.config import NodeConfig, render_node_config
from node.consumer_offsets import ConsumerOffsets
from node.data_service import DataService
from node.group_members import GroupMembers
from node.long_polling import QueueWaiters
from node.messaging_service import MessagingService
from node.metrics import NodeMetrics
from node.metrics_http import MetricsHttpServer
from node.pop_service import PopService
from node.pop_state import PopState
from node.timer_service import TimerService
from node.topics import TopicTable
from node.transaction_service import TransactionService
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.node")
HOUSEKEEPING_INTERVAL_S = 1.0
MAX_MESSAGE_BYTES = 64 << 20


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.store: MessageStore | None = None
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.metrics_port = 0  # 0 while /metrics is not served
        self.metrics_http: MetricsHttpServer | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._check_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        config = self.config
        os.makedirs(config.data_dir, exist_ok=True)
        loop = asyncio.get_running_loop()
        # Recovery reads and fsyncs files: keep the loop free while it runs.
        self.store = await loop.run_in_executor(None, MessageStore.open, config.store_config())
        self.topics = topics = TopicTable(os.path.join(config.data_dir, "topics.json"))
        self.offsets = ConsumerOffsets(self.store)
        self.offsets.load()
        self.pop_state = PopState(self.store)
        self.pop_state.replay()
        waiters = QueueWaiters(loop)
        pop = PopService(self.store, topics, self.offsets, self.pop_state, waiters)
        self.timers = TimerService(self.store, lambda name: name in topics.topics)
        self.timers.load(loop)
        self.transactions = TransactionService(
            self.store,
            config.messages.transaction_check_interval_ms,
            config.messages.transaction_max_checks,
        )
        self.transactions.load()
        members = GroupMembers()
        self.store.dispatcher.listeners.append(waiters.on_dispatch)
        self.metrics = NodeMetrics(
            config.id, config.group, self.store, topics, self.offsets, self.pop_state, members
        )
        self.server = grpc.aio.server(
            interceptors=[self.metrics.interceptor],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.port = self.server.add_insecure_port(f"{config.host}:{config.ports.grpc}")
        advertised = pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host=config.host, port=self.port)]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingService(
                self.store,
                topics,
                self.offsets,
                waiters,
                pop,
                config.group,
                advertised,
                self.transactions,
                members,
                options=config.messages,
            ),
            self.server,
        )
        admin_pb2_grpc.add_AdminServicer_to_server(
            AdminService(self.store, topics, self.offsets, self.pop_state, members, config.group),
            self.server,
        )
        data_pb2_grpc.add_DataServicer_to_server(
            DataService(self.store, topics, waiters), self.server
        )
        await self.server.start()
        self.metrics_http = MetricsHttpServer(self.metrics.registry)
        try:
            self.metrics_port = await self.metrics_http.start(config.host, config.ports.metrics)
        except OSError as error:  # messages keep flowing; Prometheus sees the target down
            log.error("metrics port %s unavailable (%s): no /metrics", config.ports.metrics, error)
        with open(os.path.join(config.data_dir, "node.toml"), "w", encoding="utf-8") as f:
            f.write(render_node_config(config))
        self._housekeeping = asyncio.create_task(self._housekeep())
        self._timer_task = asyncio.create_task(self.timers.run())
        self._check_task = asyncio.create_task(self.transactions.run_checks())

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                await self.offsets.snapshot_if_segment_changed()
                await self.pop_state.snapshot_if_segment_changed()
                # Timer records older than half the retention are re-appended before
                # retention can delete them while they wait.
                retention_ms = self.store.config.retention_ms
                await self.timers.roll_forward(self.timers.clock_ms() - retention_ms // 2)
            except Exception:  # one failed round must not end housekeeping
                log.exception("housekeeping round failed")

    async def stop(self, grace_s: float = 5.0) -> None:
        for task in (self._housekeeping, self._timer_task, self._check_task):
            if task is not None:
                task.cancel()
        if self.metrics_http is not None:
            await self.metrics_http.close()
        if self.server is not None:
            await self.server.stop(grace_s)
        if self.store is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.store.shutdown)


async def serve(config: NodeConfig, on_ready: Callable[[Node], None] | None = None) -> None:
    """Run a node until SIGTERM or SIGINT; ``on_ready`` runs once it serves."""
    node = Node(config)
    await node.start()
    metrics = f"{config.host}:{node.metrics_port}" if node.metrics_port else "off"
    print(f"ferrymq node {config.id} metrics on {metrics}", flush=True)
    print(f"ferrymq node {config.id} ready on {config.host}:{node.port}", flush=True)
    if on_ready is not None:
        on_ready(node)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    await node.stop()
    print(f"ferrymq node {config.id} stopped", flush=True)
