"""A local cluster of node processes on loopback: plan, start, wait, describe, stop.

``ferrymq cluster up --nodes N [--groups G] --data DIR`` plans N nodes in G broker groups
(node-1..N, the first N/G in group-1 and so on), writes one ``DIR/node-i.toml`` each, starts
them as detached processes logging to ``DIR/node-i.log``, waits until every node is
registered with routing, and writes ``DIR/cluster.json`` (docs/architecture.md, "Ports, and
cluster.json") so that scripts find every node. Running it again on the same DIR restarts
the nodes that are not running with the same ports and data, so a cluster survives ``cluster
down`` / ``cluster up``.

Voters: 1 node → itself; 2 → the first; 3 or more → 3 voters spread over the broker
groups (5 with ``--voters 5``). The cluster secret is generated once and kept in
``cluster.json`` (mode 0600) and the node configs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace

from ferrymq.launcher.processes import signal_node
from node.port_holds import (
    RELEASE_WAIT_S,
    hold_free_ports,
    hold_port_when_free,
    port_of,
    start_with_holds,
)

CLUSTER_FILE = "cluster.json"
# The version of cluster.json's layout (tests/golden/formats/cluster-file.v1.json).
CLUSTER_FILE_FORMAT = 1
# A local cluster shares one machine's disk: files are reserved (and CommitLog segments
# zero-filled) when created, so RocketMQ's 1 GiB segments and 420 MB index files would
# cost gigabytes per node before the first message. deploy/ keeps the full sizes.
LOCAL_STORE = {
    "commitlog_segment_bytes": 64 << 20,
    "index_slot_count": 500_000,
    "index_entry_count": 2_000_000,
}
# Node i gets base + i. The first node's remoting port is 9876, RocketMQ's NameServer
# port, so RocketMQ 4.x clients' usual namesrvAddr of 127.0.0.1:9876 reaches the cluster
# (every node answers NameServer requests).
DEFAULT_BASE_PORTS = {"grpc": 8081, "metrics": 5557, "ha": 10912, "raft": 8876, "remoting": 9876}
READY_TIMEOUT_S = 60.0
READY_PROBE_MIN_S = 2.0  # the shortest wait for one node's status while waiting for readiness
STOP_TIMEOUT_S = 30.0  # SIGTERM, then SIGKILL after this
# What a node process runs (``python -m``). The chaos checker's self-test substitutes a
# module that plants a bug around the same entry point (tests/support/planted_bug_node.py).
NODE_MODULE = "node"


class ClusterError(RuntimeError):
    """The cluster could not be started, found or stopped; the message says why."""


@dataclass(frozen=True)
class NodePlan:
    id: str
    group: str
    voter: bool
    grpc: str
    metrics: str
    ha: str
    raft: str
    data: str
    pid: int = 0
    netns: str = ""  # the network namespace it runs in; "" is the host's (loopback)
    # RocketMQ 4.x clients' port; "" in a cluster.json written before it existed (the
    # node then takes any free port).
    remoting: str = ""

    @property
    def role(self) -> str:
        return "voter" if self.voter else "replica"


@dataclass(frozen=True)
class ClusterPlan:
    directory: str
    secret: str
    nodes: tuple[NodePlan, ...]
    settings: dict  # extra node.toml sections: {"store": {...}, "replication": {...}, ...}
    # Ports chosen by ``plan_cluster`` and held since (``node/port_holds.py``), by
    # port, until ``start_node`` hands them to their node. Not saved: a loaded plan's
    # ports are held again when its nodes start.
    holds: dict[int, socket.socket] = field(default_factory=dict, compare=False, repr=False)

    @property
    def voters(self) -> list[str]:
        return [n.raft for n in self.nodes if n.voter]

    @property
    def namesrv_addr(self) -> str:
        """RocketMQ 4.x clients' ``namesrvAddr``: every node's remoting address."""
        return ";".join(n.remoting for n in self.nodes if n.remoting)

    def to_json(self) -> dict:
        return {
            "format": CLUSTER_FILE_FORMAT,
            "secret": self.secret,
            "settings": self.settings,
            "nodes": [{**asdict(n), "role": n.role} for n in self.nodes],
        }


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the OS reports free now, let go again: for servers that
    are not ferrymq nodes (a node's ports are held until it binds them: ``plan_cluster``,
    ``start_node``). The probes stay bound until all are chosen, so the OS cannot hand
    out one port twice."""
    probes = hold_free_ports("127.0.0.1", count)
    ports = [port_of(probe) for probe in probes]
    for probe in probes:
        probe.close()
    return ports


def voter_indexes(nodes: int, groups: int, voters: int) -> list[int]:
    """Which nodes vote: round-robin over the broker groups so that losing one group's
    machines does not take the routing majority with it."""
    per_group = nodes // groups
    order = [g * per_group + i for i in range(per_group) for g in range(groups)]
    return sorted(order[: min(voters, nodes)])


def plan_cluster(
    directory: str,
    nodes: int,
    groups: int = 1,
    voters: int = 3,
    auto_ports: bool = False,
    settings: dict | None = None,
    placements: list[tuple[str, str]] | None = None,
) -> ClusterPlan:
    """``placements``: a (network namespace, address) per node, so that links between
    nodes can be cut (the chaos suite's partitions); every node then uses the default
    ports on its own address. Without them every node is on the host's loopback."""
    if placements is not None and len(placements) != nodes:
        raise ClusterError(f"{len(placements)} placements for {nodes} nodes")
    if nodes < 1 or groups < 1 or nodes % groups:
        raise ClusterError(f"{nodes} nodes cannot form {groups} equal broker groups")
    if voters not in (1, 3, 5):
        raise ClusterError("--voters must be 1, 3 or 5")
    voters = 1 if nodes < 3 else min(voters, nodes if nodes % 2 else nodes - 1)
    chosen = set(voter_indexes(nodes, groups, voters))
    per_group = nodes // groups
    auto_ports = auto_ports and placements is None
    holds = hold_free_ports("127.0.0.1", nodes * len(DEFAULT_BASE_PORTS)) if auto_ports else []
    chosen_ports = iter(port_of(held) for held in holds)
    planned = []
    for i in range(nodes):
        netns, host = placements[i] if placements else ("", "127.0.0.1")
        ports = {
            name: (next(chosen_ports) if auto_ports else base + (0 if placements else i))
            for name, base in DEFAULT_BASE_PORTS.items()
        }
        planned.append(
            NodePlan(
                id=f"node-{i + 1}",
                group=f"group-{i // per_group + 1}",
                voter=i in chosen,
                data=os.path.join(os.path.abspath(directory), f"node-{i + 1}"),
                netns=netns,
                **{name: f"{host}:{port}" for name, port in ports.items()},
            )
        )
    settings = {section: dict(options) for section, options in (settings or {}).items()}
    settings["store"] = {**LOCAL_STORE, **settings.get("store", {})}
    return ClusterPlan(
        os.path.abspath(directory),
        secrets.token_hex(16),
        tuple(planned),
        settings,
        {port_of(held): held for held in holds},
    )


def load_plan(directory: str) -> ClusterPlan | None:
    path = os.path.join(directory, CLUSTER_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if raw.get("format", 1) > CLUSTER_FILE_FORMAT:  # 0.1.0 wrote none: format 1
        raise ClusterError(
            f"{path} is of format {raw['format']}, written by a newer ferrymq; this one reads "
            f"format {CLUSTER_FILE_FORMAT} and older"
        )
    nodes = tuple(NodePlan(**{k: v for k, v in n.items() if k != "role"}) for n in raw["nodes"])
    return ClusterPlan(os.path.abspath(directory), raw["secret"], nodes, raw.get("settings", {}))


def save_plan(plan: ClusterPlan) -> None:
    path = os.path.join(plan.directory, CLUSTER_FILE)
    temporary = path + ".tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as f:
        json.dump(plan.to_json(), f, indent=2)
    os.replace(temporary, path)


def node_toml(plan: ClusterPlan, node: NodePlan) -> str:
    def port(address: str) -> str:
        return address.rpartition(":")[2]

    voters = ", ".join(f'"{v}"' for v in plan.voters)
    lines = [
        "[node]",
        f'id = "{node.id}"',
        f'group = "{node.group}"',
        f'host = "{node.grpc.rpartition(":")[0]}"',
        f'data_dir = "{node.data}"',
        "",
        "[ports]",
        f"grpc = {port(node.grpc)}",
        f"metrics = {port(node.metrics)}",
        f"replication = {port(node.ha)}",
        f"raft = {port(node.raft)}",
        f"remoting = {port(node.remoting) if node.remoting else 0}",
        "",
        "[cluster]",
        f"voters = [{voters}]",
        f'secret = "{plan.secret}"',
    ]
    settings = {section: dict(options) for section, options in plan.settings.items()}
    # /metrics where cluster.json says it is (the node's own address; loopback by default).
    settings.setdefault("metrics", {}).setdefault("host", node.metrics.rpartition(":")[0])
    per_group = len(plan.nodes) // len({n.group for n in plan.nodes})
    if per_group == 1:
        # A group of one has no slave to wait for.
        settings.setdefault("replication", {}).setdefault("min_insync_replicas", 1)
    for key, value in sorted(settings.pop("cluster", {}).items()):
        lines.append(f"{key} = {json.dumps(value)}")
    for section, options in sorted(settings.items()):
        lines += ["", f"[{section}]"]
        for key, value in sorted(options.items()):
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def config_path(plan: ClusterPlan, node: NodePlan) -> str:
    return os.path.join(plan.directory, f"{node.id}.toml")


def log_path(plan: ClusterPlan, node: NodePlan) -> str:
    return os.path.join(plan.directory, f"{node.id}.log")


def is_running(node: NodePlan, plan: ClusterPlan) -> bool:
    """Whether ``node.pid`` is still this node's process (not a reused pid)."""
    if node.pid <= 0:
        return False
    try:
        with open(f"/proc/{node.pid}/cmdline", "rb") as f:
            command = f.read()
        with open(f"/proc/{node.pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    if state in (b"Z", b"X"):
        return False  # exited, not yet reaped
    if not command or config_path(plan, node).encode() in command.split(b"\0"):
        return True  # (empty while the kernel replaces the program image at exec)
    # Between fork and exec a child still shows its parent's command line; anything else
    # is another program that got the pid after the node died.
    with open("/proc/self/cmdline", "rb") as f:
        return command == f.read()


@dataclass(frozen=True)
class NodeRuntime:
    """The Python and the source tree a node process runs: this checkout's, or a recorded
    release's (``chaos/releases.py``, the rolling upgrade drill)."""

    python: str
    package_root: str


def this_runtime() -> NodeRuntime:
    return NodeRuntime(sys.executable, _package_root())


def start_node(
    plan: ClusterPlan,
    node: NodePlan,
    port_wait_s: float = RELEASE_WAIT_S,
    runtime: NodeRuntime | None = None,
) -> NodePlan:
    """Start ``node``'s process (detached) and return its plan with the pid. Its ports are
    held from here and handed to the process, which keeps them until its listeners have
    bound them; a port another process uses raises ``ClusterError`` at once (after
    ``port_wait_s`` for a node of this plan that was just killed to let go of it).
    ``runtime``: the code it runs (this checkout's by default)."""
    runtime = runtime or this_runtime()
    os.makedirs(node.data, exist_ok=True)
    path = config_path(plan, node)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(node_toml(plan, node))
    command = [runtime.python, "-m", NODE_MODULE, "--config", path]
    if node.netns:  # ``ip netns exec`` execs the node in place: the pid stays the node's
        command = ["ip", "netns", "exec", node.netns, *command]
    with open(log_path(plan, node), "ab") as log:
        # A node in its own network namespace binds there: the host's holds cannot cover it.
        holds = [] if node.netns else hold_node_ports(plan, node, port_wait_s)
        process = start_with_holds(
            command,
            holds,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # keeps running after ``cluster up`` returns
            env={**os.environ, "PYTHONPATH": runtime.package_root},
            # ``-m`` puts the working directory first on the path: a release's node must
            # not import this checkout's packages.
            cwd=None if runtime == this_runtime() else runtime.package_root,
        )
    return replace(node, pid=process.pid)


def node_ports(node: NodePlan) -> list[tuple[str, str, int]]:
    """(role, host, port) of each port ``node``'s plan names; a port an older plan did not
    have is left out (the node picks one)."""
    ports = []
    for name in DEFAULT_BASE_PORTS:
        address = getattr(node, name)
        if address:
            host, _, port_text = address.rpartition(":")
            ports.append((name, host, int(port_text)))
    return ports


def hold_node_ports(plan: ClusterPlan, node: NodePlan, wait_s: float) -> list[socket.socket]:
    """Holds on the ports of ``node``: the plan's own when it still has them, else
    taken now."""
    holds: list[socket.socket] = []
    try:
        for name, host, port in node_ports(node):
            held = plan.holds.pop(port, None)
            if held is None:
                try:
                    held = hold_port_when_free(host, port, wait_s)
                except OSError as error:
                    raise ClusterError(
                        f"{node.id} cannot start: its {name} port {host}:{port} is in use "
                        f"by another process ({error.strerror})"
                    ) from None
            holds.append(held)
    except BaseException:
        for held in holds:
            held.close()
        raise
    return holds


def kill_node(plan: ClusterPlan, node: NodePlan, wait_s: float = RELEASE_WAIT_S) -> None:
    """kill -9 of ``node``'s process, its ports then held in ``plan.holds`` for its
    restart (``start_node`` takes them from there). Why at once: from a node's death to
    its restart its ports are free, and any outgoing connection on the host may take one
    as its local port meanwhile (the kernel gives those from the range port-0 binds come
    from); the restart then failed, "in use by another process" (a test run's master-kill
    drill). Held within milliseconds of the death, not seconds later at the restart."""
    os.kill(node.pid, signal.SIGKILL)
    if node.netns:
        return  # its ports are in its own network namespace: nothing of the host's takes them
    for name, host, port in node_ports(node):
        try:
            held = hold_port_when_free(host, port, wait_s, poll_s=0.002)
        except OSError as error:
            raise ClusterError(
                f"{node.id} was killed, but its {name} port {host}:{port} could not be held "
                f"for its restart: {error.strerror}"
            ) from None
        previous = plan.holds.pop(port, None)
        if previous is not None:
            previous.close()
        plan.holds[port] = held


def _package_root() -> str:
    """The directory holding this checkout's packages (``ferrymq``, ``node``, ``store``...),
    as a release's runtime names its ``src``: the ``PYTHONPATH`` of the nodes it starts."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cluster_up(
    directory: str,
    nodes: int = 3,
    groups: int = 1,
    voters: int = 3,
    auto_ports: bool = False,
    settings: dict | None = None,
    timeout_s: float = READY_TIMEOUT_S,
    placements: list[tuple[str, str]] | None = None,
) -> ClusterPlan:
    """Start (or restart) the cluster in ``directory`` and wait until it is ready."""
    os.makedirs(directory, exist_ok=True)
    plan = load_plan(directory)
    if plan is None:
        plan = plan_cluster(directory, nodes, groups, voters, auto_ports, settings, placements)
    elif len(plan.nodes) != nodes and nodes != 0:
        raise ClusterError(
            f"{directory} holds a {len(plan.nodes)}-node cluster; use that size or a new DIR"
        )
    running_before = {n.id for n in plan.nodes if is_running(n, plan)}
    started = tuple(n if n.id in running_before else start_node(plan, n) for n in plan.nodes)
    plan = replace(plan, nodes=started)
    save_plan(plan)
    try:
        wait_ready(plan, timeout_s)
    except BaseException:
        # Not left half running (a fixture that fails here has no teardown; Ctrl-C of
        # ``make up``): the nodes this call started are stopped, their logs kept.
        ours = [n for n in plan.nodes if n.id not in running_before]
        stop_processes([n.pid for n in ours], STOP_TIMEOUT_S)
        kept = tuple(n if n.id in running_before else replace(n, pid=0) for n in plan.nodes)
        save_plan(replace(plan, nodes=kept))
        raise
    return plan


def bootstrap_admin(plan: ClusterPlan):
    """The ``ClientSecurity`` of the bootstrap admin a cluster with auth on names in its
    settings (its status needs valid credentials then); None with auth off."""
    from ferrymq.client import ClientSecurity

    security = plan.settings.get("security", {})
    if not security.get("auth") or not security.get("admin_access_key"):
        return None
    return ClientSecurity(security["admin_access_key"], security.get("admin_secret_key", ""))


def wait_ready(plan: ClusterPlan, timeout_s: float) -> None:
    """Until every node answers ClusterStatus and sees every node registered and alive,
    and every broker group has a master with all its members in sync."""
    from ferrymq.client import Admin, FerryError

    deadline = time.monotonic() + timeout_s
    security = bootstrap_admin(plan)
    expected = {n.id for n in plan.nodes}
    groups = {n.group for n in plan.nodes}
    pending = set(expected)
    while pending:
        for node in plan.nodes:
            if not is_running(node, plan):
                raise ClusterError(
                    f"{node.id} exited during start; see {log_path(plan, node)}:\n"
                    + tail(log_path(plan, node))
                )
        for node in sorted(pending):
            address = next(n.grpc for n in plan.nodes if n.id == node)
            # A contended node may take seconds to answer: a probe may wait as long as the
            # deadline leaves (a refused connection still fails at once).
            probe_timeout_s = max(READY_PROBE_MIN_S, deadline - time.monotonic())
            try:
                with Admin(address, timeout_s=probe_timeout_s, security=security) as admin:
                    status = admin.cluster_status()
            except FerryError:
                continue
            alive = {n.id for n in status.nodes if n.alive}
            members = {g: {n.id for n in status.nodes if n.broker_group == g} for g in groups}
            in_sync = all(
                g.master and set(g.in_sync) == members.get(g.name, set())
                for g in status.broker_groups
            )
            if expected <= alive and status.raft_leader and in_sync:
                pending.discard(node)
        if time.monotonic() > deadline:
            raise ClusterError(
                f"cluster not ready after {timeout_s:.0f} s; waiting for {sorted(pending)}"
            )
        if pending:
            time.sleep(0.1)


def on_first_answering(addresses: list[str], call, timeout_s: float = 3.0):
    """``call(admin)`` on the first node of ``addresses`` that answers; the last node's
    ``FerryError`` when none does."""
    from ferrymq.client import Admin, FerryError

    last_error: FerryError | None = None
    for address in addresses:
        try:
            with Admin(address, timeout_s=timeout_s) as admin:
                return call(admin)
        except FerryError as error:
            last_error = error
    assert last_error is not None, "no address to ask"
    raise last_error


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def cluster_down(directory: str, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """SIGTERM every running node, wait for them (SIGKILL after ``timeout_s``); the ids
    of the nodes stopped. Node processes of this cluster the plan does not name (started
    by a restart that was interrupted before it saved the plan) are stopped too."""
    plan = load_plan(directory)
    if plan is None:
        raise ClusterError(f"no {CLUSTER_FILE} in {directory}")
    running = [n for n in plan.nodes if is_running(n, plan)]
    stop_processes([n.pid for n in running] + unnamed_nodes(plan), timeout_s)
    save_plan(replace(plan, nodes=tuple(replace(n, pid=0) for n in plan.nodes)))
    return [n.id for n in running]


def stop_processes(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each node process of ``pids`` and wait for it, SIGKILL after ``timeout_s``."""
    for pid in pids:
        signal_node(pid, signal.SIGCONT)  # a paused node (chaos, a test) must run to stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def unnamed_nodes(plan: ClusterPlan) -> list[int]:
    """Processes running one of this plan's node configs under a pid the plan does not
    name (Linux ``/proc``)."""
    configs = {config_path(plan, n).encode() for n in plan.nodes}
    named = {n.pid for n in plan.nodes}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in named or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                arguments = f.read().split(b"\0")
        except OSError:
            continue
        if configs.intersection(arguments):
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not exited, not a zombie awaiting its parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False
