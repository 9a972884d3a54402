"""RabbitMQ quorum queues: three rabbitmq-server nodes in one cluster (their own epmd,
ports, cookie and directories), a quorum queue over all three, clients through pika.

A publish is confirmed (publisher confirms) once the queue's Raft group has the message in
the logs of a majority, two of the three nodes, fsynced. Consumers use ``basic_consume``
with a prefetch window and manual acknowledgements sent with ``multiple`` every
``ACK_EVERY`` messages.
"""

from __future__ import annotations

import collections
import os
import queue
import secrets
import shutil
import subprocess
import threading
import time
from importlib.metadata import version

import pika

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

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
DEBIAN_PACKAGE = "rabbitmq-server"
NODES = 3
PREFETCH = 2048
ACK_EVERY = 256
QUORUM = {"x-queue-type": "quorum"}
PERSISTENT = pika.BasicProperties(delivery_mode=2)


class RabbitMqQuorum:
    name = "rabbitmq"
    durability = (
        "quorum queue on 3 nodes, publisher confirms: confirmed once 2 of 3 nodes have "
        "the message in their Raft log, fsynced; persistent messages"
    )

    def __init__(self) -> None:
        self.client = f"pika {version('pika')}"
        self.ports: list[int] = []
        self.env: dict[str, str] = {}
        self._queues = 0

    # ---- nodes -----------------------------------------------------------------------
    def _node_env(self, root: str, index: int, amqp: int, dist: int, epmd: int) -> dict:
        node = os.path.join(root, f"rabbit{index + 1}")
        os.makedirs(node, exist_ok=True)
        config = os.path.join(node, "rabbitmq.conf")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{amqp}\nloopback_users = none\n")
        plugins = os.path.join(node, "enabled_plugins")
        with open(plugins, "w", encoding="utf-8") as f:
            f.write("[].\n")
        return {
            **self.env,
            "RABBITMQ_NODENAME": f"bench{index + 1}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp),
            "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_CONFIG_FILE": config,
            "RABBITMQ_ENABLED_PLUGINS_FILE": plugins,
            "RABBITMQ_MNESIA_BASE": os.path.join(node, "mnesia"),
            "RABBITMQ_LOG_BASE": node,
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": os.path.join(node, "pid"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(node, "advanced.config"),
        }

    def start(self, registry) -> None:
        for program in (SERVER, CTL):
            if not os.path.exists(program):
                raise RuntimeError(f"{program} not found")
        epmd_binary = shutil.which("epmd")
        if epmd_binary is None:
            raise RuntimeError("epmd not found")
        root = registry.make_dir("rabbitmq")
        home = os.path.join(root, "home")
        os.makedirs(home)
        cookie = os.path.join(home, ".erlang.cookie")
        with open(os.open(cookie, os.O_WRONLY | os.O_CREAT, 0o400), "w") as f:
            f.write(secrets.token_hex(16).upper())
        conf_env = os.path.join(root, "rabbitmq-env.conf")
        open(conf_env, "w").close()
        ports = free_ports(1 + 2 * NODES)
        epmd = ports[0]
        self.ports = ports[1 : 1 + NODES]
        dist_ports = ports[1 + NODES :]
        self.env = {
            "HOME": home,
            "ERL_EPMD_PORT": str(epmd),
            "RABBITMQ_CONF_ENV_FILE": conf_env,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        # Our own epmd in the foreground: the nodes would otherwise start a daemon one.
        registry.spawn(
            "epmd", [epmd_binary, "-port", str(epmd)], os.path.join(root, "epmd.log"), env=self.env
        )
        self.node_envs = []
        for index in range(NODES):
            env = self._node_env(root, index, self.ports[index], dist_ports[index], epmd)
            self.node_envs.append(env)
            registry.spawn(
                f"rabbit{index + 1}",
                [SERVER],
                os.path.join(root, f"rabbit{index + 1}.log"),
                env=env,
            )
        for index in range(NODES):
            self._await_startup(index)
        for index in range(1, NODES):
            self._ctl(index, "stop_app")
            self._ctl(index, "join_cluster", "bench1@localhost")
            self._ctl(index, "start_app", timeout_s=120)
        log(f"  rabbitmq: 3-node cluster up, AMQP on {', '.join(map(str, self.ports))}")

    def _await_startup(self, index: int, timeout_s: float = 120) -> None:
        """``await_startup`` fails at once while the node is not yet registered with epmd:
        retry it until the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._ctl(index, "await_startup", timeout_s=timeout_s)
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _ctl(self, index: int, *args: str, timeout_s: float = 60) -> str:
        env = {**os.environ, **self.node_envs[index]}
        answer = subprocess.run(
            [CTL, "-n", env["RABBITMQ_NODENAME"], *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
        if answer.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {answer.stderr.strip()[-500:]}")
        return answer.stdout

    def stop(self) -> None:
        pass  # the registry stops the nodes and epmd

    def _parameters(self, index: int = 0) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(
            "127.0.0.1", self.ports[index], heartbeat=0, blocked_connection_timeout=WAIT_S
        )

    def _run(self, workload):
        """Run ``workload(queue_name)`` on a fresh quorum queue, deleted afterwards."""
        self._queues += 1
        name = f"bench{self._queues}"
        connection = pika.BlockingConnection(self._parameters())
        try:
            channel = connection.channel()
            channel.queue_declare(name, durable=True, arguments=QUORUM)
            try:
                return workload(name)
            finally:
                channel.queue_delete(name)
        finally:
            connection.close()

    # ---- sends -----------------------------------------------------------------------
    def _publish(self, queue_name: str, count: int, window: int, stamped: bool = False):
        """Publish ``count`` messages with at most ``window`` unconfirmed (pika's
        asynchronous connection): (seconds, seconds from each publish to its confirm)."""
        return ConfirmedPublisher(self._parameters(), queue_name, count, window, stamped).run()

    def sequential_send(self, count: int) -> list[float]:
        def workload(name: str) -> list[float]:
            self._publish(name, WARMUP, 1)
            return self._publish(name, count, 1)[1]

        return self._run(workload)

    def inflight_send(self, count: int, in_flight: int) -> float:
        def workload(name: str) -> float:
            self._publish(name, WARMUP * 4, in_flight)
            return self._publish(name, count, in_flight)[0]

        return self._run(workload)

    def batched_send(self, count: int) -> float:
        def workload(name: str) -> float:
            self._publish(name, WARMUP * 4, BATCH * BATCHES_IN_FLIGHT)
            return self._publish(name, count, BATCH * BATCHES_IN_FLIGHT)[0]

        return self._run(workload)

    # ---- reads -----------------------------------------------------------------------
    def end_to_end(self, count: int) -> list[float]:
        def workload(name: str) -> list[float]:
            arrived: queue.Queue[float] = queue.Queue()
            consumer = Consumer(self._parameters(1), name, lambda body: arrived.put(age_s(body)))
            consumer.start()
            try:
                publisher = pika.BlockingConnection(self._parameters())
                try:
                    channel = publisher.channel()
                    channel.confirm_delivery()
                    took = []
                    for i in range(WARMUP + count):
                        channel.basic_publish("", name, stamped_body(), PERSISTENT)
                        latency = arrived.get(timeout=WAIT_S)
                        if i >= WARMUP:
                            took.append(latency)
                    return took
                finally:
                    publisher.close()
            finally:
                consumer.stop()

        return self._run(workload)

    def consume(self, count: int) -> float:
        def workload(name: str) -> float:
            self._publish(name, count, BATCH * BATCHES_IN_FLIGHT)
            connection = pika.BlockingConnection(self._parameters())
            try:
                channel = connection.channel()
                channel.basic_qos(prefetch_count=PREFETCH)
                started = time.perf_counter()
                deliveries = channel.consume(name, inactivity_timeout=WAIT_S)
                for received, (method, _, _) in enumerate(deliveries, start=1):
                    if method is None:
                        raise RuntimeError(f"no delivery for {WAIT_S} s after {received - 1}")
                    if received % ACK_EVERY == 0 or received == count:
                        channel.basic_ack(method.delivery_tag, multiple=True)
                    if received == count:
                        break
                took = time.perf_counter() - started
                channel.cancel()
                return took
            finally:
                connection.close()

        return self._run(workload)


class ConfirmedPublisher:
    """Publishes through pika's ``SelectConnection`` with publisher confirms, keeping up
    to ``window`` messages unconfirmed: the asynchronous way to pipeline with pika."""

    def __init__(self, parameters, queue_name: str, count: int, window: int, stamped: bool):
        self.parameters = parameters
        self.queue_name = queue_name
        self.count = count
        self.window = window
        self.stamped = stamped
        self.published = 0
        self.confirmed = 0
        self.outstanding: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.latencies: list[float] = []
        self.error: str | None = None
        self.started = self.finished = 0.0

    def run(self) -> tuple[float, list[float]]:
        self.connection = pika.SelectConnection(
            self.parameters,
            on_open_callback=lambda c: c.channel(on_open_callback=self._on_channel),
            on_open_error_callback=lambda c, e: self._fail(f"connection failed: {e!r}"),
            on_close_callback=lambda c, e: c.ioloop.stop(),
        )
        self.connection.ioloop.call_later(WAIT_S * 10, lambda: self._fail("timed out"))
        self.connection.ioloop.start()
        if self.error is not None:
            raise RuntimeError(f"rabbitmq publisher: {self.error}")
        return self.finished - self.started, self.latencies

    def _fail(self, error: str) -> None:
        if self.error is None and self.confirmed < self.count:
            self.error = error
        if self.connection.is_open:
            self.connection.close()
        else:
            self.connection.ioloop.stop()

    def _on_channel(self, channel) -> None:
        self.channel = channel
        channel.add_on_close_callback(lambda ch, e: self._fail(f"channel closed: {e!r}"))
        channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=self._go)

    def _go(self, _frame) -> None:
        self.started = time.perf_counter()
        self._publish_more()

    def _publish_more(self) -> None:
        body = plain_body()
        while self.published < self.count and len(self.outstanding) < self.window:
            if self.stamped:
                body = stamped_body()
            self.channel.basic_publish("", self.queue_name, body, PERSISTENT)
            self.published += 1
            self.outstanding[self.published] = time.perf_counter()

    def _on_confirm(self, frame) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self._fail(f"message {method.delivery_tag} nacked")
            return
        now = time.perf_counter()
        tags = (
            [t for t in self.outstanding if t <= method.delivery_tag]
            if method.multiple
            else [method.delivery_tag]
        )
        for tag in tags:
            self.latencies.append(now - self.outstanding.pop(tag))
        self.confirmed += len(tags)
        if self.confirmed >= self.count:
            self.finished = now
            self.channel.close()
            self.connection.close()
        else:
            self._publish_more()


class Consumer:
    """A consumer on a thread of its own (pika connections are not thread-safe): calls
    ``on_body`` for each delivery and acknowledges it."""

    def __init__(self, parameters, queue_name: str, on_body) -> None:
        self.parameters = parameters
        self.queue_name = queue_name
        self.on_body = on_body
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(WAIT_S):
            raise RuntimeError("rabbitmq consumer did not start")
        if self.failure is not None:
            raise RuntimeError(f"rabbitmq consumer: {self.failure!r}")

    def _run(self) -> None:
        try:
            self.connection = pika.BlockingConnection(self.parameters)
            self.channel = self.connection.channel()
            self.channel.basic_qos(prefetch_count=PREFETCH)

            def on_message(channel, method, properties, body) -> None:
                self.on_body(body)
                channel.basic_ack(method.delivery_tag)

            self.channel.basic_consume(self.queue_name, on_message)
            self.ready.set()
            self.channel.start_consuming()
            self.connection.close()
        except BaseException as error:
            self.failure = error
            self.ready.set()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.connection.add_callback_threadsafe(self.channel.stop_consuming)
            self.thread.join(WAIT_S)
