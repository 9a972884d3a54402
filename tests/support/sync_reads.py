"""A SYNC master's reads in-process, wired as the node wires them: a real store, the
master on a hand-driven clock (its slaves links acknowledging with ``record_ack``), the
node's long polls and tail reads, and the read service with the ACL off."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ferrymq.client.messages import decode_records
from node.long_polling import QueueWaiters
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from node.services.reads import ReadService
from node.tail_reads import TailReads
from node.topics import TopicConfig, TopicTable
from routing.metadata import GroupConfig
from store.message import Message
from store.message_store import MessageStore
from tests.support.manual_clock import ManualClock
from tests.support.sync_master import master_of

CALLER = Caller(Door.REMOTING, "remoting:FERRY_FETCH", None)
WAIT_S = 30.0


class Group:
    """A SYNC master with two slaves over ``store``, the node's long polls and tail reads
    wired as ``node/server.py`` and ``ha/role.py`` wire them, and its read service."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.master = master_of(store, ManualClock(), min_insync=3)
        self.master.activate(frozenset({"m", "s1", "s2"}))
        self.slaves = [self.master.open_link(s, 0, store.write_offset) for s in ("s1", "s2")]
        store.set_confirmed_offset(store.write_offset)  # reads capped from the start
        self.waiters = QueueWaiters(asyncio.get_running_loop(), read_cap=store.read_cap)
        store.add_dispatch_listener(self.waiters.on_dispatch)
        tail_reads = TailReads(store)
        store.set_run_reader(tail_reads.on_run)
        self.master.on_confirmed = self._confirmed
        self.delivered: list[int] = []
        self.reads = ReadService(
            store,
            TopicTable([TopicConfig("orders", queue_count=2)], [GroupConfig("G")]),
            self.waiters,
            None,
            Permissions(enabled=False),
            SimpleNamespace(delivered=lambda topic, group, n, size: self.delivered.append(n)),
            tail_reads=tail_reads,
        )

    def _confirmed(self, offset: int) -> None:  # ``ReplicationRole._confirmed``
        self.store.set_confirmed_offset(offset)
        self.waiters.readable_moved()

    def fetch(self, given: list, offset: int = 0, **fields) -> asyncio.Task:
        """A FERRY_FETCH of queue 0 waiting up to ``WAIT_S``; what is answered ahead is
        appended to ``given`` with the read cap at that moment."""
        options = {"max_messages": 0, "max_bytes": 0, "tags": []} | fields
        return asyncio.ensure_future(
            self.reads.fetch(
                CALLER,
                "orders",
                "G",
                0,
                offset,
                options["max_messages"],
                options["max_bytes"],
                options["tags"],
                WAIT_S,
                lambda outcome: given.append((outcome, self.store.read_cap())),
            )
        )

    def fetch_now(self, ends, offset: int = 0, wait_s: float = WAIT_S, **fields) -> bool:
        """``fetch``'s read taken by ``ReadService.fetch_now`` (the fetch lane's), ending
        through ``ends``."""
        options = {"topic": "orders", "group": "G", "queue_id": 0} | fields
        return self.reads.fetch_now(
            CALLER,
            options["topic"],
            options["group"],
            options["queue_id"],
            offset,
            options.get("max_messages", 0),
            options.get("max_bytes", 0),
            wait_s,
            ends,
        )

    def waiting(self) -> tuple[dict, dict]:
        """What reads left waiting: the queue listeners and the parked tail reads."""
        return self.waiters._listeners, self.reads.tail_reads._parked

    async def put(self, *bodies: bytes, tag: str = "") -> list[int]:
        """Append ``bodies`` to queue 0 as one batch: each record's end offset."""
        messages = [Message.build("orders", body, queue_id=0, tags=tag or None) for body in bodies]
        result = await self.store.put_messages_async(messages)
        assert result.ok
        return [a.physical_offset + a.size for a in result.appended]

    def ack(self, end: int) -> None:
        for slave in self.slaves:
            self.master.record_ack(slave, end)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def bodies(outcome) -> list[bytes]:
    return [r.body for r in decode_records(b"".join(outcome.records))]


class Ends:
    """``FetchEnds`` that records: the answers, the failures, the reads held."""

    def __init__(self, hold: bool = True) -> None:
        self.answers: list = []
        self.failures: list[Exception] = []
        self.held: set = set()
        self._hold = hold

    def answer(self, outcome) -> None:
        self.answers.append(outcome)

    def fail(self, error: Exception) -> None:
        self.failures.append(error)

    def hold(self, read) -> bool:
        if self._hold:
            self.held.add(read)
        return self._hold

    def release(self, read) -> None:
        self.held.discard(read)
