"""Lite topics at scale (RocketMQ 5.5's model): ``python -m bench.lite [--peers
ferrymq,rocketmq] [--lite-topics 100000] [--subscriptions 10000] [--json]``.

One LITE topic; a producer sends one message to each of ``--lite-topics`` lite topics (the
official Python client, 256 sends outstanding); then five LitePushConsumers of one group
(2,000 lite topics each at most, the client quota) subscribe to ``--subscriptions`` of
them and consume their messages. Reported per peer: the send rate, how long the
subscriptions took, the rate at which the subscribed lite topics' messages were consumed,
and the anonymous resident memory the server processes grew by, per lite topic.

Peers: ferrymq as a 3-node SYNC group (``bench.peers.ferry``'s), and Apache RocketMQ 5.5.0
(the newest proxy on Maven Central) as one name server, one broker with
``enableLmq``/``enableMultiDispatch`` (without them it stores no lite topic) and its consume
queues in RocksDB (``storeType=defaultRocksDB``: with a file per lite topic it runs out of
open files past ~20,000 lite topics on this host), and the proxy
in cluster mode (lite topics do not work through a local proxy), its LITE topic and its
group bound to it (``lite.bind.topic``) created with mqadmin first, as RocketMQ requires.
The client is the same, in a process of its own (``bench.lite_client``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from bench.peers import jvm
from bench.peers.ferry import Ferrymq
from bench.peers.processes import ProcessRegistry
from bench.peers.rocketmq_apache import (
    HEAP_MB,
    MAIN,
    home_properties,
    mqadmin,
    proxy_config,
    render,
)
from bench.peers.workloads import log
from ferrymq.client import Admin
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until

TOPIC = "LiteBench"
GROUP = "lite-bench"
QUEUES = 8
CONSUMERS = 5
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APACHE_VERSION = "5.5.0"
APACHE_ARTIFACTS = tuple(
    jvm.Artifact("org.apache.rocketmq", name, APACHE_VERSION)
    for name in ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-proxy", "rocketmq-tools")
)


def rss_bytes(pids: list[int]) -> int:
    """The anonymous resident memory of ``pids`` together (0 for one that is gone): what the
    processes hold, without the pages of files they map (the CommitLog's)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def client(
    request: dict, home: str, timeout_s: float = 1800, module: str = "bench.lite_client"
) -> dict:
    """One request to an official-client program (``module``) in a process of its own: its
    answer, the last line it prints."""
    done = subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HOME": home},
        timeout=timeout_s,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{module}: {done.stderr.strip()[-800:]}")
    return json.loads(lines[-1])


class FerrymqLite:
    name = "ferrymq"
    setup = "3 nodes, SYNC replication, ASYNC_FLUSH; LITE topic of 8 queues"
    topics: tuple[tuple[str, int, str], ...] = ((TOPIC, QUEUES, "LITE"),)  # name, queues, type

    def start(self, registry: ProcessRegistry) -> None:
        self.cluster = Ferrymq()
        self.cluster.start(registry)
        self.endpoints = self.cluster.plan.nodes[0].grpc  # the official client takes one
        self.home = registry.make_dir("lite-client")
        with Admin(self.cluster.admin_address) as admin:
            for topic, queues, message_type in self.topics:
                admin.create_topic(topic, queues, message_type=message_type)

    def server_pids(self) -> list[int]:
        return [node.pid for node in self.cluster.plan.nodes]

    def stop(self) -> None:
        self.cluster.stop()


class ApacheLite:
    name = "rocketmq"
    setup = (
        f"Apache RocketMQ {APACHE_VERSION}: one broker (ASYNC_FLUSH, enableLmq, "
        "enableMultiDispatch), proxy in cluster mode; LITE topic of 8 queues"
    )
    topics: tuple[tuple[str, int, str], ...] = ((TOPIC, QUEUES, "LITE"),)  # name, queues, type
    # Each group a lite consumer uses, created bound to its LITE topic (RocketMQ refuses a
    # lite consumer of any other group).
    lite_groups: tuple[tuple[str, str], ...] = ((GROUP, TOPIC),)
    # Added to the broker's properties. Consume queues in RocksDB: in files, every lite topic
    # holds a file open, and past ~20,000 lite topics (this host's hard limit on open files)
    # the broker fails with "Too many open files" and answers nothing more.
    broker_settings: dict[str, str] = {"storeType": "defaultRocksDB"}

    def start(self, registry: ProcessRegistry) -> None:
        self.registry = registry
        self.java = jvm.find_java()
        self.lib = jvm.resolve(f"rocketmq-{APACHE_VERSION}", APACHE_ARTIFACTS)
        root = self.root = registry.make_dir("rocketmq-lite")
        self.home = os.path.join(root, "client")
        os.makedirs(self.home, exist_ok=True)
        namesrv_port, broker_port, grpc_port, remoting_port = free_ports(4)
        self.namesrv = f"127.0.0.1:{namesrv_port}"
        self._spawn("namesrv", "namesrv", {"listenPort": str(namesrv_port)})
        until(lambda: _listening(namesrv_port), 120, "the name server", interval_s=0.2)
        store = os.path.join(root, "store")
        broker = self._spawn(
            "broker",
            "broker",
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "brokerId": "0",
                "brokerIP1": "127.0.0.1",
                "listenPort": str(broker_port),
                "namesrvAddr": self.namesrv,
                "storePathRootDir": store,
                "storePathCommitLog": os.path.join(store, "commitlog"),
                "mappedFileSizeCommitLog": str(256 << 20),
                "flushDiskType": "ASYNC_FLUSH",
                "autoCreateTopicEnable": "false",
                "autoCreateSubscriptionGroup": "true",
                "enableLmq": "true",
                "enableMultiDispatch": "true",
                "diskMaxUsedSpaceRatio": "95",
                "waitTimeMillsInSendQueue": "3000",
                **self.broker_settings,
            },
        )
        self.broker_pid = broker.pid
        until(lambda: _listening(broker_port), 120, "the broker", interval_s=0.2)
        proxy_path = os.path.join(root, "proxy.json")
        with open(proxy_path, "w", encoding="utf-8") as f:
            config = proxy_config(self.namesrv, grpc_port, remoting_port)
            json.dump({**config, "rocketMQClusterName": "DefaultCluster"}, f)
        proxy = self._spawn_argv("proxy", "proxy", ["-pc", proxy_path])
        self.proxy_pid = proxy.pid
        until(lambda: _listening(grpc_port), 120, "the proxy", interval_s=0.2)
        self.endpoints = f"127.0.0.1:{grpc_port}"
        for topic, queues, message_type in self.topics:
            counts = ["-r", str(queues), "-w", str(queues)]
            where = ["-c", "DefaultCluster", "-t", topic, *counts]
            self._admin("updateTopic", *where, "-a", f"+message.type={message_type}")
        for group, topic in self.lite_groups:
            where = ["-c", "DefaultCluster", "-g", group]
            self._admin("updateSubGroup", *where, "--attributes", f"+lite.bind.topic={topic}")

    def server_pids(self) -> list[int]:
        return [self.broker_pid, self.proxy_pid]

    def stop(self) -> None:
        """The registry stops the processes."""

    def _spawn(self, name: str, kind: str, properties: dict[str, str]):
        path = os.path.join(self.root, f"{name}.properties")
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(properties))
        return self._spawn_argv(name, kind, ["-c", path])

    def _spawn_argv(self, name: str, kind: str, arguments: list[str]):
        home = os.path.join(self.root, name)
        os.makedirs(home, exist_ok=True)
        heap = 1024 if kind == "broker" else HEAP_MB[kind]
        argv = jvm.java_argv(
            self.java, self.lib, MAIN[kind], heap, arguments, home_properties(home)
        )
        return self.registry.spawn(
            f"rocketmq-{name}",
            argv,
            os.path.join(self.root, f"{name}.log"),
            env={"ROCKETMQ_HOME": home},
        )

    def _admin(self, *arguments: str) -> str:
        out = mqadmin(self.java, self.lib, self.root, self.registry, self.namesrv, arguments)
        if "success" not in out.lower():
            raise RuntimeError(f"mqadmin {arguments[0]}: {out[-500:]}")
        return out


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def measure(peer, lite_topics: int, subscriptions: int) -> dict:
    before = rss_bytes(peer.server_pids())
    sent = client(
        {
            "op": "send",
            "endpoints": peer.endpoints,
            "topic": TOPIC,
            "lite_topics": lite_topics,
            "window": 256,
        },
        peer.home,
    )
    time.sleep(2)  # let the servers settle before reading their memory
    after_send = rss_bytes(peer.server_pids())
    try:
        consumed = client(
            {
                "op": "consume",
                "endpoints": peer.endpoints,
                "topic": TOPIC,
                "group": GROUP,
                "consumers": CONSUMERS,
                "lite_topics": subscriptions,
            },
            peer.home,
        )
    except RuntimeError as error:  # reported with the figures the sends gave
        consumed = {"subscribe_s": 0.0, "consume_s": 0.0, "consumed": 0, "error": str(error)}
    return {
        "error": consumed.get("error", "")[-300:],
        "peer": peer.name,
        "setup": peer.setup,
        "lite_topics": lite_topics,
        "subscriptions": subscriptions,
        "send_msgs_per_s": round(lite_topics / sent["elapsed_s"], 1),
        "send_failed": sent["failed"],
        "subscribe_s": round(consumed["subscribe_s"], 2),
        "consumed": consumed["consumed"],
        "consume_msgs_per_s": round(consumed["consumed"] / max(consumed["consume_s"], 1e-3), 1),
        "server_rss_mb_before": round(before / 2**20, 1),
        "server_rss_mb_after_send": round(after_send / 2**20, 1),
        "rss_bytes_per_lite_topic": round((after_send - before) / lite_topics, 1),
    }


PEERS = {"ferrymq": FerrymqLite, "rocketmq": ApacheLite}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lite", description=__doc__)
    parser.add_argument("--peers", default="ferrymq,rocketmq")
    parser.add_argument("--lite-topics", type=int, default=100_000)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for name in args.peers.split(","):
        registry = ProcessRegistry("lite")
        peer = PEERS[name]()
        try:
            log(f"{name}: starting")
            peer.start(registry)
            results.append(measure(peer, args.lite_topics, args.subscriptions))
            log(f"{name}: {results[-1]}")
        finally:
            peer.stop()
            registry.stop_all()
    if args.json:
        print(json.dumps(results))
    else:
        for row in results:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
