"""The routing host: a process of its own beside each node's process, holding what proves
the node alive and what judges the others: the node's routing replica (Raft, pysyncobj),
its heartbeats (the lease a master writes under, ``node/heartbeat.py``) and the controller
(``routing/controller.py``).

Why a process (issue 38): in the node's process every step of a heartbeat (pysyncobj's
reads, writes and selects, the commit's callback, the lease's update) waited for the GIL
behind message work, and on a busy host each of those waits lasted a scheduling slice: the
heartbeats came seconds late, masters refused writes for their lease, and a live master
was deposed. Thread priorities, a longer lease and slower Raft timers in the node's process
changed nothing (bench/RESULTS.md, "Saturation"). Here nothing else wants the GIL, and a
process that sleeps between short bursts is run by the kernel as soon as it wakes.

What the host still needs from the node's process is proof that it runs: the ``Sample``
the node's liveness loop sends every ``SAMPLE_INTERVAL_S``, which also carries the
heartbeat's figures (the log's end). A heartbeat goes out only while the last sample was
sent less than two leases ago (``PROGRESS_LEASES``, 6 s): a node whose process is stopped
(SIGSTOP, an interpreter that never lets go of the GIL) is not vouched for by its host and
is marked down as a dead one is; a node that is only slow sends a sample now and then, and
keeps its lease. A committed heartbeat renews the lease in the node's lease cell
(``node/lease_cell.py``), memory the two processes share.

Lifetimes are joined: the host ends when the node's process does (its channel reads EOF,
and PR_SET_PDEATHSIG kills it if anything is left), and the node stops when its host ends
unasked (``RoutingProxy``, ``node/routing_proxy.py``).

``python -m node.routing_host FD PARENT_PID LEASE_FD``: FD is the host's end of the socket
pair, LEASE_FD the node's lease cell (``node/lease_cell.py``), which the host writes.
Thread-safety: everything runs on the host's event loop but the replica's listeners, which
pysyncobj calls on its thread; they only pickle and hand bytes to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import pickle
import signal
import socket
import sys
import time

from node.heartbeat import Heartbeat
from node.lease_cell import LeaseCell
from node.routing_channel import (
    Applied,
    CatchUpRequest,
    Failed,
    HandLeadership,
    Outcome,
    RenewNow,
    Restored,
    Sample,
    Setup,
    Start,
    Status,
    Submit,
    frame,
    read_message,
)
from node.stop_signals import stop_on
from node.wakeups import watch_wakeups
from routing.commands import CommandResult, NodeHeartbeat, RegisterNode
from routing.controller import Controller
from routing.metadata import leadership_heirs, master_raft_addresses
from routing.replica import CommandTooLarge, RoutingReplica, RoutingUnavailable
from routing.state import RoutingState

log = logging.getLogger("ferrymq.routing_host")
# A node's process that sent no sample for this many leases (6 s by default) is taken for
# stopped: its heartbeats are withheld, and it is marked down a lease later. Patient on
# purpose: on a loaded host nodes' processes went 2-4 s without running their liveness
# thread once, and were neither dead nor wedged (Kafka waits 9 s, RocketMQ's controller
# 10 s, before either deposes a broker that stopped heartbeating). A process that is gone
# is noticed at once instead: this host ends with it.
PROGRESS_LEASES = 2.0
STATUS_INTERVAL_S = 0.2
# A host asked to stop while it leads routing hands the lead over first (``hand_over``):
# for at most this long, asking again this often (pysyncobj refuses an heir that lacks the
# last entry, which heartbeats keep adding).
HANDOVER_WAIT_S = 1.0
HANDOVER_RETRY_S = 0.05
PR_SET_PDEATHSIG = 1


class RoutingHost:
    def __init__(self, setup: Setup, writer: asyncio.StreamWriter, lease: LeaseCell) -> None:
        self.setup = setup
        self.lease = lease  # written here, read by the node before each write
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.sample: NodeHeartbeat | None = None
        self.sampled_at = 0.0
        self.registration: RegisterNode | None = None  # the node's last, sent again if lost
        self.progress_s = PROGRESS_LEASES * setup.lease_s
        self.ready = False
        self.replica = RoutingReplica(
            self_address=setup.self_address,
            voters=setup.voters,
            secret=setup.secret,
            data_dir=setup.data_dir,
            lease_s=setup.lease_s,
            on_applied=self._applied,
            on_restored=self._restored,
        )
        self.heartbeat = Heartbeat(
            interval_s=setup.heartbeat_interval_s,
            sample=self._vouched_sample,
            submit=lambda heartbeat, timeout_s: self.replica.submit(heartbeat, timeout_s),
            on_renewed=lease.renew,
            register=self._register_again,
        )
        self.controller = Controller(
            self.replica,
            setup.lease_s,
            heartbeat_interval_s=setup.heartbeat_interval_s,
            unclean_election=setup.unclean_election,
            raft_address=setup.self_address or "",
        )
        self._tasks: set[asyncio.Task] = set()
        self._started = False

    # ---- the replica's listeners (pysyncobj's thread) ----------------------------------
    def _applied(self, command: object, result: CommandResult) -> None:
        self._send_threadsafe(frame(Applied(command, result)))

    def _restored(self, state: RoutingState) -> None:
        # Pickled now, under the replica's lock: later commands replace its tables.
        self._send_threadsafe(frame(Restored(pickle.dumps(state))))

    def _send_threadsafe(self, data: bytes) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the host is ending
            self.loop.call_soon_threadsafe(self.writer.write, data)

    def _send(self, message: object) -> None:
        self.writer.write(frame(message))

    # ---- the node's requests -----------------------------------------------------------
    async def serve(self, reader: asyncio.StreamReader) -> None:
        """Until the node's process closes the channel."""
        self._spawn(self._join())
        self._spawn(self._report_status())
        # A lapse of the lease within two leases of a late wakeup is counted overload.
        self._spawn(watch_wakeups(self.lease.mark_starved, PROGRESS_LEASES * self.setup.lease_s))
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                self._handle(await read_message(reader))

    def _handle(self, message: object) -> None:
        if isinstance(message, Sample):
            # Progress is when the node's process sent the sample, not when this loop
            # read it: a host that was itself held up must not blame the node.
            if self.sample is not None and message.sent_at - self.sampled_at > self.progress_s:
                log.warning(
                    "the node's process was silent for %.1f s (read %.1f s after it sent): "
                    "its heartbeats were withheld",
                    message.sent_at - self.sampled_at,
                    time.monotonic() - message.sent_at,
                )
            self.sample, self.sampled_at = message.heartbeat, message.sent_at
        elif isinstance(message, Submit):
            command = message.command
            if isinstance(command, RegisterNode) and command.node_id == self.setup.node_id:
                self.registration = command
            call = self.replica.submit(command, message.timeout_s)
            self._spawn(self._answer(message.request_id, call))
        elif isinstance(message, CatchUpRequest):
            self._spawn(self._answer(message.request_id, self.replica.catch_up(message.timeout_s)))
        elif isinstance(message, RenewNow):
            self.heartbeat.renew_now()
        elif isinstance(message, HandLeadership):
            self.replica.hand_leadership_to(message.voter)
        elif isinstance(message, Start):
            if not self._started:
                self._started = True
                self._spawn(self.heartbeat.run())
                self._spawn(self.controller.run())
        else:
            log.error("unexpected message on the routing channel: %r", message)

    async def _answer(self, request_id: int, call) -> None:
        try:
            result = await call
        except CommandTooLarge as error:
            outcome = Outcome(request_id, error="too_large", detail=str(error))
        except RoutingUnavailable as error:
            kind = "unknown" if error.outcome_unknown else "unavailable"
            outcome = Outcome(request_id, error=kind, detail=error.detail)
        except Exception as error:  # the node must hear an answer, whatever went wrong
            log.exception("routing request %d failed", request_id)
            outcome = Outcome(request_id, error="unknown", detail=f"routing host: {error!r}")
        else:
            outcome = Outcome(request_id, result=result)
        self._send(outcome)

    def _spawn(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- liveness ----------------------------------------------------------------------
    def _vouched_sample(self) -> NodeHeartbeat | None:
        """The node's last sample while its process shows progress, else None."""
        if self.sample is None or time.monotonic() - self.sampled_at > self.progress_s:
            return None
        return dataclasses.replace(self.sample, wall_ms=int(time.time() * 1000))

    async def _register_again(self, deadline: float) -> None:
        """Routing forgot this node (its state was restored from before the node joined):
        the node's own registration, with its log's end as of the last sample."""
        sample = self._vouched_sample()
        if self.registration is None or sample is None:
            return
        again = dataclasses.replace(
            self.registration,
            max_offset=sample.max_offset,
            wall_ms=sample.wall_ms,
            damaged_log=sample.damaged_log,
        )
        await self.replica.submit(again, max(0.1, deadline - time.monotonic()))

    async def _join(self) -> None:
        try:
            await self.replica.wait_ready(self.setup.join_timeout_s)
        except RoutingUnavailable as error:
            self._send(Failed(error.detail))
            return
        self.ready = True
        self._send(self._status())

    async def _report_status(self) -> None:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            self._send(self._status())

    def _status(self) -> Status:
        replica = self.replica
        return Status(
            ready=self.ready,
            raft=replica.status(),
            is_leader=replica.is_leader(),
            leads_with_quorum=replica.leads_with_quorum(),
            heartbeat_times=self.heartbeat.times,
        )

    async def hand_over(self) -> None:
        """Asked to stop while leading routing: hand the lead to another voter (one on no
        master's node first) and wait until it took it, so routing goes on committing at
        once; closed while leading, the cluster waited for an election (0.4-1.4 s), and
        what the node's leaving makes it commit (its master dropping it from the in-sync
        set, SYNC writes held meanwhile) waited with it. Best effort: gives up after
        ``HANDOVER_WAIT_S`` or when no voter is connected."""
        replica = self.replica
        deadline = self.loop.time() + HANDOVER_WAIT_S
        asked = ""
        while replica.self_address and replica.is_leader() and self.loop.time() < deadline:
            state = replica.state
            masters = master_raft_addresses(state.members, state.broker_groups.values())
            connected = replica.status().voters_connected
            heirs = leadership_heirs(connected, masters, replica.self_address)
            if not heirs:
                return
            if heirs[0] != asked:
                log.info("stopping: handing routing leadership to %s", heirs[0])
                asked = heirs[0]
            replica.hand_leadership_to(heirs[0])
            await asyncio.sleep(HANDOVER_RETRY_S)
        if asked and replica.is_leader():
            log.info("stopping: routing leadership not taken over in %.1f s", HANDOVER_WAIT_S)

    async def quiesce(self) -> None:
        """Stop this host's own work (heartbeats, the controller, status, answers) before
        the replica closes: a heartbeat sent while pysyncobj was being destroyed failed with
        a traceback every 100 ms, as long as the destroy took (seconds on a busy host)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        self.replica.close()


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the one that started it dies (Linux), even if the
    channel's EOF is never read (this process stopped, or its loop stuck)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before the line above
        os._exit(0)


async def run(fd: int, lease_fd: int) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd))
    setup = await read_message(reader)
    assert isinstance(setup, Setup), setup
    host = RoutingHost(setup, writer, LeaseCell(lease_fd))
    stopping = asyncio.Event()
    with stop_on((signal.SIGTERM,), stopping.set):
        serving = asyncio.ensure_future(host.serve(reader))
        await asyncio.wait(
            [serving, asyncio.ensure_future(stopping.wait())], return_when="FIRST_COMPLETED"
        )
    if stopping.is_set():  # asked: leave Raft in order
        await host.hand_over()
        await host.quiesce()
        await asyncio.get_running_loop().run_in_executor(None, host.close)
    # Else the node's process is gone: so is this one, as a SIGKILL would end it. The
    # journal survives either (routing's state is only what a majority committed).


def main(argv: list[str]) -> None:
    fd, parent_pid, lease_fd = int(argv[0]), int(argv[1]), int(argv[2])
    die_with_parent(parent_pid)
    # A Ctrl-C reaches the whole process group: the node stops its host itself, in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(run(fd, lease_fd))
    os._exit(0)  # pysyncobj's threads are not waited for


if __name__ == "__main__":
    main(sys.argv[1:])
