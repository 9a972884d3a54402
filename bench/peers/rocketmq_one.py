"""One Apache RocketMQ broker as it runs alone: a name server and one master broker
(ASYNC_MASTER, ASYNC_FLUSH, no slave), in a process registry's processes. The broker of
issue 40's OpenMessaging Benchmark figure, run here beside ferrymq's one node through the
same Java client (``bench.java_ceiling``, ``bench.saturation --peer apache``); the same
pair proves the 4.x test drivers (``tests/support/validate_against_apache.py``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from bench.peers import jvm
from bench.peers.processes import ProcessRegistry
from bench.peers.rocketmq_apache import HEAP_MB, MAIN, home_properties, mqadmin, render
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until

CLUSTER = "DefaultCluster"
BROKER = "broker-a"
COMMITLOG_FILE_BYTES = 64 << 20


@dataclass
class OneBroker:
    """Where the pair listens, and its processes' pids (the broker's first)."""

    namesrv: str
    broker: str
    pids: list[int]
    java: str
    lib: str
    root: str
    registry: ProcessRegistry

    def create_topic(self, topic: str, queues: int) -> None:
        """``topic`` with ``queues`` queues on the broker (mqadmin, retried until the
        broker has registered with its name server)."""
        arguments = ["updateTopic", "-c", CLUSTER, "-t", topic, "-r", str(queues)]
        arguments += ["-w", str(queues)]

        def created() -> bool:
            try:
                mqadmin(self.java, self.lib, self.root, self.registry, self.namesrv, arguments)
            except RuntimeError:
                return False
            return True

        until(created, 120, f"topic {topic} on the broker", interval_s=1.0)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def start_one_broker(
    registry: ProcessRegistry, java: str, lib: str, root: str, settings: dict[str, str]
) -> OneBroker:
    """The name server, then the broker (its properties ``settings`` over the defaults
    here), from the jars in ``lib``; returns once both listen."""
    # The broker also listens on its port - 2 (the "VIP" channel): keep that one free too.
    while True:
        namesrv_port, broker_port, ha_port = free_ports(3)
        if not listening(broker_port - 2) and broker_port - 2 not in (namesrv_port, ha_port):
            break
    namesrv = f"127.0.0.1:{namesrv_port}"
    store = os.path.join(root, "broker", "store")
    broker = {
        "brokerClusterName": CLUSTER,
        "brokerName": BROKER,
        "brokerId": "0",
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "brokerIP1": "127.0.0.1",
        "listenPort": str(broker_port),
        "haListenPort": str(ha_port),
        "namesrvAddr": namesrv,
        "storePathRootDir": store,
        "storePathCommitLog": os.path.join(store, "commitlog"),
        "mappedFileSizeCommitLog": str(COMMITLOG_FILE_BYTES),
        "diskMaxUsedSpaceRatio": "95",
        # A send waits in the broker's queue up to the client's timeout rather than the
        # default 200 ms, past which the broker refuses it as busy (as bench.peers runs it).
        "waitTimeMillsInSendQueue": "3000",
        **settings,
    }
    pids = []
    for name, properties, port in (
        ("namesrv", {"listenPort": str(namesrv_port)}, namesrv_port),
        ("broker", broker, broker_port),
    ):
        home = os.path.join(root, name)
        os.makedirs(home, exist_ok=True)
        config = os.path.join(root, f"{name}.properties")
        with open(config, "w", encoding="utf-8") as f:
            f.write(render(properties))
        argv = jvm.java_argv(
            java, lib, MAIN[name], HEAP_MB[name], ["-c", config], home_properties(home)
        )
        log = os.path.join(root, f"{name}.log")
        pids.append(registry.spawn(f"apache-{name}", argv, log, env={"ROCKETMQ_HOME": home}).pid)
        until(lambda p=port: listening(p), 180, f"the {name}", interval_s=0.2)
    return OneBroker(namesrv, f"127.0.0.1:{broker_port}", pids[::-1], java, lib, root, registry)
