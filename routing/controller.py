"""The controller: decisions the cluster takes about its nodes, made by the Raft leader.

Every node runs one, but only the replica that is the Raft leader acts, and every decision
is a replicated command (``MarkNodeDown`` names the heartbeat count it judged), so two
nodes that both believe they lead cannot make conflicting decisions stick: the state
machine applies a decision only if the state is still the one it was based on.

Liveness is judged on the leader's monotonic clock: a member whose heartbeat count has not
moved for ``lease_s`` is marked down. A new leader starts every member's clock afresh, so
it never condemns a node for the time before it led.

Failover: a broker group's master has failed when it is marked down, or sooner when every
live in-sync slave reported losing its link to it (``ReportMasterLost``) and it has also
missed two heartbeats (``SILENT_INTERVALS``) or its replication port refuses connections
(nothing listens there: the process is gone; a paused or cut-off master's port does not
refuse; slaves report such a master at once, ``ha/role.py``): a killed master is replaced
in a fraction of a second instead of a lease. The new master is the live in-sync member
with the longest log (any live member with ``unclean_election``,
which may lose acknowledged messages), one whose log was cut by its recovery only when no
other candidate has a whole log (``healthy_first``); ``ElectMaster`` names the epoch it
replaces, so a stale decision cannot stick. A log's length is the end its slave reported
with its lost-master report (made on losing the link, or on seeing its master marked
down), read when it stopped growing; the election waits up to a heartbeat interval for
every candidate's report before it falls back on heartbeats. Which one is chosen never
risks an acknowledged write: under SYNC every in-sync member holds all of them
(``ha/master.py``); the longest log keeps the most of what was not acknowledged yet.

Routing leadership off the masters: a leader whose node is also a broker group's master
hands Raft leadership to a voter that is no master (``hand_leadership_to``), and an
election prefers, among equally long logs, a candidate on another node than the leader.
A crash of a master's node then never takes routing's leader with it: failing over such a
master waited for a Raft election first (0.4-1.4 s) and the heartbeat age after it.

Thread-safety: runs on the routing host's event loop (``node/routing_host.py``); reads the
state through the replica.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from routing.commands import ElectMaster, MarkNodeDown, SetRoutingFormat
from routing.formats import NEWEST_FORMAT
from routing.metadata import healthy_first, leadership_heirs, master_raft_addresses
from routing.replica import RoutingReplica, RoutingUnavailable

log = logging.getLogger("ferrymq.controller")
PROBE_TIMEOUT_S = 0.1
# A master whose in-sync slaves all lost their link is failed once it also missed this
# many heartbeat intervals (or its replication port refuses connections: the process is
# gone). One interval deposed a live master on a loaded host, whose links had timed out
# while one heartbeat came late (bench.saturation --busy 4 --busy-beside-client).
SILENT_INTERVALS = 2


async def port_refuses_connections(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP dial of ``address`` is refused: proof that no process listens there.
    A timeout, an unreachable route or an accepted connection prove nothing (a paused
    process's kernel still accepts; a cut network drops or rejects the dial)."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), timeout_s
        )
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return False


class Controller:
    def __init__(
        self,
        replica: RoutingReplica,
        lease_s: float,
        heartbeat_interval_s: float = 1.0,
        unclean_election: bool = False,
        raft_address: str = "",
        refuses_connections: Callable[[str], Awaitable[bool]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.wall_clock = wall_clock
        self.replica = replica
        self.lease_s = lease_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.unclean_election = unclean_election
        self.clock = clock
        self._seen: dict[str, tuple[int, float]] = {}  # node -> (heartbeats, since)
        self._stuck_reported: dict[str, int] = {}  # group -> the epoch last logged as stuck
        # group -> (epoch, when this leader first saw it): reports of a lost link count
        # only against a term at least a heartbeat interval old (see _master_failure).
        self._terms: dict[str, tuple[int, float]] = {}
        # group -> (epoch, when its master was first seen failed): the election waits up
        # to a heartbeat interval from then for the candidates' reported ends.
        self._failed_since: dict[str, tuple[int, float]] = {}
        self._leading = False
        self._leading_since = 0.0  # when this replica began to lead (monotonic)
        self.raft_address = raft_address  # this node's voter address; "" for no voter
        self._handover_after = 0.0  # no new handover request before this (monotonic)
        self.refuses_connections = refuses_connections or port_refuses_connections

    async def run(self) -> None:
        period = max(0.05, min(0.1, self.lease_s / 10))
        while True:
            await asyncio.sleep(period)
            try:
                await self.tick()
            except RoutingUnavailable as error:
                log.info("controller decision not committed: %s", error.detail)
            except Exception:  # one failed round must not end the controller
                log.exception("controller round failed")

    async def tick(self) -> None:
        # A leader cut off from the majority is not leading: no heartbeat commits while it
        # is, so the time it spent so is nobody's silence. Regaining the majority starts
        # every clock again, as a new leader's do (a live master was once marked down the
        # moment the quorum came back, for heartbeats that could not commit).
        if not self.replica.leads_with_quorum():
            self._leading = False
            return
        now = self.clock()
        if not self._leading:
            self._leading = True
            self._leading_since = now
            self._seen.clear()  # grace: judge nobody on time from before we led
            self._terms.clear()
        members, groups = self.replica.read(
            lambda state: (dict(state.members), list(state.broker_groups.values()))
        )
        for member in members.values():
            count, since = self._seen.get(member.node_id, (-1, now))
            if count != member.heartbeats:
                self._seen[member.node_id] = (member.heartbeats, now)
                continue
            if member.alive and now - since > self.lease_s:
                log.warning(
                    "node %s missed its lease (%.1f s without a heartbeat): marking it down",
                    member.node_id,
                    now - since,
                )
                await self.replica.submit(MarkNodeDown(member.node_id, member.heartbeats))
        for group in groups:
            if group.master is None:
                continue
            failure = await self._master_failure(group, members, now)
            if failure is not None:
                await self._elect(group, members, failure, now)
        self._keep_leadership_off_masters(members, groups, now)
        await self._move_a_new_cluster_to_the_newest_format(members)

    async def _move_a_new_cluster_to_the_newest_format(self, members: dict) -> None:
        """A cluster that never had a node of an older release writes the newest routing
        format at once; one that had (an upgrade) waits for the operator to finalize."""
        routing_format, awaits = self.replica.read(
            lambda state: (state.routing_format, state.awaits_finalize)
        )
        if routing_format >= NEWEST_FORMAT or awaits or not members:
            return
        if all(m.routing_format >= NEWEST_FORMAT for m in members.values()):
            await self.replica.submit(SetRoutingFormat(NEWEST_FORMAT))

    def _ends_known(self, group, candidates: list[str], now: float) -> bool:
        """Whether every candidate's log end is known from a report made in this epoch,
        or a heartbeat interval has passed since the master was first seen failed (then
        the heartbeats' ends, up to an interval old, decide). Slaves report their end as
        soon as they lose their link or see their master marked down (``ha/role.py``):
        electing by heartbeats alone once chose the shortest of three logs, and the two
        longer ones cut ~430 messages into rollback files."""
        since = self._failed_since.get(group.name)
        if since is None or since[0] != group.epoch:
            since = self._failed_since[group.name] = (group.epoch, now)
        if all(group.reported_end(n) is not None for n in candidates):
            return True
        return now - since[1] >= self.heartbeat_interval_s

    def _keep_leadership_off_masters(self, members, groups, now: float) -> None:
        """While this node is a master and the cluster is whole, ask a voter that is no
        master to lead routing (at most once a heartbeat interval; pysyncobj refuses a
        voter that has not the whole log, and the next round asks again).

        Only a whole cluster (every voter reachable, every member alive, every group's
        members all in sync, no lost-master report): a handover moves leadership once
        more, and while a failure is being handled the commands that handle it (an
        in-sync change, heartbeats) would fail across that move and wait for a retry."""
        if not self.raft_address or now < self._handover_after:
            return
        masters = master_raft_addresses(members, groups)
        if self.raft_address not in masters or not _whole(members, groups):
            return
        connected = self.replica.status().voters_connected
        if not all(up for _, up in connected):
            return
        heirs = leadership_heirs(connected, masters, self.raft_address)
        others = [voter for voter in heirs if voter not in masters]
        if not others:
            return  # every voter is a master: leading here is the best there is
        self._handover_after = now + self.heartbeat_interval_s
        log.info("this node is a master: handing routing leadership to %s", others[0])
        self.replica.hand_leadership_to(others[0])

    async def _master_failure(self, group, members, now: float) -> str | None:
        """Why the group's master counts as failed (logged with the election, so that a
        post-mortem knows what deposed it), or None while it does not."""
        term = self._terms.get(group.name)
        if term is None:  # a term already running when this replica began to lead
            term = self._terms[group.name] = (group.epoch, now - self.heartbeat_interval_s)
        elif term[0] != group.epoch:
            term = self._terms[group.name] = (group.epoch, now)
        master = members.get(group.master)
        if master is None:
            return f"master {group.master} is not a member"
        if not master.alive:
            return f"master {group.master} is down (missed its lease)"
        if not group.lost_by:
            return None
        if now - term[1] < self.heartbeat_interval_s:
            # A master elected a moment ago: its slaves may report "lost" before they
            # even dialled it, and its last committed heartbeat may date from before a
            # routing leader change. Deposing it on that would elect twice in a row
            # and drop what it acknowledged meanwhile (found by a short chaos run).
            return None
        slaves = {
            n for n in group.in_sync if n != group.master and n in members and members[n].alive
        }
        if not slaves or not slaves <= group.lost_by:
            return None
        lost = f"in-sync slaves {sorted(group.lost_by)} lost their link to {group.master}"
        _, since = self._seen.get(master.node_id, (-1, now))
        silence_s = self.heartbeat_interval_s * SILENT_INTERVALS
        if now - since >= silence_s:
            return f"{lost}, which sent no heartbeat for {now - since:.1f} s"
        # A leader elected a moment ago has not watched the master for a whole interval;
        # the heartbeat's own timestamp (the sender's wall clock) says how old it is, with
        # half an interval of slack for clocks that disagree.
        age_s = self.wall_clock() - master.last_heartbeat_ms / 1000
        if age_s - (now - self._leading_since) > self.lease_s:
            # Silent for more than a lease before this leader began, yet not marked down:
            # no leader was watching then (every voter was down: a restart or power loss
            # of every node). Such a heartbeat's age says nothing, and a master still
            # starting has not bound its replication port yet; only this leader's own
            # watch (above) decides. (A chaos run deposed a starting master 4.4 s after a
            # power loss of every node, on a heartbeat 33 s old.)
            return None
        if age_s >= silence_s + self.heartbeat_interval_s / 2:
            return f"{lost}, whose last heartbeat is {age_s:.1f} s old"
        if master.ha_address and await self.refuses_connections(master.ha_address):
            return f"{lost}, whose replication port {master.ha_address} refuses connections"
        return None

    async def _elect(self, group, members, failure: str, now: float) -> None:
        def eligible(node_id: str) -> bool:
            member = members[node_id]
            return member.alive and member.broker_group == group.name and node_id != group.master

        candidates = [n for n in group.in_sync if n in members and eligible(n)]
        unclean = False
        if not candidates and self.unclean_election:
            candidates = [n for n in members if eligible(n)]
            unclean = True
        # A node whose recovery cut its log only while no candidate has a whole one.
        candidates = [m.node_id for m in healthy_first([members[n] for n in candidates])]
        if not candidates:
            # Once per term, not on every tick while it lasts.
            if self._stuck_reported.get(group.name) != group.epoch:
                self._stuck_reported[group.name] = group.epoch
                log.error(
                    "broker group %s lost its master and has no eligible member (epoch %d): "
                    "it elects one when an in-sync member is back%s",
                    group.name,
                    group.epoch,
                    "" if self.unclean_election else " (or with unclean_election)",
                )
            return
        if not self._ends_known(group, candidates, now):
            return
        # The longest log by the freshest end known: a candidate's lost-master report
        # (a slave without a link does not grow), else its last heartbeat. Among equally
        # long logs, not this node: a master here would hand routing's leadership over
        # right after (``_keep_leadership_off_masters``).
        chosen = min(
            candidates,
            key=lambda n: (
                -_end_of(group, members[n]),
                bool(self.raft_address) and members[n].raft_address == self.raft_address,
                n,
            ),
        )
        log.warning(
            "electing %s master of %s (epoch %d -> %d)%s: %s",
            chosen,
            group.name,
            group.epoch,
            group.epoch + 1,
            " UNCLEAN" if unclean else "",
            failure,
        )
        await self.replica.submit(
            ElectMaster(group.name, chosen, group.epoch, "master failed", unclean=unclean)
        )


def _end_of(group, member) -> int:
    """The freshest known end of ``member``'s log: what its lost-master report in this
    epoch said, or its last heartbeat, whichever is further (a log only grows within an
    epoch)."""
    reported = group.reported_end(member.node_id)
    return member.max_offset if reported is None else max(reported, member.max_offset)


def _whole(members, groups) -> bool:
    """Every member alive and in its group's in-sync set, and no lost-master report."""
    in_sync = {node for g in groups for node in g.in_sync}
    return all(m.alive and m.node_id in in_sync for m in members.values()) and not any(
        g.lost_by for g in groups
    )
