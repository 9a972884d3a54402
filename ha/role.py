"""This node's part in its broker group's replication, switched only by the routing
state: master (streams, counts acks, keeps the in-sync set current, fences itself when it
cannot renew its lease) or slave (follows the master, refuses writes).

Roles change only on a new epoch from routing. Promotion: stop following, record the epoch
in the epoch history at this log's end, rebuild queue offsets and every log-derived state
(offsets, POP, timers, transactions), then take writes. Demotion: refuse writes at once,
fail waiting writes, follow the new master (which truncates any divergent tail). A node
whose log may still hold a diverged tail (its cut failed: ``TailCutFailed``) refuses the
promotion: it keeps refusing writes, hands the group to another in-sync member through
routing, or, with none, tries the cut and the promotion again every
``PROMOTION_RETRY_S``.

Invariants, each with one home here:
- "may this node write?" is ``write_refusal`` (``is_master`` for the services' early
  answer); the store's ``writes_refused`` is only a flag this role sets, so that no path
  appends on a slave;
- the store's read cap (``MessageStore.set_confirmed_offset``) is decided by
  ``_cap_reads`` alone: the master's confirmed offset, or on a slave what its master said
  (capped by its own end); it falls only on a new epoch (this role's promotion or
  demotion, a slave's cut tail);
- the master's wake-up on new records is this role's dispatch listener.

Routing is read from its tables as they are when read: the Raft thread replaces a table
on every change and never changes one in place (``routing/state.py``), so iterating one is
safe on the event loop without the replica's lock.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ha.epochs import EpochHistory
from ha.master import SILENT_SLAVE_TIMEOUT_S, ReplicationMaster
from ha.options import ReplicationMode, ReplicationOptions
from ha.slave import ReplicationSlave, TailCutFailed
from ha.status import ReplicationStatus
from routing.commands import AlterInSync, ElectMaster, ReportMasterFound, ReportMasterLost
from routing.metadata import BrokerGroup, healthy_first, may_leave_in_sync
from routing.replica import RoutingReplica, RoutingUnavailable
from store.message_store import MessageStore
from store.results import PutStatus

log = logging.getLogger("ferrymq.replication")
IN_SYNC_CHECK_S = 0.2
# A slave reports its master lost only after this long without a link in the master's
# term: right after an election it has not dialled the new master yet.
LOST_MASTER_GRACE_S = 0.5
SWITCHOVER_CATCH_UP_S = 5.0
PROMOTION_RETRY_S = 1.0  # a refused promotion with no one to hand over to: the cut again


class SwitchoverError(Exception):
    """A planned switchover could not be done; nothing changed (writes resumed)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ReplicationRole:
    def __init__(
        self,
        store: MessageStore,
        routing: RoutingReplica,
        *,
        node_id: str,
        broker_group: str,
        data_dir: str,
        options: ReplicationOptions,
        lease_s: float,
        secret: str,
        standalone: bool,
        reload_states: Callable[[], None],
        on_confirmed: Callable[[int], None],
        renew_lease_now: Callable[[], None] = lambda: None,
        lease_renewed_at: Callable[[], float] | None = None,
        host_starved: Callable[[], bool] = lambda: False,
    ) -> None:
        """``standalone``: a cluster of one, whose in-sync set is itself alone.
        ``on_confirmed`` hears every advance of the read cap under SYNC replication: the
        master's confirmed offset, or on a slave what its master last said it is."""
        self.node_id = node_id
        self.broker_group = broker_group
        # A new master renews its lease at once instead of at the next heartbeat: the
        # lease may have lapsed while routing elected a leader, and writes wait for it.
        self.renew_lease_now = renew_lease_now
        self.store = store
        self.routing = routing
        self.reload_states = reload_states
        self.options = options
        self.epochs = EpochHistory(data_dir)
        self._fit_epochs_to_log()
        sync = options.mode is ReplicationMode.SYNC
        self.master = ReplicationMaster(
            store,
            self.epochs,
            node_id,
            broker_group,
            secret,
            sync=sync,
            min_insync_replicas=1 if standalone else options.min_insync_replicas,
            is_member=self._is_member,
            # A silent slave's link is not dropped before it could leave the in-sync set
            # for lagging anyway: the operator's max_lag_ms still decides.
            silent_slave_timeout_s=max(SILENT_SLAVE_TIMEOUT_S, options.max_lag_ms / 1000),
        )
        self.master.on_confirmed = self._confirmed
        self._on_confirmed = on_confirmed
        self._check_now = asyncio.Event()  # maintain's next round is due at once
        self.master.on_slave_gone = self._check_now.set  # it leaves the in-sync set now
        self.slave = ReplicationSlave(
            store,
            self.epochs,
            node_id,
            secret,
            self._master_ha,
            on_confirmed=self._slave_confirmed,
            on_refused=self._check_now.set,
        )
        self._master_role = False  # this node took the master's role (promotion done)
        self.master_epoch = 0
        # When routing last committed a heartbeat of this node: the routing host's lease
        # cell (node/lease_cell.py), or, without one, what was set here.
        self._renewed_at = time.monotonic()
        self._lease_source = lease_renewed_at
        # Whether the routing host's own wakeups came late lately (node/routing_host.py):
        # a lapse of the lease then is overload, refused as back-pressure.
        self._host_starved = host_starved
        self.lease_s = lease_s
        self._pending_in_sync: frozenset[str] = frozenset()
        self._reported_epoch = -1
        self._unlinked_since = (-1, 0.0)  # (epoch, since when) without a link to its master
        self._last_acked: dict[str, int] = {}  # per slave, for the metrics
        self._switching = asyncio.Lock()
        # The epoch whose promotion this node refused (its log's cut failed), and when it
        # may try again; None once that epoch is over or the promotion went through.
        self._unfit_epoch: int | None = None
        self._retry_promotion_at = 0.0
        self.fenced: str | None = None  # why writes pause (a planned switchover)
        store.writes_refused = "this node has not joined its broker group yet"
        store.add_append_listener(self._on_appended)

    @property
    def lease_renewed_at(self) -> float:
        source = self._lease_source
        return source() if source is not None else self._renewed_at

    @lease_renewed_at.setter
    def lease_renewed_at(self, renewed_at: float) -> None:
        self._renewed_at = renewed_at

    # ---- may this node write? ----------------------------------------------------------
    @property
    def is_master(self) -> bool:
        """This node took the master's role and routing still names it master of that
        epoch: the one answer to "am I master?" (a deposed master stops as soon as routing
        says so, before its demotion has run)."""
        if not self._master_role:
            return False
        group = self._group()
        return (
            group is not None
            and group.master == self.node_id
            and (group.epoch == self.master_epoch)
        )

    def write_refusal(self) -> tuple[PutStatus, str] | None:
        """Why a put must be refused now, or None."""
        if not self.is_master:
            return PutStatus.SERVICE_NOT_AVAILABLE, self.store.writes_refused or "not the master"
        if self.fenced is not None:
            return PutStatus.SERVICE_NOT_AVAILABLE, self.fenced
        if time.monotonic() - self.lease_renewed_at > self.lease_s * 2 / 3:
            # The controller may be electing another master: stop before it can. A host
            # starved of CPU is told to retry later (back-pressure, as for a replication
            # backlog); a master that may be cut off from routing, to go elsewhere.
            if self._host_starved():
                return PutStatus.SYSTEM_BUSY, (
                    "[OVERLOADED] this master's lease is late: its host is short of CPU "
                    "(its routing host's wakeups come late); retry later"
                )
            return PutStatus.SERVICE_NOT_AVAILABLE, (
                "this master could not renew its lease with the routing majority"
            )
        if not self.master.enough_in_sync():
            return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, (
                f"{len(self.master.counted) + 1} in-sync replicas, "
                f"{self.master.min_insync_replicas} needed"
            )
        backlog_s = self.master.backlog_s()
        if backlog_s * 1000 > self.options.max_backlog_ms:
            # Back-pressure, not a failure: taking more would only lengthen every wait
            # for the slaves until they time out or leave the in-sync set.
            return PutStatus.SYSTEM_BUSY, (
                f"[REPLICATION_BACKLOG] the in-sync replicas lack what this master had "
                f"{backlog_s:.1f} s ago (max_backlog_ms {self.options.max_backlog_ms}): "
                "retry later"
            )
        return None

    # ---- routing view ------------------------------------------------------------------
    def _group(self) -> BrokerGroup | None:
        return self.routing.state.broker_groups.get(self.broker_group)

    def _is_member(self, node_id: str) -> bool:
        member = self.routing.state.members.get(node_id)
        return member is not None and member.broker_group == self.broker_group

    def _master_ha(self) -> str | None:
        group = self._group()
        if group is None or group.master in (None, self.node_id):
            return None
        member = self.routing.state.members.get(group.master)
        return member.ha_address if member is not None else None

    def _fit_epochs_to_log(self) -> None:
        """The epoch file is forced to disk at once, the CommitLog under ASYNC_FLUSH only
        every flush interval: after a power loss the history can name terms whose records
        are gone. It must describe only what the log holds, or a promotion could not
        append its term and a slave would compare ranges it does not have."""
        end = self.store.write_offset
        beyond = [e.epoch for e in self.epochs.entries if e.start_offset > end]
        if beyond:
            log.warning(
                "epoch history names terms past this log's end %d (unsynced bytes lost?): "
                "forgetting %s",
                end,
                beyond,
            )
            self.epochs.truncate_from(end + 1)

    # ---- role switching ----------------------------------------------------------------
    async def follow_routing(self) -> None:
        """Take the role routing says (called after every routing change)."""
        async with self._switching:
            group = self._group()
            if group is None:
                return
            if group.master == self.node_id:
                if not self._master_role or group.epoch != self.master_epoch:
                    await self._become_master(group.epoch, group.in_sync)
                else:
                    self.master.set_counted(group.in_sync | self._pending_in_sync)
            elif self._master_role or not self.slave.running:
                await self._become_slave(group.master)
            else:
                self.slave.master_changed()  # follow a new master without waiting

    async def _become_master(self, epoch: int, in_sync: frozenset[str]) -> None:
        if epoch < self.epochs.last_epoch:
            log.error(
                "routing says epoch %d, this log has %d: not switching",
                epoch,
                self.epochs.last_epoch,
            )
            return
        try:
            await self.slave.stop()
        except TailCutFailed as error:
            self._refuse_promotion(epoch, error)
            return
        self._unfit_epoch = None
        if epoch > self.epochs.last_epoch:
            # An empty history means every byte here is this node's own: the term covers all.
            start = self.store.write_offset if self.epochs.entries else 0
            self.epochs.append(epoch, start)
        self.store.rebuild_queue_offsets()
        # A new epoch: the states replay the whole log, uncapped.
        self.store.set_confirmed_offset(None, new_epoch=True)
        self.reload_states()
        self._master_role, self.master_epoch = True, epoch
        self._pending_in_sync = frozenset()
        self._last_acked = {}
        self.master.activate(in_sync, confirmed=self.slave.confirmed_offset)
        self.store.set_log_writer(self.master.log_writer())
        self._cap_reads()
        self.store.writes_refused = None
        self.renew_lease_now()
        log.warning(
            "now master of %s in epoch %d at offset %d",
            self.broker_group,
            epoch,
            self.store.write_offset,
        )

    def _refuse_promotion(self, epoch: int, error: TailCutFailed) -> None:
        """Routing named this node master of ``epoch``, but its log may hold a diverged
        tail: it stays a slave that refuses writes, and ``maintain`` hands the group over
        (``_step_aside``)."""
        self.store.writes_refused = (
            f"this node cannot take the master's role of {self.broker_group}: {error}"
        )
        if self._unfit_epoch != epoch:  # the first refusal of this epoch: step aside at once
            log.error(
                "not taking the master's role of %s in epoch %d: %s",
                self.broker_group,
                epoch,
                error,
            )
            self._unfit_epoch, self._retry_promotion_at = epoch, time.monotonic()
            self._check_now.set()

    async def _become_slave(self, master: str | None) -> None:
        self.store.writes_refused = (
            f"this node is a slave of broker group {self.broker_group} (master: {master})"
        )
        was_master = self._master_role
        self._master_role = False
        self.master.deactivate()  # the store writes its appends again
        self._cap_reads(new_epoch=True)
        self.slave.start()
        if was_master:
            log.warning("no longer master of %s; following %s", self.broker_group, master)

    # ---- the read cap ------------------------------------------------------------------
    def _cap_reads(self, *, new_epoch: bool = False) -> None:
        """Under SYNC replication consumers read only what the in-sync set holds: the
        master's confirmed offset here, or on a slave what its master last said, up to
        this log's end. Called on every change of either; ``new_epoch`` on a role change.
        Under ASYNC replication the cap stays off."""
        if not self.master.sync:
            return
        if self._master_role:
            offset = self.master.confirmed_offset
        else:
            offset = min(self.slave.confirmed_offset, self.store.write_offset)
        self.store.set_confirmed_offset(offset, new_epoch=new_epoch)

    # ---- master duties -----------------------------------------------------------------
    def _on_appended(self) -> None:
        """New records in this log (not dispatched yet): a master's links stream them, and
        with no slave to wait for they are confirmed at once."""
        if self._master_role:
            self.master.on_appended()

    def _confirmed(self, offset: int) -> None:
        self._cap_reads()
        self._on_confirmed(offset)

    def _slave_confirmed(self) -> None:
        """The master said (in a DATA frame or a heartbeat) what its in-sync set holds: a
        moved cap is told on, as a master's is, so that readers held beyond the old cap
        read now. Without it a long poll on a slave that got records beyond its cap
        slept until its deadline, though the next frame made them readable."""
        before = self.store.confirmed_offset
        self._cap_reads()
        after = self.store.confirmed_offset
        if after is not None and after != before:
            self._on_confirmed(after)

    async def maintain(self) -> None:
        """Keep the in-sync set current (master) and report a lost master (slave)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), IN_SYNC_CHECK_S)
            self._check_now.clear()
            try:
                if self._master_role:
                    await self._maintain_in_sync()
                else:
                    await self._step_aside()
                    await self._report_lost_master()
                    await self._report_master_down()
                    await self._note_refill()
            except RoutingUnavailable as error:
                log.info("replication change not committed: %s", error.detail)
            except Exception:  # one failed round must not end the loop
                log.exception("replication maintenance failed")

    async def _maintain_in_sync(self) -> None:
        group = self._group()
        if group is None or group.master != self.node_id:
            return
        me = self.node_id
        known = self.routing.state.members  # a snapshot: apply replaces tables, never edits
        members = [
            m.node_id
            for m in known.values()
            if m.broker_group == self.broker_group and m.node_id != me
        ]
        committed = group.in_sync - {me}
        add = frozenset(n for n in members if n not in committed and self.master.caught_up(n))
        remove = frozenset(
            n
            for n in committed
            if self.master.lagging(n, self.options.max_lag_ms / 1000, self.options.max_lag_bytes)
            and may_leave_in_sync(known.get(me), known.get(n))
        )
        if not add and not remove:
            return
        # Count a joining slave's acks from now on, before routing commits its joining.
        self._pending_in_sync = add
        self.master.set_counted(group.in_sync | add)
        try:
            result = await self.routing.submit(
                AlterInSync(
                    group.name, me, group.epoch, (group.in_sync | add) - remove, group.in_sync_epoch
                )
            )
            if result.ok:
                log.info("in-sync set of %s: %s", group.name, sorted(result.value.in_sync))
        finally:
            self._pending_in_sync = frozenset()
            current = self._group()
            if current is not None and self._master_role:
                self.master.set_counted(current.in_sync)

    async def _step_aside(self) -> None:
        """A promotion refused for a cut that failed (``_refuse_promotion``): elect the
        live in-sync member with the longest log in this node's place, as a switchover
        would (``ElectMaster`` names this epoch: it sticks only if nothing changed since).
        With none, try the promotion (the cut first) again. Once every
        ``PROMOTION_RETRY_S``, the first at once."""
        group = self._group()
        if self._unfit_epoch is None or group is None or group.master != self.node_id:
            self._unfit_epoch = None
            return
        if group.epoch != self._unfit_epoch or time.monotonic() < self._retry_promotion_at:
            return  # a newer epoch's promotion is follow_routing's to try
        self._retry_promotion_at = time.monotonic() + PROMOTION_RETRY_S
        successor = self._successor(group)
        if successor is not None:
            result = await self.routing.submit(
                ElectMaster(
                    group.name, successor, group.epoch, "its elected master could not cut its log"
                )
            )
            log.warning(
                "handing %s to %s: this node's log may hold a diverged tail (%s)",
                group.name,
                successor,
                "elected" if result.ok else f"not elected: {result.detail}",
            )
            return
        await self.follow_routing()

    def _successor(self, group: BrokerGroup) -> str | None:
        """The live in-sync member other than this node with the longest log (a whole one
        first, ``healthy_first``), or None."""
        members = self.routing.state.members
        candidates = [
            members[n]
            for n in group.in_sync
            if n != self.node_id and n in members and members[n].alive
        ]
        whole = healthy_first(candidates)
        if not whole:
            return None
        return max(whole, key=lambda m: (m.max_offset, m.node_id)).node_id

    async def _report_lost_master(self) -> None:
        group = self._group()
        if group is None:
            return
        now = time.monotonic()
        if self.slave.connected_to is not None or self._unlinked_since[0] != group.epoch:
            self._unlinked_since = (group.epoch, now)
            if (
                self.slave.connected_to is not None
                and self.node_id in group.lost_by
                and self._master_alive(group)
            ):
                await self._withdraw_lost_report(group)
            return
        # The grace is for a master not dialled yet; one whose port refused the dial has
        # no process behind it (a kill -9): report it at once.
        refused = self.slave.refused_by is not None and self.slave.refused_by == self._master_ha()
        if (
            group.master in (None, self.node_id)
            or (now - self._unlinked_since[1] < LOST_MASTER_GRACE_S and not refused)
            or self._reported_epoch == group.epoch
            or self.node_id not in group.in_sync
        ):
            return
        await self._report_end(group, "no link")

    async def _report_master_down(self) -> None:
        """Routing marked this slave's master down (a missed lease): report this log's end
        at once, linked or not, so that the controller elects the longest in-sync log by
        an end read now, not by heartbeats up to a second old."""
        group = self._group()
        if (
            group is None
            or group.master in (None, self.node_id)
            or self._reported_epoch == group.epoch
            or self.node_id not in group.in_sync
        ):
            return
        if self._master_alive(group):
            return
        await self._report_end(group, "marked down")

    def _master_alive(self, group: BrokerGroup) -> bool:
        """Whether routing holds ``group``'s master alive (it has not missed its lease)."""
        master = self.routing.state.members.get(group.master) if group.master else None
        return master is not None and master.alive

    async def _report_end(self, group: BrokerGroup, why: str) -> None:
        """Report the master of ``group``'s epoch lost, with this log's end (a slave
        without a link to its master does not grow: the controller compares these)."""
        now = time.monotonic()
        refused = self.slave.refused_by is not None and self.slave.refused_by == self._master_ha()
        end = self.store.write_offset
        result = await self.routing.submit(
            ReportMasterLost(group.name, self.node_id, group.epoch, end_offset=end)
        )
        if result.ok:
            log.warning(
                "reported master %s of %s lost (epoch %d, %s, for %.1f s without a link%s; "
                "this log ends at %d)",
                group.master,
                group.name,
                group.epoch,
                why,
                now - self._unlinked_since[1] if self.slave.connected_to is None else 0.0,
                ", its port refuses connections" if refused else "",
                end,
            )
        if result.ok or result.reason == "STALE":
            self._reported_epoch = group.epoch

    async def _note_refill(self) -> None:
        """A log cut by recovery (``store/damaged_ranges.py``) is whole again once this
        slave holds everything its master had when they linked: the ranges are marked
        refilled, and a heartbeat tells routing at once (elections avoid a damaged log)."""
        damage = self.store.damage
        if not damage.unrefilled or self.slave.connected_to is None:
            return
        end = self.store.write_offset
        if end < self.slave.linked_master_end:
            return
        master = self.slave.connected_to
        loop = asyncio.get_running_loop()
        for damaged in await loop.run_in_executor(None, damage.mark_refilled, end):
            log.warning(
                "refilled the damaged range [%d, %d) from master %s: this log is whole "
                "again up to %d",
                damaged.start,
                damaged.end,
                master,
                end,
            )
        self.renew_lease_now()

    async def _withdraw_lost_report(self, group) -> None:
        """Linked to the master again: the report made in this epoch no longer holds (it
        may date from before the new master served at all), and it may be made again."""
        result = await self.routing.submit(ReportMasterFound(group.name, self.node_id, group.epoch))
        if result.ok:
            log.info(
                "linked to master %s of %s again: lost report withdrawn", group.master, group.name
            )
        if result.ok or result.reason == "STALE":
            self._reported_epoch = -1

    async def switchover(self, target: str | None) -> tuple[str, int, float]:
        """Hand mastership to ``target`` (the most caught-up in-sync slave when None)
        without losing an acknowledged write: pause writes, wait until the target has
        every byte of this log, elect it through routing. (new master, epoch, ms writes
        were paused)."""
        group = self._group()
        if not self.is_master or group is None or group.master != self.node_id:
            raise SwitchoverError("NOT_MASTER", "this node is not its group's master")
        slaves = [n for n in group.in_sync if n != self.node_id and n in self.master.links]
        if target is None:
            if not slaves:
                raise SwitchoverError("NO_CANDIDATE", "no connected in-sync slave to hand over to")
            members = self.routing.state.members
            whole = healthy_first([members[n] for n in slaves if n in members])
            candidates = [m.node_id for m in whole] or slaves
            target = max(candidates, key=lambda n: (self.master.links[n].acked, n))
        elif target not in slaves:
            raise SwitchoverError(
                "NOT_IN_SYNC", f"{target} is not a connected in-sync slave of {group.name}"
            )
        paused_at = time.monotonic()
        self.fenced = f"switchover of {group.name} to {target} in progress"
        try:
            await asyncio.sleep(0)  # puts already past the check append in this turn
            end = self.store.write_offset
            deadline = paused_at + SWITCHOVER_CATCH_UP_S
            while self.master.links.get(target) is None or self.master.links[target].acked < end:
                if time.monotonic() > deadline:
                    raise SwitchoverError("TIMEOUT", f"{target} did not catch up to {end}")
                await asyncio.sleep(0.005)
            result = await self.routing.submit(
                ElectMaster(group.name, target, group.epoch, "planned switchover")
            )
            if not result.ok:
                raise SwitchoverError(result.reason, result.detail)
        except RoutingUnavailable as error:
            raise SwitchoverError("ROUTING_UNAVAILABLE", error.detail) from None
        finally:
            self.fenced = None  # a demoted node refuses writes as a slave from here on
        paused_ms = (time.monotonic() - paused_at) * 1000
        log.warning(
            "switchover: %s -> %s (epoch %d) in %.0f ms",
            self.node_id,
            target,
            group.epoch + 1,
            paused_ms,
        )
        return target, group.epoch + 1, paused_ms

    def status(self) -> ReplicationStatus:
        """What the metrics export about replication (read at scrape time)."""
        group = self._group()
        members = self.routing.state.members  # one snapshot: the Raft thread replaces it
        replicas = sum(1 for m in members.values() if m.broker_group == self.broker_group)
        end = self.store.write_offset
        lag: dict[str, int] = {}
        if self._master_role:
            # Every slave linked since this node became master: one whose link is gone keeps
            # its last ack (remembered at scrape time), so its lag grows instead of vanishing.
            for m in members.values():
                if m.broker_group == self.broker_group and m.node_id != self.node_id:
                    link = self.master.links.get(m.node_id)
                    if link is not None:
                        self._last_acked[m.node_id] = link.acked
                    if m.node_id in self._last_acked:
                        lag[m.node_id] = max(0, end - self._last_acked[m.node_id])
        # A slave knows the confirmed offset from its master's stream.
        confirmed = (
            self.master.confirmed_offset if self._master_role else self.slave.confirmed_offset
        )
        return ReplicationStatus(
            role="master" if self._master_role else "slave",
            epoch=group.epoch if group else 0,
            insync_replicas=len(group.in_sync) if group else 0,
            min_insync_replicas=self.master.min_insync_replicas,
            replicas=max(replicas, 1),
            confirmed_offset=confirmed if self.master.sync else None,
            slave_lag_bytes=lag,
        )

    async def close(self) -> None:
        with contextlib.suppress(TailCutFailed):  # logged where the cut failed
            await self.slave.stop(leaving=True)
        await self.master.close()
