"""Tail reads: a read parked at its queue's end answered by the dispatch of the records it
waits for, on a SYNC master, before the read cap has moved and the read's task has run.

Without it, a tailing reader's answer on a SYNC master waited for three things after the
confirming ACK: the reput (the consume-queue and index entries the appends left, ~28 µs
here for one record), the read cap's move and the wake-up of the parked read's task, and
that task's read of the queue through the consume queue (bench/RESULTS.md, "A parked
fetch answered by the reput"). Here the reput, once a run's consume-queue entries are
written and before the index and the dispatch listeners, hands each parked read waiting
at that run's first offset the records of the run (``CommitLog.gather``, the read's own
C loop over the same entries, stopping at the read cap the confirmation sets); the door
writes its answer at once (the remoting door's ``answer_ahead``). The read's task still
wakes and finds its answer given.

It decides nothing about who may read: a read is parked here only by ``ReadService.read``
after its rules passed and its first look found nothing, and only when nothing filters it
(no tags, no SQL) and its door can answer from a callback (FERRY_FETCH). It answers only
what that read would have found at the new cap: the entries from its offset, the records
ending at or below the cap, its count and byte limits. Anything else (another offset, a
filtered read, the gRPC and 4.x doors, a dispatch in an append, a slave) is answered as
before, when the cap moves.

Thread-safety: the node's event loop (the reput runs there; ``on_run`` asserts nothing
else calls it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from store.dispatch_request import QueueRun
from store.message_store import MessageStore
from store.results import GetResult

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class ParkedRead:
    """A read waiting at queue offset ``offset``; ``take(result)`` gives it what it found
    and answers it (False: it does not take that result, and stays parked). A read that
    took it and waits on moves ``offset`` past the result, and stays parked."""

    offset: int
    max_count: int
    max_bytes: int
    take: Callable[[GetResult], bool]


class TailReads:
    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._parked: dict[tuple[str, int], list[ParkedRead]] = {}
        self._loop_thread = threading.get_ident()

    def park(self, topic: str, queue_id: int, read: ParkedRead) -> None:
        self._parked.setdefault((topic, queue_id), []).append(read)

    def unpark(self, topic: str, queue_id: int, read: ParkedRead) -> None:
        """Forget ``read`` (answered, timed out or cancelled); nothing if it is gone."""
        parked = self._parked.get((topic, queue_id))
        if parked is not None and read in parked:
            parked.remove(read)
            if not parked:
                del self._parked[(topic, queue_id)]

    def on_run(self, run: QueueRun, readable: int) -> None:
        """``MessageStore.set_run_reader``: the reads parked at ``run``'s first offset get
        its records ending at or below ``readable``. Never raises into the dispatch: a
        read that fails here is logged and stays parked (its task reads when the cap
        moves)."""
        assert threading.get_ident() == self._loop_thread, "tail reads off the loop"
        topic, queue_id, first_offset, _ = run
        parked = self._parked.get((topic, queue_id))
        if not parked:
            return
        for read in [r for r in parked if r.offset == first_offset]:
            try:
                result = self._store.read_run(run, readable, read.max_count, read.max_bytes)
                # A read that took the run and waits on from a later offset (a followed
                # fetch's next read) stays parked.
                if result is not None and read.take(result) and read.offset == first_offset:
                    self.unpark(topic, queue_id, read)
            except Exception:
                log.exception("a tail read of %s:%d failed; it reads at the cap", topic, queue_id)
