"""Redis Streams: one redis-server master and two replicas (asynchronous replication),
clients through redis-py's asyncio API.

A send is ``XADD`` followed by ``WAIT 1`` in one pipeline: acknowledged once at least one
replica has received the write (into its memory). Every server keeps an append-only file
with ``appendfsync everysec`` (fsync once a second). Redis has no automatic failover
without Sentinel; none runs here. Consumers read with ``XREAD`` from the last id seen.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from importlib.metadata import version

import redis.asyncio as aioredis

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

BINARY = "redis-server"
DEBIAN_PACKAGE = "redis-server"
REPLICAS = 2
WAIT_REPLICAS = 1
WAIT_TIMEOUT_MS = int(WAIT_S * 1000)
READ = 512


def server_argv(binary: str, port: int, directory: str, master_port: int | None) -> list[str]:
    argv = [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", directory,
        "--daemonize", "no",
        "--logfile", "",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        # Start-up only: a replica's first full sync begins at once instead of after 5 s.
        "--repl-diskless-sync-delay", "0",
    ]  # fmt: skip
    if master_port is not None:
        argv += ["--replicaof", "127.0.0.1", str(master_port)]
    return argv


class RedisStreams:
    name = "redis"
    durability = (
        "master + 2 async replicas, AOF appendfsync everysec on each; every send is XADD + "
        "WAIT 1: acknowledged once 1 replica has received it (in memory); no automatic failover"
    )

    def __init__(self) -> None:
        self.client = f"redis-py {version('redis')}"
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._keys = 0

    # ---- servers ---------------------------------------------------------------------
    def start(self, registry) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(f"{BINARY} not found")
        root = registry.make_dir("redis")
        ports = free_ports(1 + REPLICAS)
        self.port = ports[0]
        for index, port in enumerate(ports):
            directory = os.path.join(root, f"r{index + 1}")
            os.makedirs(directory)
            registry.spawn(
                f"redis-r{index + 1}",
                server_argv(binary, port, directory, None if index == 0 else self.port),
                os.path.join(root, f"r{index + 1}.log"),
            )
        self.loop.run_until_complete(self._wait_replicas())
        log(f"  redis: master 127.0.0.1:{self.port} with {REPLICAS} replicas online")

    def _connect(self, connections: int = 4) -> aioredis.Redis:
        pool = aioredis.BlockingConnectionPool(
            host="127.0.0.1", port=self.port, max_connections=connections, timeout=WAIT_S
        )
        return aioredis.Redis(connection_pool=pool)

    async def _wait_replicas(self) -> None:
        deadline = time.monotonic() + 60
        client = self._connect()
        try:
            while True:
                try:
                    info = await client.info("replication")
                    online = [
                        v for k, v in info.items()
                        if k.startswith("slave") and isinstance(v, dict)
                        and v.get("state") == "online"
                    ]  # fmt: skip
                    if len(online) == REPLICAS:
                        return
                except (OSError, aioredis.ConnectionError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("redis replicas not online after 60 s")
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()

    def stop(self) -> None:
        self.loop.close()

    def _run(self, workload, connections: int = 4):
        """Run ``workload(client, key)`` on a fresh stream key, deleted afterwards."""
        self._keys += 1
        key = f"bench:{self._keys}"

        async def around():
            client = self._connect(connections)
            try:
                return await workload(client, key)
            finally:
                await client.delete(key)
                await client.aclose()

        return self.loop.run_until_complete(around())

    # ---- sends -----------------------------------------------------------------------
    @staticmethod
    async def _send(client: aioredis.Redis, key: str, bodies: list[bytes]) -> None:
        """XADD each body and WAIT for one replica, all in one pipeline (one round trip)."""
        async with client.pipeline(transaction=False) as pipe:
            for body in bodies:
                pipe.xadd(key, {"b": body})
            pipe.wait(WAIT_REPLICAS, WAIT_TIMEOUT_MS)
            answers = await pipe.execute()
        if answers[-1] < WAIT_REPLICAS:
            raise RuntimeError(f"WAIT {WAIT_REPLICAS} answered {answers[-1]} replicas")

    def sequential_send(self, count: int) -> list[float]:
        async def workload(client, key) -> list[float]:
            body = [plain_body()]
            for _ in range(WARMUP):
                await self._send(client, key, body)
            took = []
            for _ in range(count):
                started = time.perf_counter()
                await self._send(client, key, body)
                took.append(time.perf_counter() - started)
            return took

        return self._run(workload)

    def inflight_send(self, count: int, in_flight: int) -> float:
        async def workload(client, key) -> float:
            body = [plain_body()]
            remaining = iter(range(count))

            async def caller() -> None:
                for _ in remaining:
                    await self._send(client, key, body)

            warmup = iter(range(WARMUP * 4))
            await asyncio.gather(*(self._send(client, key, body) for _ in warmup))
            started = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(in_flight)))
            return time.perf_counter() - started

        return self._run(workload, connections=in_flight)

    async def _send_batches(self, client, key: str, count: int) -> float:
        bodies = [plain_body()] * BATCH
        remaining = iter(range(0, count, BATCH))

        async def worker() -> None:
            for first in remaining:
                await self._send(client, key, bodies[: min(BATCH, count - first)])

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(BATCHES_IN_FLIGHT)))
        return time.perf_counter() - started

    def batched_send(self, count: int) -> float:
        async def workload(client, key) -> float:
            await self._send_batches(client, key, WARMUP * 4)
            return await self._send_batches(client, key, count)

        return self._run(workload, connections=BATCHES_IN_FLIGHT)

    # ---- reads -----------------------------------------------------------------------
    def end_to_end(self, count: int) -> list[float]:
        async def workload(client, key) -> list[float]:
            arrived: asyncio.Queue[float] = asyncio.Queue()
            reader = self._connect(1)

            async def consumer() -> None:
                last = b"0-0"
                while True:
                    answer = await reader.xread({key: last}, count=READ, block=WAIT_TIMEOUT_MS)
                    for _, entries in answer:
                        for entry_id, fields in entries:
                            arrived.put_nowait(age_s(fields[b"b"]))
                            last = entry_id

            task = asyncio.create_task(consumer())
            try:
                took = []
                for i in range(WARMUP + count):
                    await self._send(client, key, [stamped_body()])
                    getting = asyncio.ensure_future(arrived.get())
                    done, _ = await asyncio.wait(
                        {getting, task}, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getting not in done:
                        getting.cancel()
                        why = task.exception() if task.done() else "timed out"
                        raise RuntimeError(f"consumer: {why}")
                    if i >= WARMUP:
                        took.append(getting.result())
                return took
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await reader.aclose()

        return self._run(workload)

    def consume(self, count: int) -> float:
        async def workload(client, key) -> float:
            await self._send_batches(client, key, count)
            received, last = 0, b"0-0"
            started = time.perf_counter()
            while received < count:
                answer = await client.xread({key: last}, count=READ, block=WAIT_TIMEOUT_MS)
                if not answer:
                    raise RuntimeError(f"XREAD timed out after {received} of {count}")
                entries = answer[0][1]
                received += len(entries)
                last = entries[-1][0]
            return time.perf_counter() - started

        return self._run(workload, connections=BATCHES_IN_FLIGHT)
