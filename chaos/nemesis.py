"""Faults injected into a running local cluster, each recorded as a window in the history.

Built: ``kill`` (SIGKILL; target master, slave, Raft leader or random node, then restart
after ``down_s``), ``pause`` (SIGSTOP of the master, its routing host too, longer than
its lease, then SIGCONT), ``partition`` (``chaos.network``: the master cut off from its
peers while clients still reach it; a slave cut off from its peers (a SYNC master must
drop it from the in-sync set, not wait for it); a random node cut off from its peers,
splitting a minority; the clients cut off from the master), each for ``pause_s``, then
healed,
``restart-all`` (SIGKILL of every node at once, then restart) and ``power-loss``
(``chaos.power``: the master, or every node at once, killed and stripped of every byte
it had not fsynced, then restarted); and the
overloads (``chaos.overload``), each for ``overload_s``, three leases: ``cpu-starve-master``
(the master's process held to a quarter of a core), ``cpu-starve-all`` (every node held to
0.4 of a core), ``busy-host`` (two spinning processes per core beside the cluster),
``slow-disk-master`` and ``slow-disk-all`` (the node's own reads and writes, its fsyncs
among them, throttled to 40 operations and 2 MiB a second). An overloaded master is alive:
deposing it is a spurious failover (``chaos.elections``).

A ``Nemesis`` is driven by one thread (the runner's); it owns the cluster plan.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import replace

from chaos.history import Fault, History
from chaos.network import NodeNetwork
from chaos.overload import Overloads
from chaos.power import discard_unsynced
from chaos.workload import LogCopies
from ferrymq.client import Admin, FerryError
from ferrymq.launcher.cluster import ClusterPlan, NodePlan, is_running, save_plan, start_node
from ferrymq.launcher.processes import signal_node

PARTITIONS = ("partition-master", "partition-slave", "partition-random", "partition-clients")
POWER_LOSSES = ("power-loss-master", "power-loss-all")
KILLS = ("kill-master", "kill-slave", "kill-leader", "kill-random")
OVERLOADS = (
    "cpu-starve-master",
    "cpu-starve-all",
    "busy-host",
    "slow-disk-master",
    "slow-disk-all",
)
KINDS = (*KILLS, "pause", *PARTITIONS, "restart-all", *POWER_LOSSES, *OVERLOADS)
ALIASES = {
    "kill": KILLS,
    "partition": PARTITIONS,
    "power-loss": POWER_LOSSES,
    "overload": OVERLOADS,
}
# Faults aimed at the group's master (a random node when none is known).
MASTER_FAULTS = (
    "kill-master",
    "pause",
    "partition-master",
    "partition-clients",
    "power-loss-master",
    "cpu-starve-master",
    "slow-disk-master",
)
# Faults that may depose the master they hit (it is dead, stopped or cut off); a master
# deposed under any other fault, or under none, was deposed while alive and connected.
DEPOSING = (*KILLS, "pause", "partition-master", "partition-random", "restart-all", *POWER_LOSSES)
# Faults that start the nodes they hit again: such a node is not a live master until it
# is ready (its process starts, recovers its store, waits for routing, then binds its
# ports), so an election excused by the fault may come until the cluster is ready.
RESTARTS = (*KILLS, "restart-all", *POWER_LOSSES)
LEASE_S = 3.0
STARVED_CORES = 0.25  # cpu-starve-master
STARVED_CORES_EACH = 0.4  # cpu-starve-all
SLOW_DISK_IOPS = 40
SLOW_DISK_BYTES_PER_S = 2 << 20


def kind_for(faults: list[str], turn: int) -> str:
    """The fault of turn ``turn``: the named faults take turns, and a family (``kill``,
    ``partition``, ``power-loss``) names its members in turn, so a long run injects as
    many faults of each named fault whatever the family's size."""
    name = faults[turn % len(faults)]
    members = ALIASES.get(name, (name,))
    return members[(turn // len(faults)) % len(members)]


def expand(faults: list[str]) -> list[str]:
    """``kill,pause`` -> every concrete fault kind they name (checked)."""
    kinds = []
    for name in faults:
        if name not in KINDS and name not in ALIASES:
            known = ", ".join((*ALIASES, *KINDS))
            raise ValueError(f"unknown fault {name!r}; known: {known}")
        kinds.extend(ALIASES.get(name, (name,)))
    return kinds


class Nemesis:
    def __init__(
        self,
        plan: ClusterPlan,
        history: History,
        t0: float,
        logs: LogCopies | None = None,
        down_s: float = 2.0,
        pause_s: float = LEASE_S * 1.5,
        seed: int = 0,
        network: NodeNetwork | None = None,
        overloads: Overloads | None = None,
        overload_s: float = LEASE_S * 3,
    ) -> None:
        self.plan = plan
        self.history = history
        self.t0 = t0
        # Copies of stopped nodes' logs: a deposed master's (what it had acknowledged) and
        # every node's around a power cut, read by ``settle`` once the cluster is back.
        self.logs = logs
        self._unread: list[Callable[[], None]] = []
        self.down_s = down_s
        self.pause_s = pause_s
        self.random = random.Random(seed)
        self.network = network  # needed by the partitions
        self.overloads = overloads  # needed by the overload faults
        self.overload_s = overload_s

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ---- who is who --------------------------------------------------------------------
    def status(self):
        for node in self.plan.nodes:
            if not is_running(node, self.plan):
                continue
            try:
                with Admin(node.grpc, timeout_s=2) as admin:
                    return admin.cluster_status()
            except FerryError:
                continue
        return None

    def node(self, node_id: str) -> NodePlan:
        return next(n for n in self.plan.nodes if n.id == node_id)

    def master(self) -> NodePlan | None:
        return self.master_in(self.status())

    def master_in(self, status) -> NodePlan | None:
        if status is None or not status.broker_groups or not status.broker_groups[0].master:
            return None
        return self.node(status.broker_groups[0].master)

    def leader(self) -> NodePlan | None:
        status = self.status()
        if status is None:
            return None
        return next((n for n in self.plan.nodes if n.raft == status.raft_leader), None)

    def target(self, kind: str) -> tuple[NodePlan, str]:
        master = self.master()
        if kind in MASTER_FAULTS:
            return master or self.random.choice(self.plan.nodes), "master"
        if kind in ("kill-slave", "partition-slave"):
            slaves = [n for n in self.plan.nodes if master is None or n.id != master.id]
            return self.random.choice(slaves), "slave"
        if kind == "kill-leader":
            leader = self.leader() or self.random.choice(self.plan.nodes)
            return leader, "leader+master" if master and leader.id == master.id else "leader"
        node = self.random.choice(self.plan.nodes)
        return node, "random (master)" if master and node.id == master.id else "random"

    # ---- faults ------------------------------------------------------------------------
    def inject(self, kind: str) -> Fault:
        self.restart_crashed()
        if kind in ("restart-all", "power-loss-all"):
            return self.restart_all(power_loss=kind == "power-loss-all")
        node, role = self.target(kind)
        was_master = (self.master() or node).id == node.id
        if kind in PARTITIONS:
            return self.partition(kind, node, role, was_master)
        if kind in OVERLOADS:
            return self.overload(kind, node, role)
        if kind == "pause":
            signal_node(node.pid, signal.SIGSTOP)  # its routing host too: a stalled machine
            fault = self.history.fault(Fault(kind, [node.id], role, self.now()))
            if was_master:
                self.deposed(node)
            time.sleep(self.pause_s)  # the fault's duration, not a wait for a condition
            signal_node(node.pid, signal.SIGCONT)
        else:
            self.kill(node)
            # The window starts when the node is gone: a send invoked before may still
            # have been acknowledged by it.
            fault = self.history.fault(Fault(kind, [node.id], role, self.now()))
            if was_master:
                self.deposed(node)  # what it had acknowledged, before the power cut
            if kind == "power-loss-master":
                fault.note = (
                    f"{discard_unsynced(node.data)} written bytes past the last fsyncs lost"
                )
            time.sleep(self.down_s)
            self.restart(node)
        fault.end_s = self.now()
        return fault

    def partition(self, kind: str, node: NodePlan, role: str, was_master: bool) -> Fault:
        if self.network is None:
            raise ValueError(f"{kind} needs the nodes in network namespaces (chaos.network)")
        index = self.plan.nodes.index(node)
        if kind == "partition-clients":
            self.network.cut_clients(index)
        else:
            self.network.isolate(index)
        fault = self.history.fault(Fault(kind, [node.id], role, self.now()))
        time.sleep(self.pause_s)  # the fault's duration, not a wait for a condition
        if was_master and kind != "partition-clients":
            # Before healing: the isolated master, fenced by now, still holds what it
            # took after its slaves lost it; rejoining will cut that.
            self.deposed(node)
        self.network.heal()
        fault.end_s = self.now()
        return fault

    def overload(self, kind: str, node: NodePlan, role: str) -> Fault:
        """Starve, crowd or slow down for ``overload_s``, then lift it. Nothing dies."""
        if self.overloads is None:
            raise ValueError(f"{kind} needs chaos.overload.Overloads (root and cgroup v1)")
        everyone = kind.endswith("-all") or kind == "busy-host"
        targets = list(self.plan.nodes) if everyone else [node]
        if kind == "busy-host":
            self.overloads.busy_host(2 * (os.cpu_count() or 1))
        for target in targets if kind != "busy-host" else []:
            if kind.startswith("cpu-starve"):
                cores = STARVED_CORES_EACH if everyone else STARVED_CORES
                self.overloads.starve_cpu(target.id, target.pid, cores)
            else:
                self.overloads.slow_disk(
                    target.id, target.pid, target.data, SLOW_DISK_IOPS, SLOW_DISK_BYTES_PER_S
                )
        fault = self.history.fault(
            Fault(kind, [t.id for t in targets], "all" if everyone else role, self.now())
        )
        try:
            time.sleep(self.overload_s)  # the fault's duration, not a wait for a condition
        finally:
            self.overloads.clear()
        fault.end_s = self.now()
        return fault

    def restart_all(self, power_loss: bool = False) -> Fault:
        status = self.status()
        master = self.master_in(status)
        in_sync = set(status.broker_groups[0].in_sync) if status and status.broker_groups else set()
        for node in self.plan.nodes:
            os.kill(node.pid, signal.SIGKILL)
        for node in self.plan.nodes:
            self.wait_dead(node)
        kind = "power-loss-all" if power_loss else "restart-all"
        fault = self.history.fault(Fault(kind, [n.id for n in self.plan.nodes], "all", self.now()))
        if master is not None:
            self.deposed(master)
        if power_loss:
            electable = [n for n in self.plan.nodes if n.id in in_sync] or self.plan.nodes
            self.cut_power_everywhere(fault, electable)
        for node in list(self.plan.nodes):
            self.restart(node)
        fault.end_s = self.now()
        return fault

    def cut_power_everywhere(self, fault: Fault, electable: list[NodePlan]) -> None:
        """Strip every (dead) node of its unsynced bytes, and record (in ``settle``) which
        bodies one of the ``electable`` nodes (the in-sync set at the cut) no longer
        holds: under ASYNC_FLUSH they may be lost, since that node may resume as master
        and the others then cut their longer tails to its log (RocketMQ keeps a restarted
        master too)."""
        if self.logs is None:
            raise ValueError("power-loss-all needs copies of the nodes' logs")
        logs = self.logs
        before = [(n.id, logs.take(n.id, n.data)) for n in self.plan.nodes]
        discarded = sum(discard_unsynced(n.data) for n in self.plan.nodes)
        after = [(n.id, logs.take(n.id, n.data)) for n in self.plan.nodes]
        electable_ids = {n.id for n in electable}

        def account() -> None:
            held_before = set().union(*(logs.read(i, copy).positions for i, copy in before))
            held_after = {i: set(logs.read(i, copy).positions) for i, copy in after}
            held_by_every_electable = set.intersection(
                *(held_after[i] for i in held_after if i in electable_ids)
            )
            gone_everywhere = held_before - set().union(*held_after.values())
            may_be_lost = held_before - held_by_every_electable
            self.history.lost_to_power.extend(sorted(may_be_lost))
            note = (
                f"{discarded} written bytes past the last fsyncs lost, "
                f"{len(may_be_lost)} bodies gone from an in-sync node, "
                f"{len(gone_everywhere)} from every node"
            )
            fault.note = f"{note}; {fault.note}" if fault.note else note

        self._unread.append(account)

    def deposed(self, node: NodePlan) -> None:
        """``node``, a master, is dead, stopped or cut off: a copy of its log now, and (in
        ``settle``) what it held in the history, for the checker."""
        if self.logs is None:
            return
        logs, copy = self.logs, self.logs.take(node.id, node.data)
        self._unread.append(lambda: self.history.snapshots.append(logs.read(node.id, copy)))

    def settle(self) -> None:
        """Read the log copies the faults took. The runner calls it once the cluster is
        back after a fault: reading a log costs seconds of CPU, which counted in the
        recovery of a restart-all when the faults read the logs before restarting."""
        while self._unread:
            self._unread.pop(0)()

    def restart_crashed(self) -> None:
        """A node that exited without a fault's doing crashed: a finding. It is restarted
        so that the run goes on."""
        for node in self.plan.nodes:
            if not is_running(node, self.plan):
                self.history.crashes.append(f"{node.id} found exited at {self.now():.1f} s")
                self.restart(node)

    def kill(self, node: NodePlan) -> None:
        os.kill(node.pid, signal.SIGKILL)
        self.wait_dead(node)

    def wait_dead(self, node: NodePlan, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while is_running(node, self.plan):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.id} did not die after SIGKILL")
            time.sleep(0.02)

    def restart(self, node: NodePlan) -> None:
        started = start_node(self.plan, self.node(node.id))
        self.plan = replace(
            self.plan,
            nodes=tuple(started if n.id == node.id else n for n in self.plan.nodes),
        )
        save_plan(self.plan)

    def heal(self) -> None:
        """Every node running, awake, connected and unhindered."""
        if self.network is not None:
            self.network.heal()
        if self.overloads is not None:
            self.overloads.clear()
        for node in self.plan.nodes:
            if is_running(node, self.plan):
                signal_node(node.pid, signal.SIGCONT)
            else:
                self.restart(node)
