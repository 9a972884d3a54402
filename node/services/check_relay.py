"""Orphan-transaction checks for producers connected to a node that is not the master.

Telemetry streams stay where a client opened them (any node of the group: routes name
them all, ``node/grpc/route_endpoints.py``), but only the master decides orphan checks
(``node/services/transactions.py``): it offers each check to the producers connected to
it, then appends a ``check`` record to ``%SYS%TRANS_OP``. That record reaches
every slave through replication; this relay, a dispatch listener on every node, offers
the same check to the producers connected there (the same ``CheckTargets`` rule: only to
one that may publish to the half's topic). The producer's checker answers with
EndTransaction, which its node forwards to the master (``node/grpc/forwarding.py``). A check may
so reach one producer per node: EndTransaction is idempotent (a repeated resolution of the
same kind answers OK), and RocketMQ asks its checkers the same question again anyway.

Only fresh records are relayed (``FRESH_MS``): a slave replaying a backlog (it was down,
or is new) must not flood its producers with checks the master made long ago and has
probably made again since.

After a failover the new master rebuilds its pending transactions from the log, check
counts included, and checks on; a producer whose stream was on the dead node hears the
next checks once its client opens a new stream (the official clients do so at their
next settings sync, every 5 minutes), and a half nobody resolves is rolled back after
``transaction_max_checks`` checks, as always.

Thread-safety: ``on_dispatch`` runs on the thread that dispatched (the event loop, or an
executor thread while a slave applies replicated bytes); the relay itself runs on the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from node.services.transactions import HALF_TOPIC, KIND_CHECK, OP_TOPIC, CheckTargets
from store.dispatch_request import DispatchBatch
from store.message_store import MessageStore

FRESH_MS = 10_000


class CheckRelay:
    TOPICS = (OP_TOPIC,)  # the records ``on_dispatch`` reads (``add_dispatch_listener``)

    def __init__(
        self,
        store: MessageStore,
        producers: CheckTargets,
        is_master: Callable[[], bool],
        loop: asyncio.AbstractEventLoop,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.producers = producers
        self.is_master = is_master
        self.loop = loop
        self.clock_ms = clock_ms
        self._loop_thread = threading.get_ident()
        self.relayed = 0  # checks offered to a producer here (tests)

    def on_dispatch(self, batch: DispatchBatch) -> None:
        """The store's dispatch listener: picks out fresh check records."""
        if not self.producers.registered:
            return  # no producer connected here
        oldest = self.clock_ms() - FRESH_MS
        halves = [
            int(r.properties["half"])
            for r in batch.records
            if r.topic == OP_TOPIC
            and r.properties.get("kind") == KIND_CHECK
            and r.store_timestamp_ms >= oldest
            and r.properties.get("half", "").isdigit()
        ]
        if not halves:
            return
        if threading.get_ident() == self._loop_thread:
            self._relay(halves)
        else:
            self.loop.call_soon_threadsafe(self._relay, halves)

    def _relay(self, halves: list[int]) -> None:
        if self.is_master():
            return  # the master offered its checks itself
        for offset in halves:
            half = self.store.message_at(HALF_TOPIC, 0, offset)
            if half is None:
                continue
            if self.producers.offer(half.properties.get(PROPERTY_TRANSACTION_ID, ""), half):
                self.relayed += 1
