"""One replica of the routing state machine, replicated with Raft (pysyncobj).

Voters (3 or 5, named in ``[cluster] voters``) run inside the nodes' routing hosts
(``node/routing_host.py``) and keep the Raft journal and snapshots in ``<data>/raft/``;
every other node runs a read-only replica that receives the same log from the voters
without voting. Either kind answers reads from its local copy (possibly a little stale:
routes are refreshed by clients anyway) and forwards commands to the leader.

pysyncobj facts this module works around (see docs/guarantees.md, "Routing"):
- its log entries and snapshots are pickles (ours inside them are protobuf bytes once the
  cluster writes routing format 2, ``routing/formats.py``): the cluster secret
  (pysyncobj's password, Fernet encryption) is mandatory, so a peer without it can
  neither read nor inject anything;
- a command submitted while no leader is known would wait in a queue and could commit long
  after the caller gave up, so ``submit`` never hands pysyncobj a command without a
  quorum: it refuses (after trying again for up to a second, as it does every refusal
  that proves the command unapplied: a leadership handover lasts milliseconds);
- a leader change fails the commands a leader had not confirmed with "outcome unknown":
  every command goes under a request id the state remembers with its result
  (``Tracked``), so ``submit`` finds out after a read barrier whether it was applied,
  and only a command that did not commit in time is reported as an unknown outcome;
- a leader cut off from the majority keeps acting as leader for ``leaderFallbackTimeout``:
  it is set to the node lease so a partitioned leader steps down as quickly as the
  controller would declare it dead;
- log compaction would fork a process with gRPC threads running: it serialises in-process;
- its connections buffer whatever length a peer announces before decrypting anything: they
  are bounded (``routing/raft_transport.py``), and a command too large for that bound is
  refused here before it is appended;
- a voter's listener would bind every interface: it binds the voter's own address;
- it has no pre-vote: a restarted voter that times out before the leader's first heartbeat
  reaches it deposes that leader, so a voter restarted with a term waits a connection
  retry and two heartbeat periods longer for its first election (``_RaftNode``);
- it stores the term and the vote by rename every second, and a rename that frees the old
  file's blocks stalled its thread for seconds under a slow disk: the term, the vote and
  snapshots are written by ``routing/raft_files.py`` instead.

Thread-safety: pysyncobj applies commands on its own thread; ``lock`` guards the state
against readers on the event loop. ``submit`` is called from the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from routing import encoding, raft_files
from routing.commands import CatchUp, CommandResult, Tracked
from routing.formats import PROTOBUF
from routing.raft_transport import MAX_COMMAND_BYTES, BoundedTcpTransport
from routing.state import RoutingState

log = logging.getLogger("ferrymq.routing")
# How long a command refused unapplied is tried again: an election's span, not only a
# handover's. A follower calls one after 0.4-1.4 s without the leader (``raftMaxTimeout``),
# a split vote costs another round, and a busy host stretches both; a command that met
# an election must not fail for want of a second try (a test's CreateGroup did on CI).
RETRY_NOT_APPLIED_S = 3.0
READ_BARRIER_TIMEOUT_S = 1.0  # a request naming an unknown topic waits no longer
RETRY_PAUSE_S = 0.02
# At most one read barrier (``catch_up``) every this long: a flood of requests naming
# topics nobody created must not become a flood of Raft entries.
CATCH_UP_SPACING_S = 0.05
# A lone voter's ticks that do not wait after a submit: the one that appends the command,
# the one that commits and applies it, and one more for a submit that lands while a tick
# runs (pysyncobj's pipe wakes that tick's wait). Set by the submitting thread, counted
# down by the Raft thread: an update lost between them costs one tick period at most.
LONE_HURRIED_TICKS = 3
T = TypeVar("T")
SNAPSHOT_KEY = "routing_state"  # a format-2 snapshot: the state's bytes under this key
raft_files.install()

FAIL_REASONS = {
    FAIL_REASON.QUEUE_FULL: "the leader's command queue is full",
    FAIL_REASON.MISSING_LEADER: "no routing leader is known (election in progress?)",
    FAIL_REASON.DISCARDED: "a new leader discarded the command",
    FAIL_REASON.NOT_LEADER: "the leader changed before the command committed",
    FAIL_REASON.LEADER_CHANGED: "the leader changed before the command committed",
    FAIL_REASON.REQUEST_DENIED: "the leader denied the command",
    FAIL_REASON.UNKNOWN_OUTCOME: "the command's outcome is unknown",
}


class CommandTooLarge(ValueError):
    """A command pickles to more than ``MAX_COMMAND_BYTES``: no peer would take the Raft
    message that carries it (``routing/raft_transport.py``), so it is never appended."""


class RoutingUnavailable(Exception):
    """The routing state machine could not take a command: no quorum, no leader, or no
    commit within the timeout. ``outcome_unknown`` is true when the command may still
    commit later (it reached a leader but was not confirmed in time)."""

    def __init__(self, detail: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.outcome_unknown = outcome_unknown


@dataclass(frozen=True)
class RaftStatus:
    self_address: str  # "" for a read-only replica
    voter: bool
    leader: str  # "" while none is known
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    voters_connected: tuple[tuple[str, bool], ...]


class _Machine(SyncObjConsumer):
    """The replicated object: one field, ``state``, that pysyncobj snapshots."""

    def __init__(
        self,
        on_applied: Callable[[object, CommandResult], None],
        on_restored: Callable[[RoutingState], None],
    ) -> None:
        # Fields set before SyncObjConsumer.__init__ are local, never replicated.
        self.lock = threading.Lock()
        self.on_applied = on_applied
        self.on_restored = on_restored
        super().__init__()
        self.state = RoutingState()

    @replicated
    def apply(self, command: object) -> CommandResult:
        """Listeners hear the command a request carries, and nothing of a request applied
        before (it changed nothing this time). ``command`` is a format-2 entry's bytes, or
        the command itself in format 1 (pickled by pysyncobj: ``routing/formats.py``)."""
        if isinstance(command, bytes):
            command = encoding.decode_entry(command)
        with self.lock:
            tracked = command if isinstance(command, Tracked) else None
            if tracked is not None and self.state.outcome(tracked.request_id) is not None:
                return self.state.apply(tracked)
            result = self.state.apply(command)
        try:
            self.on_applied(tracked.command if tracked is not None else command, result)
        except Exception:  # a listener's bug must not stop the Raft thread
            log.exception("routing listener failed on %r", command)
        return result

    def _serialize(self) -> dict:
        """The state for a snapshot, in the cluster's routing format (format 1: the object,
        which pysyncobj pickles)."""
        with self.lock:
            if self.state.routing_format >= PROTOBUF:
                return {SNAPSHOT_KEY: encoding.encode_state(self.state)}
            return super()._serialize()

    def _deserialize(self, data: dict) -> None:
        with self.lock:
            if SNAPSHOT_KEY in data:
                self.state = encoding.decode_state(data[SNAPSHOT_KEY], RoutingState())
            else:
                super()._deserialize(data)
            try:
                self.on_restored(self.state)
            except Exception:  # as in apply: the Raft thread goes on
                log.exception("routing listener failed on a restored snapshot")


class _RaftNode(SyncObj):
    """pysyncobj's node, with a way to run a call on its own thread: its leadership
    transfer writes to the peers' connections, which only that thread may touch.

    A lone voter (a standalone node) ticks at once while a command is on its way: a
    pysyncobj tick appends what was submitted, then waits ``autoTickPeriod`` (50 ms) for
    a peer's message before the next tick commits it, and a lone voter has no peer to wake
    it, so each write took a whole period. With peers, their answers wake the thread, and
    nothing changes."""

    def __init__(self, *args, lone: bool = False, **kwargs) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lone = lone
        self._hurried_ticks = 0  # ticks left that do not wait (a lone voter's)
        super().__init__(*args, **kwargs)
        if not lone and self.raftCurrentTerm > 0:
            self._hear_the_leader_first()

    def _hear_the_leader_first(self) -> None:
        """A restarted voter (its journal holds a term) calls its first election only once
        a leader, if there is one, has had the time to reach it: the leader connects to a
        voter whose address sorts below its own only at its next connection retry
        (``connectionRetryTime``), then heartbeats within ``appendEntriesPeriod``. Without
        this, a voter restarted into a healthy group often timed out first, called an
        election at a higher term, and so deposed the leader it had not heard yet (it
        rarely wins: it missed what was committed while it was down): an election's
        unavailability for routing during rolling restarts and upgrades. pysyncobj has no
        pre-vote (the Raft thesis, section 9.6), which would refuse such a candidate; this
        covers the restart, where the case arises. Runs before the
        tick thread's first tick (it sleeps 0.1 s before it)."""
        conf = self._getConf()
        patience = conf.connectionRetryTime + 2 * conf.appendEntriesPeriod
        # pysyncobj keeps the deadline in a private attribute (name-mangled by SyncObj).
        self._SyncObj__raftElectionDeadline += patience

    def _applyCommand(self, command, callback, commandType=None) -> None:
        if self._lone:
            self._hurried_ticks = LONE_HURRIED_TICKS
        super()._applyCommand(command, callback, commandType)

    def call_on_raft_thread(self, call: Callable[[], None]) -> None:
        """Run ``call`` at the start of the Raft thread's next tick (within ~50 ms)."""
        self._calls.put(call)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            try:
                call()
            except Exception:  # a failed call must not stop the Raft thread's ticks
                log.exception("call on the Raft thread failed")
        if self._lone and self._hurried_ticks:
            self._hurried_ticks -= 1
            timeToWait = 0.0
        super()._onTick(timeToWait)


class RoutingReplica:
    def __init__(
        self,
        *,
        self_address: str | None,
        voters: list[str],
        secret: str,
        data_dir: str,
        lease_s: float,
        on_applied: Callable[[object, CommandResult], None] = lambda command, result: None,
        on_restored: Callable[[RoutingState], None] = lambda state: None,
    ) -> None:
        """``self_address`` is this node's Raft address when it is a voter (it must be in
        ``voters``), None for a read-only replica. ``on_applied`` hears every command
        applied, ``on_restored`` every state a snapshot replaced (under the state's lock),
        both on pysyncobj's thread."""
        if not secret:
            raise ValueError("the cluster secret is empty: Raft traffic would be unencrypted")
        if self_address is not None and self_address not in voters:
            raise ValueError(f"{self_address} is not one of the voters {voters}")
        self.self_address = self_address
        self.voters = list(voters)
        self.machine = _Machine(on_applied, on_restored)
        journal = dump = None
        if self_address is not None:
            raft_dir = os.path.join(data_dir, "raft")
            os.makedirs(raft_dir, exist_ok=True)
            raft_files.reclaim_leftovers(raft_dir)
            journal = os.path.join(raft_dir, "journal")
            dump = os.path.join(raft_dir, "snapshot")
        single = len(voters) == 1
        conf = SyncObjConf(
            password=secret,
            bindAddress=self_address,
            journalFile=journal,
            fullDumpFile=dump,
            useFork=False,
            commandsWaitLeader=False,
            appendEntriesUseBatch=False,  # send at once: commands are rare, latency matters
            connectionRetryTime=0.5,
            leaderFallbackTimeout=max(0.5, lease_s),
            dynamicMembershipChange=False,
            # A lone voter has nobody to wait for: elect it in ~0.1 s instead of ~1 s.
            raftMinTimeout=0.07 if single else 0.4,
            raftMaxTimeout=0.1 if single else 1.4,
            appendEntriesPeriod=0.02 if single else 0.1,
        )
        others = [v for v in voters if v != self_address]
        self._closed = False  # close() began: nothing is submitted to pysyncobj any more
        self._catching_up: asyncio.Future[None] | None = None  # the barrier under way
        self._next_catch_up: asyncio.Future[None] | None = None  # the one after it
        self._caught_up_at = 0.0
        self.sync = _RaftNode(
            self_address,
            others,
            conf,
            consumers=[self.machine],
            transportClass=BoundedTcpTransport,
            lone=single and self_address is not None,
        )

    # ---- reads -------------------------------------------------------------------------
    def read(self, reader: Callable[[RoutingState], T]) -> T:
        """Run ``reader`` on the local state under the lock (keep it short)."""
        with self.machine.lock:
            return reader(self.machine.state)

    @property
    def state(self) -> RoutingState:
        """The local state, for single-record reads (a record is replaced, never changed,
        so one lookup is consistent without the lock)."""
        return self.machine.state

    def is_leader(self) -> bool:
        return self.sync._isLeader()

    def leads_with_quorum(self) -> bool:
        """Whether this replica is the Raft leader and reaches a majority of voters: only
        then can it commit, and only then has it heard the heartbeats others committed."""
        return self.sync._isLeader() and bool(self.sync.hasQuorum)

    def status(self) -> RaftStatus:
        leader = self.sync._getLeader()
        connected = tuple(
            (node.id, bool(self.sync.isNodeConnected(node))) for node in self.sync.otherNodes
        )
        return RaftStatus(
            self_address=self.self_address or "",
            voter=self.self_address is not None,
            leader=leader.id if leader is not None else "",
            term=self.sync.raftCurrentTerm,
            commit_index=self.sync.raftCommitIndex,
            last_applied=self.sync.raftLastApplied,
            has_quorum=self._has_quorum(),
            voters_connected=connected,
        )

    def _has_quorum(self) -> bool:
        """Whether a command submitted now can commit, as far as this replica can tell: a
        leader that is connected to a majority of voters (itself included), or a follower
        connected to a known leader."""
        if self.sync._isLeader():
            return bool(self.sync.hasQuorum)
        leader = self.sync._getLeader()
        return leader is not None and bool(self.sync.isNodeConnected(leader))

    def hand_leadership_to(self, voter: str) -> None:
        """Ask ``voter`` to take Raft leadership over at once (Raft's TimeoutNow). Best
        effort and asynchronous: pysyncobj refuses unless this replica leads and ``voter``
        is connected and has the whole log; ``status().leader`` shows whether it moved."""
        if voter == self.self_address or voter not in self.voters:
            raise ValueError(f"{voter} is not another voter of {self.voters}")

        def refused(_result: object, error: int) -> None:
            if error != FAIL_REASON.SUCCESS:
                log.debug("handing Raft leadership to %s refused: %s", voter, error)

        self.sync.call_on_raft_thread(lambda: self.sync.transferLeadership(voter, refused))

    # ---- writes ------------------------------------------------------------------------
    async def submit(self, command: object, timeout_s: float = 5.0) -> CommandResult:
        """Replicate ``command`` and return what applying it did.

        Raises ``RoutingUnavailable`` without a quorum (nothing was appended) or when the
        command's outcome is still unknown after ``timeout_s`` (it may yet commit);
        ``CommandTooLarge`` (nothing appended) for a command over ``MAX_COMMAND_BYTES``.

        The command goes under a request id (``Tracked``). A refusal that proves it was not
        applied (no leader known, a leader that was no longer one, an entry a new leader
        replaced) is retried for up to ``RETRY_NOT_APPLIED_S``: a leadership handover lasts
        milliseconds and an election a few seconds, and a command that met either would
        otherwise fail for nothing. An
        outcome the leader change hid is found out: after a read barrier, a command that
        committed has its result in ``RoutingState.outcomes``, and one that did not never
        will (a new leader committed past it without it) and is submitted again."""
        # While a node of an older release may follow the log, write what it reads: the
        # command alone, as 0.1.0 did (its outcome, when a leader change hides it, stays
        # unknown: submitting it again could apply it twice).
        as_before = self.read(lambda state: state.awaits_finalize)
        untracked = isinstance(command, CatchUp) or as_before
        tracked = command if untracked else Tracked(os.urandom(16), command)
        size = len(pickle.dumps(tracked))  # the larger of the two formats
        if size > MAX_COMMAND_BYTES:
            raise CommandTooLarge(
                f"{type(command).__name__} takes {size} bytes, over the "
                f"{MAX_COMMAND_BYTES}-byte limit of a routing command: refused"
            )
        started = time.monotonic()
        deadline = started + timeout_s
        retry_until = started + min(timeout_s, RETRY_NOT_APPLIED_S)
        while True:
            try:
                return await self._submit_once(tracked, deadline - time.monotonic())
            except RoutingUnavailable as error:
                if self._closed:
                    raise
                if not error.outcome_unknown:
                    if time.monotonic() >= retry_until:
                        raise
                elif as_before and not isinstance(command, CatchUp):
                    raise
                elif isinstance(tracked, Tracked):
                    result = await self._find_outcome(tracked.request_id, deadline, error)
                    if result is not None:
                        return result
                    # Not applied, and now it never will be: as good as a refusal.
                    retry_until = max(retry_until, time.monotonic() + RETRY_NOT_APPLIED_S)
                    retry_until = min(retry_until, deadline)
                elif time.monotonic() >= deadline:  # a read barrier: any later one will do
                    raise
            if time.monotonic() >= deadline:
                raise RoutingUnavailable(
                    f"routing did not apply the change within {timeout_s:.1f} s "
                    f"({self._quorum_summary()}): nothing was changed"
                )
            await asyncio.sleep(RETRY_PAUSE_S)

    async def _find_outcome(
        self, request_id: bytes, deadline: float, unknown: RoutingUnavailable
    ) -> CommandResult | None:
        """The result of the tracked request ``request_id`` once a read barrier committed
        after it, None when it was not applied; ``unknown`` again when no barrier commits
        before ``deadline``."""
        try:
            await self.catch_up(max(0.0, deadline - time.monotonic()))
        except RoutingUnavailable:
            raise unknown from None
        return self.read(lambda state: state.outcome(request_id))

    async def _submit_once(self, command: object, timeout_s: float) -> CommandResult:
        if self._closed:
            raise RoutingUnavailable("routing is closed here: this node is stopping")
        if not self._has_quorum():
            raise RoutingUnavailable(
                f"routing has no quorum here ({self._quorum_summary()}): nothing was changed"
            )
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[CommandResult] = loop.create_future()
        # An outcome that arrives after the caller's timeout is nobody's to read: mark it
        # read, or asyncio logs it as a lost exception.
        outcome.add_done_callback(lambda f: f.cancelled() or f.exception())

        def resolve(result: CommandResult | None, error: int) -> None:
            if outcome.done():
                return
            if error == FAIL_REASON.SUCCESS:
                outcome.set_result(result)
            else:
                outcome.set_exception(
                    RoutingUnavailable(
                        FAIL_REASONS.get(error, f"pysyncobj failure {error}"),
                        outcome_unknown=error
                        in (FAIL_REASON.UNKNOWN_OUTCOME, FAIL_REASON.LEADER_CHANGED),
                    )
                )

        def done(result: CommandResult | None, error: int) -> None:
            loop.call_soon_threadsafe(resolve, result, error)

        # In the cluster's format: a node that reads only format 1 may still follow the log.
        if self.machine.state.routing_format >= PROTOBUF:
            command = encoding.encode_entry(command)
        self.machine.apply(command, callback=done)
        try:
            return await asyncio.wait_for(asyncio.shield(outcome), timeout_s)
        except TimeoutError:
            raise RoutingUnavailable(
                f"routing did not confirm the change within {timeout_s:.1f} s "
                f"({self._quorum_summary()}); it may still be applied",
                outcome_unknown=True,
            ) from None

    def _quorum_summary(self) -> str:
        connected = sum(1 for node in self.sync.otherNodes if self.sync.isNodeConnected(node))
        voters = len(self.voters)
        if self.self_address is not None:
            return f"{connected + 1} of {voters} voters reachable"
        return f"{connected} of {voters} voters reachable from this read-only replica"

    async def catch_up(self, timeout_s: float = READ_BARRIER_TIMEOUT_S) -> None:
        """Apply here everything routing committed before this call: a read barrier, for a
        node asked about something it may not have heard of yet (a topic another node
        created a moment ago). A ``CatchUp`` command, committed and applied on this
        replica, proves it. A call that arrives while one is under way waits for the next
        one (the one under way may have been appended before what the caller saw), which
        every such call shares; barriers are at least ``CATCH_UP_SPACING_S`` apart.
        ``RoutingUnavailable`` when routing cannot commit within ``timeout_s``."""
        barrier = self._next_catch_up
        if barrier is None:
            barrier = self._next_catch_up = asyncio.get_running_loop().create_future()
            if self._catching_up is None:
                self._start_catch_up(timeout_s)
        try:
            await asyncio.wait_for(asyncio.shield(barrier), timeout_s)
        except TimeoutError:
            raise RoutingUnavailable(
                f"routing did not confirm a read barrier within {timeout_s:.1f} s"
            ) from None

    def _start_catch_up(self, timeout_s: float) -> None:
        barrier, self._next_catch_up = self._next_catch_up, None
        self._catching_up = barrier
        task = asyncio.ensure_future(self._barrier(barrier, timeout_s))
        task.add_done_callback(lambda _: self._catch_up_done(timeout_s))

    async def _barrier(self, done: asyncio.Future[None], timeout_s: float) -> None:
        wait_s = self._caught_up_at + CATCH_UP_SPACING_S - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        try:
            await self.submit(CatchUp(), timeout_s)
        except RoutingUnavailable as error:
            done.set_exception(error)
            done.exception()  # read here: nobody may be waiting any more
        else:
            done.set_result(None)
        finally:
            self._caught_up_at = time.monotonic()

    def _catch_up_done(self, timeout_s: float) -> None:
        self._catching_up = None
        if self._next_catch_up is not None:
            self._start_catch_up(timeout_s)

    async def wait_ready(self, timeout_s: float) -> None:
        """Until the replica has caught up with a leader; ``RoutingUnavailable`` after
        ``timeout_s`` (voters down, or this node has the wrong cluster secret)."""
        deadline = time.monotonic() + timeout_s
        while not self.sync.isReady() or self.sync._getLeader() is None:
            if time.monotonic() > deadline:
                raise RoutingUnavailable(
                    f"could not join the routing group {self.voters} within {timeout_s:.0f} s "
                    f"({self._quorum_summary()}): are the voters up, and is the cluster "
                    "secret the same on every node?"
                )
            await asyncio.sleep(0.05)

    def close(self) -> None:
        """Leave Raft (blocks). A submit from then on is ``RoutingUnavailable``: pysyncobj's
        object, once destroyed, failed each one with an ``AttributeError``."""
        self._closed = True
        self.sync.destroy()
