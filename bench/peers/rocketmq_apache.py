"""Apache RocketMQ 5.3: a name server with the controller embedded, three brokers of one
broker group in controller mode, and the proxy the official gRPC clients talk to; the
client is the official Python client, in a process of its own (``bench.peers.official``).

The closest to ferrymq's SYNC mode: controller mode with ``allAckInSyncStateSet=true``,
so the master acknowledges a send once every member of the SyncStateSet (master and both
slaves, normally) has it, in memory (ASYNC_FLUSH). ``minInSyncReplicas=1`` keeps the
master accepting sends while slaves drop out of the set, as ferrymq's master does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from importlib.metadata import version

from bench.peers import jvm, remoting
from bench.peers.growth import batches, spread
from bench.peers.java_client import JavaClientWorkloads, JavaGrpcClientWorkloads
from bench.peers.official import OfficialClientWorkloads
from bench.peers.workloads import BATCH, BATCHES_IN_FLIGHT, IN_FLIGHT, WAIT_S, log, plain_body
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until

VERSION = "5.3.3"
ARTIFACTS = tuple(
    jvm.Artifact("org.apache.rocketmq", name, VERSION)
    for name in ("rocketmq-namesrv", "rocketmq-controller", "rocketmq-broker", "rocketmq-proxy")
)
CLUSTER = "FerryBench"
GROUP = "broker-a"  # the one broker group (brokerName)
BROKERS = 3
QUEUES = 8
HEAP_MB = {"namesrv": 256, "broker": 512, "proxy": 384, "admin": 128}
# Small CommitLog files, as for the other peers: each is preallocated when created.
COMMITLOG_FILE_BYTES = 64 << 20
MAIN = {
    "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
    "broker": "org.apache.rocketmq.broker.BrokerStartup",
    "proxy": "org.apache.rocketmq.proxy.ProxyStartup",
    "admin": "org.apache.rocketmq.tools.command.MQAdminStartup",
}


# How fast a dead master is noticed and replaced, and how fast clients learn of it:
# "default" leaves every period as Apache RocketMQ 5.3.3 ships it; "shortest" cuts each
# to 1 s (the broker's controller heartbeat timeout to 3 s, three heartbeats at its
# default 1 s interval). Names and defaults from the 5.3.3 sources (ControllerConfig,
# BrokerConfig, ProxyConfig) and docs/en/controller/deploy.md.
SHORTEST_CONTROLLER = {
    "scanNotActiveBrokerInterval": "1000",  # default 5000: expire brokers without heartbeats
    "scanInactiveMasterInterval": "1000",  # default 5000: re-elect where the master is gone
}
SHORTEST_BROKER = {
    "controllerHeartBeatTimeoutMills": "3000",  # default 10000
    "brokerHeartbeatInterval": "1000",  # default 1000 (the heartbeat to the controller)
    "syncBrokerMetadataPeriod": "1000",  # default 5000: role and epoch from the controller
    "checkSyncStateSetPeriod": "1000",  # default 5000
    "syncControllerMetadataPeriod": "1000",  # default 10000: which controller leads
}
SHORTEST_PROXY = {
    "topicRouteServiceCacheRefreshSeconds": 1,  # default 20: the proxy's route cache
}
TIMEOUTS = ("default", "shortest")


def namesrv_properties(
    namesrv_port: int, controller_port: int, root: str, timeouts: str = "default"
) -> dict[str, str]:
    """The name server, with the controller inside it: a one-voter DLedger group, whose
    peer port is also where brokers and mqadmin reach the controller."""
    return {
        **(SHORTEST_CONTROLLER if timeouts == "shortest" else {}),
        "listenPort": str(namesrv_port),
        "enableControllerInNamesrv": "true",
        "controllerDLegerGroup": "bench",
        "controllerDLegerPeers": f"n0-127.0.0.1:{controller_port}",
        "controllerDLegerSelfId": "n0",
        "controllerStorePath": os.path.join(root, "controller"),
        "enableElectUncleanMaster": "false",
    }


def broker_properties(
    index: int,
    listen_port: int,
    ha_port: int,
    namesrv: str,
    controller: str,
    root: str,
    timeouts: str = "default",
) -> dict[str, str]:
    """Broker ``index`` of the group, in controller mode: which one is master is the
    controller's choice; acknowledgements wait for the whole SyncStateSet."""
    store = os.path.join(root, f"b{index + 1}", "store")
    return {
        **(SHORTEST_BROKER if timeouts == "shortest" else {}),
        "brokerClusterName": CLUSTER,
        "brokerName": GROUP,
        "brokerId": "-1",  # assigned by the controller
        "brokerIP1": "127.0.0.1",
        "listenPort": str(listen_port),
        "haListenPort": str(ha_port),
        "namesrvAddr": namesrv,
        "enableControllerMode": "true",
        "controllerAddr": controller,
        "allAckInSyncStateSet": "true",
        "inSyncReplicas": str(BROKERS),
        "minInSyncReplicas": "1",
        "flushDiskType": "ASYNC_FLUSH",
        "storePathRootDir": store,
        "storePathCommitLog": os.path.join(store, "commitlog"),
        "storePathEpochFile": os.path.join(store, "epochFileCheckpoint"),
        "storePathBrokerIdentity": os.path.join(store, "brokerIdentity"),
        "mappedFileSizeCommitLog": str(COMMITLOG_FILE_BYTES),
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": "true",
        "diskMaxUsedSpaceRatio": "95",
        # A send waits in the broker's queue up to the client's timeout rather than the
        # default 200 ms, past which the broker refuses it as busy (on 2 shared cores, a
        # JVM pause is enough).
        "waitTimeMillsInSendQueue": "3000",
    }


def proxy_config(
    namesrv: str, grpc_port: int, remoting_port: int, timeouts: str = "default"
) -> dict[str, object]:
    """The proxy in cluster mode: the gRPC endpoint of the official clients."""
    return {
        **(SHORTEST_PROXY if timeouts == "shortest" else {}),
        "rocketMQClusterName": CLUSTER,
        "namesrvAddr": namesrv,
        "proxyMode": "cluster",
        "grpcServerPort": grpc_port,
        "remotingListenPort": remoting_port,
    }


def render(properties: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def home_properties(directory: str) -> dict[str, str]:
    """Every path a RocketMQ process derives from the home directories (logs, stores,
    configs) falls under ``directory``."""
    return {"user.home": directory, "rocketmq.home.dir": directory}


def mqadmin(java: str, lib: str, root: str, registry, namesrv: str, arguments) -> str:
    """One mqadmin command against ``namesrv`` (a JVM of its own, its home under
    ``root``): its output; ``RuntimeError`` with the end of it when it fails."""
    home = os.path.join(root, "admin")
    os.makedirs(home, exist_ok=True)
    argv = jvm.java_argv(
        java,
        lib,
        MAIN["admin"],
        HEAP_MB["admin"],
        [arguments[0], "-n", namesrv, *arguments[1:]],
        home_properties(home),
    )
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        env=registry.environment({"ROCKETMQ_HOME": home}),
    )
    if done.returncode != 0:
        raise RuntimeError(f"mqadmin {arguments[0]}: {done.stdout[-500:]}{done.stderr[-500:]}")
    return done.stdout


class RocketmqApache(OfficialClientWorkloads):
    name = "rocketmq"
    timeouts = "default"
    durability = (
        "controller mode, allAckInSyncStateSet: acknowledged once every SyncStateSet member "
        "(master and both slaves, normally) holds it, in memory; ASYNC_FLUSH"
    )
    failover_how = (
        "kill -9 of the master broker (controller mode, failover periods as shipped); the "
        "controller elects a slave of the SyncStateSet, the proxy's route cache and the "
        "official client's retries find it"
    )

    def __init__(self) -> None:
        super().__init__()
        self._brokers: dict[str, tuple[dict[str, str], int]] = {}  # key: (properties, port)
        self._stopped_master = ""
        self.client = f"rocketmq-python-client {version('rocketmq-python-client')} (official)"
        self.growth_client = (
            "RocketMQ's remoting protocol from Python, straight to the master broker, as a "
            "4.x client (SEND_BATCH_MESSAGE of 128, 16 in flight; SEND_MESSAGE_V2, 256 in "
            "flight; PULL_MESSAGE of 32, one in flight per queue)"
        )
        self.namesrv = ""
        self._java = ""
        self._lib = ""
        self._root = ""
        self._registry = None
        self._admin_runs = 0

    def start(self, registry) -> None:
        self._java = jvm.find_java()
        self._lib = jvm.resolve("rocketmq", ARTIFACTS)
        self._registry = registry
        root = self._root = registry.make_dir("rocketmq")
        self.client_home = os.path.join(root, "client")
        ports = free_ports(4 + 2 * BROKERS)
        namesrv_port, controller_port, grpc_port, remoting_port = ports[:4]
        self.namesrv = f"127.0.0.1:{namesrv_port}"
        self.controller = f"127.0.0.1:{controller_port}"
        self._spawn(
            "namesrv",
            "namesrv",
            namesrv_properties(namesrv_port, controller_port, root, self.timeouts),
        )
        for port, what in ((namesrv_port, "the name server"), (controller_port, "the controller")):
            until(lambda p=port: self._listening(p), 120, what, interval_s=0.2)
        for index in range(BROKERS):
            listen_port, ha_port = ports[4 + 2 * index], ports[5 + 2 * index]
            properties = broker_properties(
                index, listen_port, ha_port, self.namesrv, self.controller, root, self.timeouts
            )
            self._brokers[f"broker{index + 1}"] = (properties, listen_port)
        self.start_nodes()
        # The proxy creates its system topics at start: only once the master is elected.
        proxy_path = os.path.join(root, "proxy.json")
        with open(proxy_path, "w", encoding="utf-8") as f:
            json.dump(proxy_config(self.namesrv, grpc_port, remoting_port, self.timeouts), f)
        self._spawn_argv("proxy", "proxy", ["-pc", proxy_path])
        self.endpoints = f"127.0.0.1:{grpc_port}"
        until(lambda: self._listening(grpc_port), 120, "the proxy", interval_s=0.2)
        log(f"  rocketmq: namesrv {self.namesrv}, proxy {self.endpoints}, 3 brokers in sync")

    def stop(self) -> None:
        """The registry stops the processes."""

    # ---- processes -------------------------------------------------------------------
    def _spawn(self, name: str, kind: str, properties: dict[str, str]) -> None:
        path = os.path.join(self._root, f"{name}.properties")
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(properties))
        self._spawn_argv(name, kind, ["-c", path])

    def _spawn_argv(self, name: str, kind: str, arguments: list[str]) -> None:
        home = os.path.join(self._root, name)
        os.makedirs(home, exist_ok=True)
        argv = jvm.java_argv(
            self._java, self._lib, MAIN[kind], HEAP_MB[kind], arguments, home_properties(home)
        )
        self._registry.spawn(
            f"rocketmq-{name}",
            argv,
            os.path.join(self._root, f"{name}.log"),
            env={"ROCKETMQ_HOME": home},
        )

    @staticmethod
    def _listening(port: int) -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex(("127.0.0.1", port)) == 0

    def _admin(self, *arguments: str) -> str:
        """One mqadmin command (a JVM of its own, not timed): its output."""
        self._admin_runs += 1
        return mqadmin(self._java, self._lib, self._root, self._registry, self.namesrv, arguments)

    def _group_in_sync(self) -> bool:
        """Whether the controller reports a master and a SyncStateSet of all three."""
        try:
            out = self._admin("getSyncStateSet", "-b", GROUP, "-a", self.controller)
        except Exception:
            return False
        return f"#SyncStateSetNums\t{BROKERS}" in out

    # ---- topics (OfficialClientWorkloads) ------------------------------------------------
    def create_topic(self, topic: str, queues: int) -> None:
        self._admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", str(queues), "-w", str(queues))

    def delete_topic(self, topic: str) -> None:
        self._admin("deleteTopic", "-c", CLUSTER, "-t", topic)

    def create_group(self, group: str) -> None:
        """The brokers create subscription groups on first use."""

    def delete_group(self, group: str) -> None:
        """Left to the brokers' directories, removed at teardown."""

    # ---- topics and the backlog: straight to and from the master over remoting ----------
    def _master_broker(self) -> str:
        return until(lambda: remoting.master_address(self.namesrv, GROUP), 60, "the master broker")

    def spread_send(self, names: list[str], count: int) -> float:
        """Over remoting to the master as ``fill`` (the official Python client would
        measure itself at ~1,000 msgs/s): one untimed message per topic, then ``count``."""
        master = self._master_broker()
        remoting.send_spread(master, names, plain_body(), 64)
        return remoting.send_spread(master, spread(names, count), plain_body(), IN_FLIGHT)

    def fill(self, topic: str, count: int) -> float:
        return remoting.send_batches(
            self._master_broker(), topic, count, plain_body(), BATCH, BATCHES_IN_FLIGHT, QUEUES
        )

    def read_all(self, topic: str, count: int, group: str) -> float:
        wait_s = WAIT_S * 10 + count / 500
        return remoting.pull_all(self._master_broker(), topic, group, QUEUES, count, wait_s)

    # ---- the brokers as processes (failover, cold reads) ------------------------------
    def _process(self, key: str) -> subprocess.Popen:
        """The latest process started for broker ``key``."""
        name = f"rocketmq-{key}"
        return next(s.process for s in reversed(self._registry.started) if s.name == name)

    def start_nodes(self) -> None:
        """Start the brokers; after ``stop_nodes``, the master it stopped first, and the
        others once the name server lists it as master again: the consumer groups'
        offsets are the master's (a group a new master does not know starts at the end
        of a backlog that is not in memory)."""
        keys = list(self._brokers)
        master, self._stopped_master = self._stopped_master, ""
        if master:
            self._spawn(master, "broker", self._brokers[master][0])
            until(lambda: self._master_key() == master, 120, f"{master} master again", 0.5)
            keys.remove(master)
        for key in keys:
            self._spawn(key, "broker", self._brokers[key][0])
        until(self._group_in_sync, 180, "a master and two in-sync slaves", interval_s=1.0)

    def stop_nodes(self) -> None:
        """SIGTERM to the slaves, then to the master (each flushes and writes its
        state), waiting for each."""
        self._stopped_master = self._master_key() or ""
        keys = sorted(self._brokers, key=lambda k: k == self._stopped_master)
        for key in keys:
            process = self._process(key)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def data_dirs(self) -> list[str]:
        return [properties["storePathRootDir"] for properties, _ in self._brokers.values()]

    def _master_key(self) -> str | None:
        """The broker the name server lists as master, or None."""
        try:
            address = remoting.master_address(self.namesrv, GROUP)
        except (OSError, remoting.RemotingError):
            return None
        port = int(address.rpartition(":")[2]) if address else -1
        return next((k for k, (_, p) in self._brokers.items() if p == port), None)

    def master_node(self, topic: str) -> tuple[str, str]:
        key = until(self._master_key, 60, "the master in the name server's table", 0.2)
        return key, f"{key} (master)"

    def kill_node(self, key: str) -> None:
        process = self._process(key)
        process.kill()
        process.wait(30)

    def restart_node(self, key: str) -> None:
        self._spawn(key, "broker", self._brokers[key][0])

    def wait_rejoined(self, topic: str) -> None:
        until(self._group_in_sync, 180, "the SyncStateSet back to all three", interval_s=1.0)

    # ---- many topics: in batches, straight to the master (bench.peers.growth) -----------
    def create_topics(self, names: list[str]) -> None:
        master = until(
            lambda: remoting.master_address(self.namesrv, GROUP), 60, "the master broker"
        )
        for batch in batches(names):
            remoting.create_topics(master, batch, 1)
            until(
                lambda batch=batch: remoting.has_route(self.namesrv, batch[-1]),
                60,
                f"a route for {batch[-1]}",
                interval_s=0.1,
            )


class RocketmqApacheShortTimeouts(RocketmqApache):
    """The same cluster with every failover period at the shortest (``SHORTEST_*``):
    measured in the failover drills only."""

    name = "rocketmq-shortest"
    timeouts = "shortest"
    failover_how = (
        "kill -9 of the master broker, every failover period at 1 s (controller scans, "
        "broker metadata syncs, the proxy's route cache; heartbeat timeout 3 s); the "
        "official client's retries find the new master"
    )


class RocketmqApacheJava4(JavaClientWorkloads, RocketmqApache):
    """The same cluster through the official Java 4.x client, given the name server as the
    OpenMessaging Benchmark's driver is: Apache RocketMQ through its fastest client, and
    the client of the ferrymq-java4 column."""

    name = "rocketmq-java4"

    @property
    def java_address(self) -> str:
        return self.namesrv


class RocketmqApacheJava5(JavaGrpcClientWorkloads, RocketmqApache):
    """The same cluster through the official Java 5.x client, given the proxy: the client
    of the ferrymq-java5 column."""

    name = "rocketmq-java5"

    @property
    def java_address(self) -> str:
        return self.endpoints
