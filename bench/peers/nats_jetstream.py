"""NATS JetStream: three nats-server processes in one cluster, a file-backed stream with
three replicas (R3), clients through nats-py on one connection.

A publish is acknowledged (PubAck) once the stream's Raft group has the message on a
majority, two of the three servers, in their file stores (written, not fsynced: the
file store syncs on an interval). Consumers read with a pull consumer, acknowledging
each fetched batch at once (AckAll) — the closest to ferrymq's committed offsets.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from importlib.metadata import version

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    WAIT_S,
    WARMUP,
    age_s,
    log,
    plain_body,
    stamped_body,
)
from ferrymq.launcher.cluster import free_ports

BINARY = "nats-server"
DEBIAN_PACKAGE = "nats-server"
NODES = 3
FETCH = 512


def server_config(index: int, client_ports: list[int], route_ports: list[int], root: str) -> str:
    routes = ", ".join(
        f"nats-route://127.0.0.1:{port}" for i, port in enumerate(route_ports) if i != index
    )
    return f"""
server_name: n{index + 1}
listen: 127.0.0.1:{client_ports[index]}
jetstream {{
  store_dir: "{os.path.join(root, f"n{index + 1}")}"
  max_memory_store: 64MB
  max_file_store: 8GB
}}
cluster {{
  name: ferrymq-bench
  listen: 127.0.0.1:{route_ports[index]}
  routes: [{routes}]
}}
"""


async def quiet(error: Exception) -> None:
    """nats-py prints every connection error by default; the benchmark reports its own."""


class NatsJetStream:
    name = "nats"
    durability = (
        "JetStream R3 stream, file storage: PubAck after 2 of 3 servers stored it "
        "(written to their files, fsync on the file store's interval)"
    )

    def __init__(self) -> None:
        self.client = f"nats-py {version('nats-py')}"
        self.loop = asyncio.new_event_loop()
        self.nc = None
        self.js = None
        self._streams = 0

    # ---- servers ---------------------------------------------------------------------
    def start(self, registry) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(f"{BINARY} not found")
        root = registry.make_dir("nats")
        ports = free_ports(2 * NODES)
        client_ports, route_ports = ports[:NODES], ports[NODES:]
        for index in range(NODES):
            path = os.path.join(root, f"n{index + 1}.conf")
            with open(path, "w", encoding="utf-8") as f:
                f.write(server_config(index, client_ports, route_ports, root))
            registry.spawn(
                f"nats-n{index + 1}",
                [binary, "-c", path],
                os.path.join(root, f"n{index + 1}.log"),
            )
        self.servers = [f"nats://127.0.0.1:{p}" for p in client_ports]
        self.loop.run_until_complete(self._connect())

    async def _connect(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                self.nc = await nats.connect(
                    servers=self.servers,
                    connect_timeout=2,
                    max_reconnect_attempts=5,
                    error_cb=quiet,  # refusals while the servers start are expected
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        self.js = self.nc.jetstream(
            timeout=WAIT_S, publish_async_max_pending=BATCH * BATCHES_IN_FLIGHT
        )
        # The cluster is ready once an R3 stream can be created (meta leader elected).
        while True:
            try:
                await self._new_stream("READY")
                await self.js.delete_stream("READY")
                log(f"  nats: 3-node JetStream cluster up at {', '.join(self.servers)}")
                return
            except Exception as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JetStream cluster not ready: {error!r}") from error
                await asyncio.sleep(0.2)

    async def _new_stream(self, name: str) -> str:
        await self.js.add_stream(
            StreamConfig(
                name=name, subjects=[name.lower()], storage=StorageType.FILE, num_replicas=NODES
            )
        )
        return name.lower()

    def stop(self) -> None:
        if self.nc is not None:
            try:
                self.loop.run_until_complete(asyncio.wait_for(self.nc.close(), 5))
            except Exception as error:
                log(f"  nats: close failed ({error!r})")
        self.loop.close()

    def _run(self, workload):
        """Run ``workload(subject)`` on a fresh R3 stream, deleted afterwards."""
        self._streams += 1
        name = f"BENCH{self._streams}"

        async def around():
            subject = await self._new_stream(name)
            try:
                return await workload(subject)
            finally:
                await self.js.delete_stream(name)

        return self.loop.run_until_complete(around())

    # ---- workloads -------------------------------------------------------------------
    def sequential_send(self, count: int) -> list[float]:
        async def workload(subject: str) -> list[float]:
            body = plain_body()
            for _ in range(WARMUP):
                await self.js.publish(subject, body)
            took = []
            for _ in range(count):
                started = time.perf_counter()
                await self.js.publish(subject, body)
                took.append(time.perf_counter() - started)
            return took

        return self._run(workload)

    def inflight_send(self, count: int, in_flight: int) -> float:
        async def workload(subject: str) -> float:
            body = plain_body()
            for _ in range(WARMUP):
                await self.js.publish(subject, body)
            remaining = iter(range(count))

            async def caller() -> None:
                for _ in remaining:
                    await self.js.publish(subject, body)

            started = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(in_flight)))
            return time.perf_counter() - started

        return self._run(workload)

    async def _publish_async_all(self, subject: str, count: int) -> None:
        """nats-py's pipelined publish: up to BATCH * BATCHES_IN_FLIGHT unacknowledged."""
        body = plain_body()
        futures = []
        for _ in range(count):
            futures.append(await self.js.publish_async(subject, body))
        await asyncio.wait_for(asyncio.gather(*futures), WAIT_S * 4)

    def batched_send(self, count: int) -> float:
        async def workload(subject: str) -> float:
            await self._publish_async_all(subject, WARMUP)
            started = time.perf_counter()
            await self._publish_async_all(subject, count)
            return time.perf_counter() - started

        return self._run(workload)

    def end_to_end(self, count: int) -> list[float]:
        async def workload(subject: str) -> list[float]:
            arrived: asyncio.Queue[float] = asyncio.Queue()

            async def on_message(msg) -> None:
                arrived.put_nowait(age_s(msg.data))

            subscription = await self.js.subscribe(
                subject, cb=on_message, config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
            )
            try:
                took = []
                for i in range(WARMUP + count):
                    await self.js.publish(subject, stamped_body())
                    latency = await asyncio.wait_for(arrived.get(), WAIT_S)
                    if i >= WARMUP:
                        took.append(latency)
                return took
            finally:
                await subscription.unsubscribe()

        return self._run(workload)

    def consume(self, count: int) -> float:
        async def workload(subject: str) -> float:
            await self._publish_async_all(subject, count)
            subscription = await self.js.pull_subscribe(
                subject, durable="bench", config=ConsumerConfig(ack_policy=AckPolicy.ALL)
            )
            try:
                received = 0
                started = time.perf_counter()
                while received < count:
                    messages = await subscription.fetch(min(FETCH, count - received), WAIT_S)
                    received += len(messages)
                    await messages[-1].ack()
                return time.perf_counter() - started
            finally:
                await subscription.unsubscribe()

        return self._run(workload)
