"""The controller's failover decisions, on a routing state driven by hand: a fake
replica that is always the leader and applies each submitted command at once, and
injected clocks, so every decision is deterministic."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from types import SimpleNamespace

from routing.commands import (
    AlterInSync,
    ElectMaster,
    MarkNodeDown,
    NodeHeartbeat,
    RegisterNode,
    ReportMasterFound,
    ReportMasterLost,
)
from routing.controller import Controller, port_refuses_connections
from routing.state import RoutingState


class LeaderReplica:
    def __init__(self, state: RoutingState) -> None:
        self.state = state
        self.submitted: list[object] = []
        self.quorum = True

    def leads_with_quorum(self) -> bool:
        return self.quorum

    def read(self, reader):
        return reader(self.state)

    async def submit(self, command: object, timeout_s: float = 5.0):
        self.submitted.append(command)
        return self.state.apply(command)


class VoterReplica(LeaderReplica):
    """The leader of three voters ``r1``-``r3``, recording leadership handovers."""

    def __init__(self, state: RoutingState) -> None:
        super().__init__(state)
        self.connected = {"r2": True, "r3": True}
        self.handed: list[str] = []

    def status(self):
        return SimpleNamespace(voters_connected=tuple(self.connected.items()))

    def hand_leadership_to(self, voter: str) -> None:
        self.handed.append(voter)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def three_nodes() -> RoutingState:
    state = RoutingState()
    for node_id in ("n1", "n2", "n3"):
        assert state.apply(RegisterNode(node_id, "g1", f"{node_id}:1", wall_ms=0)).ok
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2", "n3"}), 1)).ok
    return state


def heartbeat(state: RoutingState, clock: Clock, *nodes: str) -> None:
    for node_id in nodes:
        assert state.apply(NodeHeartbeat(node_id, 100, int(clock.now * 1000))).ok


def test_time_without_a_quorum_is_nobodys_silence():
    """Both slaves were killed: the leader (the master's node) lost its majority, and
    nobody's heartbeat could commit. The quorum came back with one slave, and the
    controller at once marked the live master down for the 3 s it had not heard it and
    elected the slave (tests/cluster/test_replication.py saw it under load)."""
    state = three_nodes()
    clock = Clock()
    replica = LeaderReplica(state)
    controller = Controller(replica, lease_s=3.0, clock=clock, wall_clock=clock)
    heartbeat(state, clock, "n1", "n2", "n3")
    asyncio.run(controller.tick())
    replica.quorum = False
    for _ in range(10):  # 4 s of ticks without a majority: nothing commits
        clock.now += 0.4
        asyncio.run(controller.tick())
    replica.quorum = True
    asyncio.run(controller.tick())
    clock.now += 0.4
    heartbeat(state, clock, "n1", "n2")
    asyncio.run(controller.tick())
    assert not any(isinstance(c, MarkNodeDown) for c in replica.submitted)
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n1", 1)
    clock.now += 3.5  # n3 stays silent a whole lease once the majority is back
    heartbeat(state, clock, "n1", "n2")
    asyncio.run(controller.tick())
    assert [c.node_id for c in replica.submitted if isinstance(c, MarkNodeDown)] == ["n3"]


def test_a_master_elected_a_moment_ago_is_not_deposed_by_early_lost_link_reports(caplog):
    """After a failover the remaining slave may report the new master lost before it has
    dialled it, and the new master's last committed heartbeat may be older than the
    election (routing had no leader meanwhile). One tick later that must not elect yet
    another master: the first one may already have acknowledged writes. Every election
    is logged with what deposed the master."""
    caplog.set_level("WARNING", logger="ferrymq.controller")
    state = three_nodes()
    clock = Clock()
    replica = LeaderReplica(state)
    controller = Controller(replica, lease_s=3.0, clock=clock, wall_clock=clock)
    heartbeat(state, clock, "n1", "n2", "n3")
    asyncio.run(controller.tick())  # the leader's first look: every clock starts now

    # n1 (the master) dies: both slaves lose their link. Routing has no leader for a
    # while, so n2's heartbeats do not commit (n3's last one does).
    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
    clock.now += 2.2  # two heartbeat intervals (SILENT_INTERVALS)
    heartbeat(state, clock, "n3")
    asyncio.run(controller.tick())
    group = state.broker_groups["g1"]
    assert (group.epoch, group.master) == (2, "n2")  # equal offsets: the first name
    new_master, other = "n2", "n3"

    # The other slave reports the new master lost at once (it has not connected yet),
    # and the new master's heartbeats have not committed since before the election.
    assert state.apply(ReportMasterLost("g1", other, 2, end_offset=100)).ok
    for _ in range(3):  # three controller ticks, 0.3 s apart
        clock.now += 0.3
        heartbeat(state, clock, other)
        asyncio.run(controller.tick())
        assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == (
            new_master,
            2,
        )

    # A master that really is gone is still replaced: no heartbeat for a lease.
    clock.now += 0.5
    heartbeat(state, clock, other)
    asyncio.run(controller.tick())
    assert state.broker_groups["g1"].epoch == 3
    assert state.broker_groups["g1"].master == other
    elections = [r.getMessage() for r in caplog.records if "electing" in r.getMessage()]
    assert elections == [
        "electing n2 master of g1 (epoch 1 -> 2): in-sync slaves ['n2', 'n3'] lost their "
        "link to n1, which sent no heartbeat for 2.2 s",
        "electing n3 master of g1 (epoch 2 -> 3): master n2 is down (missed its lease)",
    ]


def test_a_withdrawn_lost_report_keeps_a_master_whose_heartbeats_pause():
    """A slave that reported the new master lost before it could dial it, then linked to
    it, withdraws the report (``ReportMasterFound``): a later pause in the master's
    heartbeats (routing busy under load) must not depose a master its slaves follow. In a
    long ASYNC chaos run the kept report did, 5 s into the term, and the writes the
    master had acknowledged meanwhile were cut."""
    state = three_nodes()
    clock = Clock()
    replica = LeaderReplica(state)
    controller = Controller(replica, lease_s=3.0, clock=clock, wall_clock=clock)
    heartbeat(state, clock, "n1", "n2", "n3")
    asyncio.run(controller.tick())

    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
    # Found again with the wrong epoch: refused, nothing changes.
    stale = state.apply(ReportMasterFound("g1", "n2", 7))
    assert not stale.ok and stale.reason == "STALE"
    assert state.broker_groups["g1"].lost_by == {"n2", "n3"}
    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterFound("g1", reporter, 1)).ok
    assert state.broker_groups["g1"].lost_by == frozenset()
    assert state.apply(ReportMasterFound("g1", "n2", 1)).ok  # again: no change

    # The master's heartbeats stop committing for longer than the failover interval but
    # less than its lease; the slaves' go on. It stays master.
    for _ in range(8):
        clock.now += 0.3
        heartbeat(state, clock, "n2", "n3")
        asyncio.run(controller.tick())
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n1", 1)

    # Reported lost again by both (the link really broke): replaced as before.
    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
    clock.now += 0.3
    heartbeat(state, clock, "n2", "n3")
    asyncio.run(controller.tick())
    assert state.broker_groups["g1"].epoch == 2


def test_a_node_whose_log_was_cut_is_not_elected_while_an_in_sync_replica_is_healthy():
    """n2's recovery cut its log after an invalid record (``damaged_log`` in its
    heartbeats) and it has not refilled the range yet; its reported offset is the highest,
    yet the controller elects n3, whose log is whole. Refilled, n2 is eligible again; and
    with no healthy candidate left, a damaged one is still better than no master."""
    state = three_nodes()
    clock = Clock()
    controller = Controller(LeaderReplica(state), lease_s=3.0, clock=clock, wall_clock=clock)

    def beat(node_id: str, offset: int, damaged: bool = False) -> None:
        assert state.apply(
            NodeHeartbeat(node_id, offset, int(clock.now * 1000), damaged_log=damaged)
        ).ok

    def master_dies(master: str, slaves: list[str], epoch: int, offsets: dict) -> None:
        for slave in slaves:
            assert state.apply(ReportMasterLost("g1", slave, epoch, end_offset=100)).ok
        for _ in range(10):  # the master is silent; the slaves heartbeat on
            clock.now += 0.3
            for slave in slaves:
                beat(slave, *offsets[slave])
            asyncio.run(controller.tick())
            if state.broker_groups["g1"].epoch != epoch:
                return

    beat("n1", 900)
    beat("n2", 800, damaged=True)
    beat("n3", 100)
    asyncio.run(controller.tick())
    assert state.members["n2"].damaged_log
    master_dies("n1", ["n2", "n3"], 1, {"n2": (800, True), "n3": (100,)})
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch) == ("n3", 2)

    # n2 refills from n3 and says so; n3 dies: n2 is the one left, and elected.
    beat("n2", 100)
    assert not state.members["n2"].damaged_log
    master_dies("n3", ["n2"], 2, {"n2": (100,)})
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n2", 3)

    # Only damaged candidates: one of them still becomes master.
    state = three_nodes()
    controller = Controller(LeaderReplica(state), lease_s=3.0, clock=clock, wall_clock=clock)
    beat("n1", 900)
    beat("n2", 800, damaged=True)
    beat("n3", 700, damaged=True)
    asyncio.run(controller.tick())
    master_dies("n1", ["n2", "n3"], 1, {"n2": (800, True), "n3": (700, True)})
    assert state.broker_groups["g1"].master == "n2"


def test_an_election_or_switchover_to_a_damaged_log_is_refused_while_a_whole_one_exists():
    state = three_nodes()
    assert state.apply(NodeHeartbeat("n2", 800, 1, damaged_log=True)).ok
    refused = state.apply(ElectMaster("g1", "n2", 1, "planned switchover"))
    assert not refused.ok and refused.reason == "DAMAGED_LOG"
    assert "n2's recovery cut its log" in refused.detail and "['n3']" in refused.detail
    assert state.broker_groups["g1"].master == "n1"
    assert state.apply(ElectMaster("g1", "n3", 1, "planned switchover")).ok
    # n3 is the master now: n2 is the only other in-sync member, and may be elected.
    assert state.apply(ElectMaster("g1", "n2", 2, "planned switchover")).ok


def test_a_damaged_master_never_drops_a_whole_member_from_its_in_sync_set():
    """After a restart of the whole group a damaged master registered alone once shrank
    its in-sync set to itself before the whole members came back (they were not linked
    yet): none of them could take the group over, and each cut its whole log to the
    damaged one (tests/cluster/test_replication.py saw it under load)."""
    state = three_nodes()
    late = RegisterNode("n1", "g1", "n1:1", wall_ms=60_000, lease_ms=3000, damaged_log=True)
    assert state.apply(late).ok
    group = state.broker_groups["g1"]
    assert group.master == "n1" and group.in_sync == frozenset({"n1", "n2", "n3"})
    shrink = AlterInSync("g1", "n1", group.epoch, frozenset({"n1"}), group.in_sync_epoch)
    assert state.apply(shrink).reason == "DAMAGED_LOG"
    assert state.broker_groups["g1"].in_sync == frozenset({"n1", "n2", "n3"})
    assert state.apply(NodeHeartbeat("n2", 0, 60_050, damaged_log=True)).ok
    drop_n2 = replace(shrink, in_sync=frozenset({"n1", "n3"}))
    assert state.apply(drop_n2).ok  # a damaged member may go: it holds nothing lost
    assert state.apply(RegisterNode("n3", "g1", "n3:1", wall_ms=60_100, lease_ms=3000)).ok
    assert state.broker_groups["g1"].master == "n3"
    # A whole master drops lagging members as always.
    state = three_nodes()
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1"}), 2)).ok


def test_a_damaged_master_hands_its_group_to_a_healthy_in_sync_member():
    """A master whose recovery cut its log registers again: the in-sync member heard
    within the lease with a whole log takes over, even with a shorter log than a damaged
    one. When every node restarted (nobody heard), it stays master for now; the first
    healthy in-sync member that registers takes the group over at once, before it would
    follow the damaged log and cut its own longer one to it."""
    state = three_nodes()
    assert state.apply(NodeHeartbeat("n2", 900, 10_000, damaged_log=True)).ok
    assert state.apply(NodeHeartbeat("n3", 700, 10_500)).ok
    restart = RegisterNode("n1", "g1", "n1:1", max_offset=0, wall_ms=11_000, lease_ms=3000)
    assert state.apply(replace(restart, damaged_log=True)).ok
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch) == ("n3", 2)
    assert state.members["n1"].damaged_log

    # Every node restarted: n1 (damaged) registers first and nobody was heard lately.
    state = three_nodes()
    late = RegisterNode("n1", "g1", "n1:1", wall_ms=60_000, lease_ms=3000, damaged_log=True)
    assert state.apply(late).ok
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n1", 2)
    # n2, damaged too, changes nothing; n3, whole and in sync, takes over.
    assert state.apply(replace(late, node_id="n2", grpc_address="n2:1")).ok
    assert state.broker_groups["g1"].master == "n1"
    assert state.apply(RegisterNode("n3", "g1", "n3:1", wall_ms=60_100, lease_ms=3000)).ok
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch) == ("n3", 3)
    assert group.in_sync == frozenset({"n2", "n3"})
    # A healthy member outside the in-sync set takes nothing over.
    state = three_nodes()
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2"}), 2)).ok
    assert state.apply(late).ok
    assert state.apply(RegisterNode("n3", "g1", "n3:1", wall_ms=60_100, lease_ms=3000)).ok
    assert state.broker_groups["g1"].master == "n1"


def voters_three_nodes() -> RoutingState:
    """``three_nodes`` whose members are the voters r1-r3 (n1, the master, on r1)."""
    state = RoutingState()
    for node_id, voter in (("n1", "r1"), ("n2", "r2"), ("n3", "r3")):
        command = RegisterNode(node_id, "g1", f"{node_id}:1", wall_ms=0, raft_address=voter)
        assert state.apply(command).ok
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2", "n3"}), 1)).ok
    return state


def test_a_leader_on_a_masters_node_hands_routing_leadership_to_a_voter_that_is_no_master():
    """A crash of the master's node must not also take routing's leader: failing over such a
    master waited for a Raft election first (the slow half of the failover drills).
    The leader asks a voter that is no master, at most once a heartbeat interval, and only
    while the cluster is whole: during a failure, a handover would move leadership once
    more under the commands that handle it. A leader that is no master keeps leading."""
    state = voters_three_nodes()
    clock = Clock()
    replica = VoterReplica(state)
    controller = Controller(replica, lease_s=3.0, raft_address="r1", clock=clock, wall_clock=clock)
    replica.connected["r2"] = False
    asyncio.run(controller.tick())
    assert replica.handed == []  # r2 unreachable: not while the cluster is not whole
    replica.connected["r2"] = True
    assert state.apply(MarkNodeDown("n3", state.members["n3"].heartbeats)).ok
    clock.now += 0.1
    asyncio.run(controller.tick())
    assert replica.handed == []  # n3 down
    heartbeat(state, clock, "n3")
    assert state.apply(ReportMasterLost("g1", "n3", 1, end_offset=100)).ok
    clock.now += 0.1
    asyncio.run(controller.tick())
    assert replica.handed == []  # a slave reports the master lost
    assert state.apply(ReportMasterFound("g1", "n3", 1)).ok
    clock.now += 0.1
    asyncio.run(controller.tick())
    assert replica.handed == ["r2"]  # whole again
    clock.now += 0.5
    asyncio.run(controller.tick())
    assert replica.handed == ["r2"]  # asked a moment ago: pysyncobj's answer is pending
    clock.now += 0.6
    asyncio.run(controller.tick())
    assert replica.handed == ["r2", "r2"]  # still leading a second later: ask again

    # A second broker group whose master is on r2, the rest on r3: r3 is asked.
    assert state.apply(RegisterNode("m2", "g2", "m2:1", wall_ms=0, raft_address="r2")).ok
    clock.now += 2
    asyncio.run(controller.tick())
    assert replica.handed == ["r2", "r2", "r3"]

    # The leader of routing on a slave's node keeps leading.
    follower_side = VoterReplica(voters_three_nodes())
    on_slave = Controller(
        follower_side, lease_s=3.0, raft_address="r2", clock=clock, wall_clock=clock
    )
    asyncio.run(on_slave.tick())
    assert follower_side.handed == []


def test_an_election_among_equal_logs_prefers_a_candidate_off_the_leaders_node():
    """n1 (the master) dies; n2 and n3 have the same log. The leader runs on n2's node:
    it elects n3, so that routing's leader and the new master do not share a node (and no
    leadership handover follows the election)."""
    state = voters_three_nodes()
    clock = Clock()
    replica = VoterReplica(state)
    controller = Controller(replica, lease_s=3.0, raft_address="r2", clock=clock, wall_clock=clock)
    heartbeat(state, clock, "n1", "n2", "n3")
    asyncio.run(controller.tick())
    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
    clock.now += 2.2
    heartbeat(state, clock, "n2", "n3")
    asyncio.run(controller.tick())
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n3", 2)
    assert replica.handed == []

    # A longer log still wins over the preference: n3 (the leader's node now) is ahead.
    state = voters_three_nodes()
    replica = VoterReplica(state)
    controller = Controller(replica, lease_s=3.0, raft_address="r3", clock=clock, wall_clock=clock)
    heartbeat(state, clock, "n1", "n2")
    assert state.apply(NodeHeartbeat("n3", 200, int(clock.now * 1000))).ok
    asyncio.run(controller.tick())
    for reporter in ("n2", "n3"):
        assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
    clock.now += 2.2
    heartbeat(state, clock, "n2")
    assert state.apply(NodeHeartbeat("n3", 200, int(clock.now * 1000))).ok
    asyncio.run(controller.tick())
    assert state.broker_groups["g1"].master == "n3"
    clock.now += 0.1
    asyncio.run(controller.tick())
    assert replica.handed == []  # its node is a master, but n1 is gone: not now
    # n1 comes back and rejoins the in-sync set: the cluster is whole, leadership moves.
    assert state.apply(RegisterNode("n1", "g1", "n1:1", wall_ms=0, raft_address="r1")).ok
    group = state.broker_groups["g1"]
    in_sync = AlterInSync("g1", "n3", group.epoch, group.in_sync | {"n1"}, group.in_sync_epoch)
    assert state.apply(in_sync).ok
    replica.connected = {"r1": True, "r2": True}  # the voters other than this one (r3)
    clock.now += 0.1
    asyncio.run(controller.tick())
    assert replica.handed == ["r1"]


def three_nodes_with_replication_ports() -> RoutingState:
    """``three_nodes``, each member naming its replication port (``<node>:2``)."""
    state = RoutingState()
    for node_id in ("n1", "n2", "n3"):
        command = RegisterNode(node_id, "g1", f"{node_id}:1", f"{node_id}:2", wall_ms=0)
        assert state.apply(command).ok
    assert state.apply(AlterInSync("g1", "n1", 1, frozenset({"n1", "n2", "n3"}), 1)).ok
    return state


def test_a_master_whose_replication_port_refuses_is_replaced_without_waiting_a_heartbeat():
    """Every in-sync slave lost its link and the master's replication port refuses the
    controller's dial (a kill -9): the controller elects at once, not a heartbeat interval
    after the master's last heartbeat. A port that does not refuse (a paused master, a cut
    network) proves nothing: the heartbeat rule decides."""
    for refuses, elected_at_once in ((True, True), (False, False)):
        state = three_nodes_with_replication_ports()
        clock = Clock()
        dialled: list[str] = []

        async def probe(address: str, refuses=refuses, dialled=dialled) -> bool:
            dialled.append(address)
            return refuses

        controller = Controller(
            LeaderReplica(state),
            lease_s=3.0,
            refuses_connections=probe,
            clock=clock,
            wall_clock=clock,
        )
        heartbeat(state, clock, "n1", "n2", "n3")
        asyncio.run(controller.tick())
        clock.now += 1.1  # the term is older than an interval: lost-link reports count
        heartbeat(state, clock, "n1", "n2", "n3")
        asyncio.run(controller.tick())
        for reporter in ("n2", "n3"):
            assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
        clock.now += 0.1  # 0.1 s after n1's last heartbeat
        asyncio.run(controller.tick())
        assert dialled == ["n1:2"]
        assert (state.broker_groups["g1"].epoch == 2) is elected_at_once
    clock.now += 2.0  # two intervals without n1's heartbeat: the heartbeat rule
    heartbeat(state, clock, "n2", "n3")
    asyncio.run(controller.tick())
    assert state.broker_groups["g1"].epoch == 2


def test_only_a_refused_dial_counts_as_a_port_that_refuses():
    async def run() -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            assert await port_refuses_connections(f"127.0.0.1:{closed.getsockname()[1]}")
        with socket.socket() as listening:
            listening.bind(("127.0.0.1", 0))
            listening.listen()
            assert not await port_refuses_connections(f"127.0.0.1:{listening.getsockname()[1]}")
        assert not await port_refuses_connections("not-an-address")

    asyncio.run(run())


# ---- the longest log by the freshest end ---------------------------------------------
def failed_master_state(clock: Clock) -> RoutingState:
    """n1 masters n2 and n3, all in sync; the slaves' last heartbeats say n2 is far ahead
    (700 against 100), but they date from a second ago."""
    state = three_nodes()
    assert state.apply(NodeHeartbeat("n1", 1000, int(clock.now * 1000))).ok
    assert state.apply(NodeHeartbeat("n2", 700, int(clock.now * 1000))).ok
    assert state.apply(NodeHeartbeat("n3", 100, int(clock.now * 1000))).ok
    return state


def test_an_election_chooses_the_longest_log_by_the_ends_the_slaves_reported():
    """Heartbeats arbitrarily late: the ends the slaves reported when they lost their
    master are what count. Elected by heartbeats, the shortest of three logs won once and
    the two longer ones cut ~430 messages into rollback files."""
    clock = Clock()
    state = failed_master_state(clock)
    replica = LeaderReplica(state)
    controller = Controller(
        replica, lease_s=3.0, clock=clock, wall_clock=clock, refuses_connections=refuses
    )
    asyncio.run(controller.tick())
    assert state.apply(ReportMasterLost("g1", "n2", 1, end_offset=700)).ok
    assert state.apply(ReportMasterLost("g1", "n3", 1, end_offset=900)).ok
    clock.now += 2.5  # the master's heartbeat is two intervals late
    asyncio.run(controller.tick())
    assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == ("n3", 2)


async def refuses(address: str) -> bool:
    return False


def test_a_master_marked_down_waits_up_to_an_interval_for_the_slaves_ends():
    """On the lease path (a master that missed its lease) the controller waits for every
    in-sync slave's report of its end, for at most a heartbeat interval; then the
    heartbeats decide."""
    for reports, elected in (({"n2": 700, "n3": 900}, "n3"), ({"n2": 700}, "n2")):
        clock = Clock()
        state = failed_master_state(clock)
        replica = LeaderReplica(state)
        controller = Controller(replica, lease_s=3.0, clock=clock, wall_clock=clock)
        asyncio.run(controller.tick())
        clock.now += 3.5
        heartbeat_at(state, clock, n2=700, n3=100)
        asyncio.run(controller.tick())  # n1 missed its lease: marked down
        assert not state.members["n1"].alive
        asyncio.run(controller.tick())  # no end reported yet: nobody elected
        assert state.broker_groups["g1"].epoch == 1
        for reporter, end in reports.items():
            assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=end)).ok
        clock.now += 0.2
        heartbeat_at(state, clock, n2=700, n3=100)
        asyncio.run(controller.tick())
        if len(reports) < 2:  # one end missing: wait out the interval
            assert state.broker_groups["g1"].epoch == 1
            clock.now += 1.0
            heartbeat_at(state, clock, n2=700, n3=100)
            asyncio.run(controller.tick())
        assert (state.broker_groups["g1"].master, state.broker_groups["g1"].epoch) == (elected, 2)


def heartbeat_at(state: RoutingState, clock: Clock, **ends: int) -> None:
    for node_id, end in ends.items():
        assert state.apply(NodeHeartbeat(node_id, end, int(clock.now * 1000))).ok


def test_after_every_voter_was_down_a_starting_master_is_judged_only_by_the_leaders_watch():
    """A power loss of every node: routing's new leader finds every heartbeat 33 s old,
    the slaves (up first) report their master lost and its replication port refuses (it
    is bound once the node's routing is ready). The master was deposed 4.4 s after the
    restart (a chaos run); now it has the leader's own silence limit to heartbeat, and a
    master that stays silent is still replaced once it passes."""
    for master_comes_back in (True, False):
        state = three_nodes_with_replication_ports()
        clock = Clock()
        heartbeat(state, clock, "n1", "n2", "n3")  # the last ones before the power cut
        clock.now += 33.0

        async def refuses(address: str) -> bool:
            return True

        controller = Controller(
            LeaderReplica(state),
            lease_s=3.0,
            refuses_connections=refuses,
            clock=clock,
            wall_clock=clock,
        )
        heartbeat(state, clock, "n2", "n3")
        for reporter in ("n2", "n3"):
            assert state.apply(ReportMasterLost("g1", reporter, 1, end_offset=100)).ok
        for _ in range(4):  # 1.2 s of ticks: the master is still starting
            asyncio.run(controller.tick())
            clock.now += 0.3
            heartbeat(state, clock, "n2", "n3")
        assert state.broker_groups["g1"].epoch == 1
        if master_comes_back:
            heartbeat(state, clock, "n1")
            assert state.apply(ReportMasterFound("g1", "n2", 1)).ok
            assert state.apply(ReportMasterFound("g1", "n3", 1)).ok
        for _ in range(4):  # past the leader's own silence limit (2 s)
            clock.now += 0.3
            heartbeat(state, clock, "n2", "n3")
            asyncio.run(controller.tick())
        group = state.broker_groups["g1"]
        assert (group.epoch, group.master) == ((1, "n1") if master_comes_back else (2, "n2"))
