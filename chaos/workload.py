"""The workload: writers sending unique, per-writer ordered bodies through the SDK (one
attempt per invocation, so each outcome is that invocation's), on a NORMAL topic and, with
a message group, on a FIFO topic, with a lite topic on a LITE topic and with a priority on
a PRIORITY topic; a pull consumer committing offsets and two POP groups on the NORMAL topic
(one of them nacks the doomed bodies until they are dead-lettered, and a resender gives
its dead letters back to it), a FIFO POP group on the FIFO topic, a lite consumer of every
lite topic, a POP group on the PRIORITY topic; the wait until the consumers caught up
after heal; and the final drain that reads every replica's CommitLog offline.

Each writer and consumer runs on its own thread and stops when its event is set: the
writers first, the consumers once they caught up (``wait_caught_up``).
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from chaos.history import (
    DLQ_GROUP,
    FAILED,
    FIFO_TOPIC,
    LITE_TOPIC,
    NOT_REPLICATED,
    OK,
    PRIORITY_TOPIC,
    TOPIC,
    UNKNOWN,
    CatchUp,
    Delivery,
    History,
    MasterSnapshot,
    PopDelivery,
    Replica,
    Resend,
    ServedRecord,
    StoredRecord,
    doomed,
)
from ferrymq.client import (
    Admin,
    FerryError,
    LiteConsumer,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SimpleConsumer,
)
from ferrymq.client.errors import MALFORMED_ANSWER, TRANSPORT
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

TOPICS = (TOPIC, FIFO_TOPIC, LITE_TOPIC, PRIORITY_TOPIC)
SETUP_DEADLINE_S = 30.0  # creating the topics and groups of a cluster just started
GROUP = "chaos-readers"  # pull consumer of TOPIC
POP_GROUP = "chaos-pop"  # POP consumer of TOPIC
FIFO_GROUP = "chaos-fifo-pop"  # FIFO POP consumer of FIFO_TOPIC
LITE_GROUP = "chaos-lite-pop"  # lite consumer of LITE_TOPIC
PRIORITY_GROUP = "chaos-priority-pop"  # POP consumer of PRIORITY_TOPIC
# What each kind of writer sends: its bodies' first letter and its topic.
WRITER_KINDS = {
    "normal": ("w", TOPIC),
    "fifo": ("f", FIFO_TOPIC),
    "lite": ("l", LITE_TOPIC),
    "priority": ("p", PRIORITY_TOPIC),
}
# One lite writer and one priority writer beside the NORMAL and FIFO ones: each lite
# writer sends to this many lite topics of its own, in turn.
LITE_WRITERS = 1
PRIORITY_WRITERS = 1
LITE_TOPICS_PER_WRITER = 4
# The dead-letter group's attempts: a doomed body is nacked this many times, the last
# nack moves it to %DLQ%chaos-dlq. Low, so it gets there within seconds.
DLQ_ATTEMPTS = 3
NACK_INVISIBLE_S = 1.0  # the node's shortest invisible duration
# How often the resender reads the dead-letter group's DLQ and resends what was not
# resent yet, and how many entries it reads a page (the node's most).
RESEND_EVERY_S = 10.0
DEAD_LETTERS_PAGE = 200
QUEUES = 4
# Each FIFO writer spreads its sends over this many message groups, in turn.
FIFO_GROUPS_PER_WRITER = 3
# Short, so a delivery whose ack failed comes back soon (the catch-up waits for it), yet
# longer than an ack takes while the cluster is healthy.
INVISIBLE_S = 2.0
ACKS_IN_PARALLEL = 8
# The NORMAL POP group leaves every RELEASE_EVERY-th delivery unacked on purpose: it
# must come back once invisible time ends, through failovers too (the checker counts it
# delivered only then). The FIFO group does so less often, since a held message blocks
# its queue for the invisible time; and with it the later messages of its message group
# in the same batch: in order, nothing after it may be consumed before it.
RELEASE_EVERY = 50
FIFO_RELEASE_EVERY = 100
# Each writer's ceiling: SYNC writers stay below it (about 35/s each here), ASYNC ones
# would send several times more, more than the POP groups (an append per receive and per
# ack) and a restarted slave's catch-up can follow, so the consumers could never drain.
SENDS_PER_S_PER_WRITER = 50.0
# Answers that mean nothing was written (the node refused before appending): among them
# back-pressure (TOO_MANY_REQUESTS: the in-sync set is behind, a limit is reached), which
# docs/guarantees.md promises writes nothing. The checker holds each to it ("refused yet
# present").
REFUSED = frozenset({pb.HA_NOT_AVAILABLE, pb.TOPIC_NOT_FOUND, pb.BAD_REQUEST, pb.TOO_MANY_REQUESTS})
# Stored on the master, durability or replication not confirmed in time.
NOT_CONFIRMED = frozenset({pb.SLAVE_PERSISTENCE_TIMEOUT, pb.MASTER_PERSISTENCE_TIMEOUT})
PAUSE_AFTER_ERROR_S = 0.05  # a refused writer does not spin while the cluster fails over


def outcome_of(error: FerryError) -> str:
    if error.code == TRANSPORT:
        # A request that never left (no connection to the node) cannot have been stored.
        return FAILED if error.unsent else UNKNOWN
    if error.code in REFUSED:
        return FAILED
    if error.code in NOT_CONFIRMED:
        return NOT_REPLICATED
    return UNKNOWN


def create_topics(admin: Admin, deadline_s: float = SETUP_DEADLINE_S) -> None:
    """The workload's topics and consumer groups. Each is created again while routing
    answers UNAVAILABLE (a leadership handover as the new cluster becomes whole can leave
    a create's outcome unknown), and one that exists already counts as made."""
    creates = [
        lambda: admin.create_topic(TOPIC, QUEUES),
        lambda: admin.create_topic(FIFO_TOPIC, QUEUES, message_type="FIFO"),
        lambda: admin.create_topic(LITE_TOPIC, QUEUES, message_type="LITE"),
        lambda: admin.create_topic(PRIORITY_TOPIC, QUEUES, message_type="PRIORITY"),
        lambda: admin.create_group(GROUP),
        lambda: admin.create_group(POP_GROUP),
        lambda: admin.create_group(FIFO_GROUP, fifo=True),
        lambda: admin.create_group(LITE_GROUP),
        lambda: admin.create_group(PRIORITY_GROUP),
        lambda: admin.create_group(DLQ_GROUP, max_delivery_attempts=DLQ_ATTEMPTS),
    ]
    deadline = time.monotonic() + deadline_s
    for create in creates:
        until(lambda create=create: created(create, deadline), deadline_s, "the workload's setup")


def created(create, deadline: float) -> bool:
    """Whether ``create()`` made its topic or group, or found it made; False to try again
    (routing UNAVAILABLE, before ``deadline``)."""
    try:
        create()
    except FerryError as error:
        if error.code_name == "ALREADY_EXISTS":
            return True
        if error.code_name == "UNAVAILABLE" and time.monotonic() < deadline:
            return False
        raise
    return True


def lite_topics(writer: int) -> list[str]:
    """The lite topics lite writer ``writer`` sends to, in turn."""
    return [f"l{writer}-t{k}" for k in range(LITE_TOPICS_PER_WRITER)]


def priority_of(seq: int) -> int:
    return seq % QUEUES


def writer(
    history: History,
    access: str,
    number: int,
    stop: threading.Event,
    t0: float,
    kind: str = "normal",
) -> None:
    """Sends ``w<number>-<seq>`` one at a time; of the ``fifo`` kind, ``f<number>-<seq>``
    to the FIFO topic, message group ``f<number>-g<seq % FIFO_GROUPS_PER_WRITER>``; of the
    ``lite`` kind, ``l<number>-<seq>`` to the LITE topic, to its lite topics in turn (each
    recorded as the send's message group: it is delivered in order); of the ``priority``
    kind, ``p<number>-<seq>`` to the PRIORITY topic, priority ``priority_of(seq)``."""
    letter, topic = WRITER_KINDS[kind]
    with Producer(access, max_attempts=1, timeout_s=3) as producer:
        seq = 0
        next_s = time.monotonic()
        while not stop.wait(max(0.0, next_s - time.monotonic())):
            next_s = max(next_s, time.monotonic()) + 1 / SENDS_PER_S_PER_WRITER
            body = f"{letter}{number}-{seq}"
            group = ""
            if kind == "fifo":
                group = f"f{number}-g{seq % FIFO_GROUPS_PER_WRITER}"
            elif kind == "lite":
                group = lite_topics(number)[seq % LITE_TOPICS_PER_WRITER]
            send = history.invoke(number, seq, body, time.monotonic() - t0, topic, group)
            try:
                message = Message(
                    topic,
                    body.encode(),
                    message_group=group if kind == "fifo" else None,
                    lite_topic=group if kind == "lite" else None,
                    priority=priority_of(seq) if kind == "priority" else None,
                )
                receipt = producer.send(message)
                history.complete(send, OK, time.monotonic() - t0, offset=receipt.queue_offset)
            except FerryError as error:
                history.complete(send, outcome_of(error), time.monotonic() - t0, error.code_name)
                producer.endpoints.forget(topic)  # the next send asks for a fresh route
                stop.wait(PAUSE_AFTER_ERROR_S)
            seq += 1


class DeadLetterResender:
    """Gives the dead-letter group's dead letters back to it: every ``RESEND_EVERY_S``
    until the consumers stop, it reads the group's DLQ (``Admin.dead_letters``, at the
    broker group's master) and resends the entries not resent yet. Their message ids
    are known as resent before the call (a resent message may be delivered before the
    answer), and the group's consumer acks a delivery of one, so a doomed body goes round
    once: nacked until dead-lettered, resent, delivered again, acked.

    ``backlog`` is its part of the catch-up wait: the entries the last read found whose
    message was not delivered since it was asked to be resent (resent ones the node has
    not given back, and ones still to resend), and how many were delivered again. (A read
    skips the entries done before it, which count nothing.)"""

    def __init__(self, history: History, access: str, t0: float) -> None:
        self.history, self.access, self.t0 = history, access, t0
        self._lock = threading.Lock()
        self._asked: set[str] = set()  # message ids named in a resend call
        self._delivered: set[str] = set()  # of those, delivered to the group since
        self._last_read: list[str] | None = None  # the message ids the last read found
        self._done_below = 0  # the DLQ offset below which all was resent and delivered

    def asked(self, message_id: str) -> bool:
        with self._lock:
            return message_id in self._asked

    def delivered(self, message_id: str) -> None:
        with self._lock:
            self._delivered.add(message_id)

    def backlog(self) -> dict[str, Backlog]:
        with self._lock:
            waiting = None
            if self._last_read is not None:
                waiting = sum(1 for m in self._last_read if m not in self._delivered)
            return {f"{DLQ_GROUP} resends": Backlog(waiting, len(self._delivered))}

    def run(self, stop: threading.Event) -> None:
        """A round every ``RESEND_EVERY_S``, each through the next node in turn (any node
        hands the calls to the master): one down or cut off stops no more than a round."""
        nodes = self.access.split(",")
        for turn in itertools.count():
            if stop.wait(RESEND_EVERY_S):
                return
            try:
                with Admin(nodes[turn % len(nodes)], timeout_s=5) as admin:
                    self.resend_round(admin)
            except FerryError:
                continue  # a failover: the next round reads again

    def resend_round(self, admin: Admin) -> None:
        """One read of the DLQ, resending each page's entries not resent yet. The read
        starts past the entries the last one found resent and delivered again (all of
        them when the queue is shorter than that now: a new master's, under ASYNC)."""
        start = self._done_below
        page = admin.dead_letters(DLQ_GROUP, from_offset=start, limit=DEAD_LETTERS_PAGE)
        if start > page.max_offset:
            start = 0
            page = admin.dead_letters(DLQ_GROUP, from_offset=0, limit=DEAD_LETTERS_PAGE)
        read: list[str] = []
        done_below, done = start, True
        while page.entries:
            fresh = [e for e in page.entries if not e.resent]
            if fresh:
                self._resend(admin, page.broker_group, fresh)
            read += [e.message_id for e in page.entries]
            with self._lock:
                for entry in page.entries:
                    done = done and entry.resent and entry.message_id in self._delivered
                    if done:
                        done_below = entry.offset + 1
            after = page.entries[-1].offset + 1
            if after >= page.max_offset:
                break
            page = admin.dead_letters(
                DLQ_GROUP,
                broker_group=page.broker_group,
                from_offset=after,
                limit=DEAD_LETTERS_PAGE,
            )
        with self._lock:
            self._last_read = read
        self._done_below = done_below

    def _resend(self, admin: Admin, broker_group: str, entries: list) -> None:
        offsets = [e.offset for e in entries]
        ids = [e.message_id for e in entries]
        with self._lock:
            self._asked.update(ids)
        resend = self.history.resend_asked(Resend(self.now(), broker_group, offsets, ids))
        try:
            answer = admin.resend_dead_letters(
                DLQ_GROUP, offsets=offsets, broker_group=broker_group
            )
        except FerryError as error:
            self.history.resend_answered(resend, outcome_of(error), self.now(), error.code_name)
            raise
        self.history.resend_answered(
            resend,
            OK,
            self.now(),
            resent=answer.resent,
            already_resent=answer.already_resent,
            not_yet=answer.not_yet,
        )

    def now(self) -> float:
        return time.monotonic() - self.t0


def pop_consumer(
    history: History,
    access: str,
    group: str,
    topic: str,
    stop: threading.Event,
    t0: float,
    release_every: int = 0,
    nack_doomed: bool = False,
    lite_topics: list[str] | None = None,
    resender: DeadLetterResender | None = None,
) -> None:
    """A POP consumer that acks every message of a batch as soon as it is received (the
    acks of a batch in parallel, each a replicated append, so the group keeps up with the
    writers), recording every delivery and its ack's outcome; after an error (failover)
    it starts over with a fresh route, and what was not acked comes back once visible.
    With ``release_every``, every such delivery is left unacked on purpose; with
    ``nack_doomed``, every delivery of a doomed body is nacked (its last attempt's nack
    dead-letters it) unless ``resender`` asked for it to be resent; with
    ``lite_topics``, a lite consumer subscribed to them."""

    def opened() -> SimpleConsumer:
        if lite_topics is None:
            return SimpleConsumer(access, group, topic, timeout_s=3)
        lite = LiteConsumer(access, group, topic, timeout_s=3)
        try:
            lite.subscribe(lite_topics)
        except BaseException:
            lite.close()
            raise
        return lite

    def ack(pop: SimpleConsumer, message: ReceivedMessage, delivery: PopDelivery) -> bool:
        invoked_s = time.monotonic() - t0
        try:
            pop.ack(message)
        except FerryError as error:
            outcome = outcome_of(error)
            history.acked(delivery, outcome, invoked_s, time.monotonic() - t0, error.code_name)
            return False
        history.acked(delivery, OK, invoked_s, time.monotonic() - t0)
        return True

    def nack(pop: SimpleConsumer, message: ReceivedMessage, delivery: PopDelivery) -> bool:
        try:
            pop.change_invisible_duration(message, NACK_INVISIBLE_S)
        except FerryError:
            return False  # recorded as never acked: it comes back once visible
        history.nacked(delivery)
        return True

    received = 0
    with ThreadPoolExecutor(ACKS_IN_PARALLEL, thread_name_prefix=f"ack-{group}") as acks:
        while not stop.is_set():
            try:
                with opened() as pop:
                    while not stop.is_set():
                        asked_s = time.monotonic() - t0
                        batch = pop.receive(16, invisible_s=INVISIBLE_S, wait_s=0.5)
                        at_s = time.monotonic() - t0
                        done = []
                        held: set[str] = set()  # message groups released in this batch
                        for m in batch:
                            delivery = history.pop_deliver(popped(m, group, asked_s, at_s))
                            received += 1
                            in_order = delivery.message_group  # FIFO's, or a lite topic
                            given_back = resender is not None and resender.asked(m.message_id)
                            if given_back:
                                resender.delivered(m.message_id)
                            if in_order and in_order in held:
                                history.released(delivery)
                            elif release_every and received % release_every == 0:
                                history.released(delivery)
                                if in_order:
                                    held.add(in_order)
                            elif nack_doomed and doomed(delivery.body) and not given_back:
                                done.append(acks.submit(nack, pop, m, delivery))
                            else:
                                done.append(acks.submit(ack, pop, m, delivery))
                        if not all(f.result() for f in done):
                            break  # a fresh consumer: the route may be stale
            except FerryError:
                pass
            stop.wait(PAUSE_AFTER_ERROR_S)


def popped(message: ReceivedMessage, group: str, asked_s: float, at_s: float) -> PopDelivery:
    return PopDelivery(
        asked_s,
        at_s,
        group,
        message.topic,
        message.queue_id,
        message.queue_offset,
        message.body.decode(),
        message.delivery_attempt,
        message.message_group or message.lite_topic or "",
        message_id=message.message_id,
        resent=message.resent_dead_letter,
    )


def consumer(history: History, access: str, stop: threading.Event, t0: float) -> None:
    """A pull consumer that commits after every batch; errors (failover) are retried. An
    answer that does not decode is a finding (then retried, so the run still ends)."""
    while not stop.is_set():
        try:
            with PullConsumer(access, GROUP, timeout_s=3) as pull:
                pull.assign(TOPIC, list(range(QUEUES)))
                while not stop.is_set():
                    for m in pull.poll(wait_s=0.2):
                        history.deliver(
                            Delivery(
                                time.monotonic() - t0,
                                GROUP,
                                m.queue_id,
                                m.queue_offset,
                                m.body.decode(),
                            )
                        )
                    pull.commit()
        except FerryError as error:
            if error.code == MALFORMED_ANSWER:
                history.client_error(time.monotonic() - t0, f"pull consumer: {error}")
            stop.wait(PAUSE_AFTER_ERROR_S)


def start(
    history: History,
    access: str,
    t0: float,
    writers: int,
    fifo_writers: int,
    stop_writers: threading.Event,
    stop_consumers: threading.Event,
) -> tuple[list[threading.Thread], list[threading.Thread], DeadLetterResender]:
    """Start the writers, the consumers and the dead-letter group's resender: the
    writers' threads, the others', and the resender (its backlog, for the catch-up)."""
    history.consumers = {
        GROUP: TOPIC,
        POP_GROUP: TOPIC,
        FIFO_GROUP: FIFO_TOPIC,
        DLQ_GROUP: TOPIC,
        LITE_GROUP: LITE_TOPIC,
        PRIORITY_GROUP: PRIORITY_TOPIC,
    }

    def thread(name: str, target, *args) -> threading.Thread:
        return threading.Thread(target=recording_errors(history, name, t0, target, *args))

    writing = [
        thread(f"writer {i}", writer, history, access, i, stop_writers, t0) for i in range(writers)
    ]
    more = [("fifo", fifo_writers), ("lite", LITE_WRITERS), ("priority", PRIORITY_WRITERS)]
    writing += [
        thread(f"{kind} writer {i}", writer, history, access, i, stop_writers, t0, kind)
        for kind, count in more
        for i in range(count)
    ]
    reading = [thread("pull consumer", consumer, history, access, stop_consumers, t0)]
    every_lite_topic = [name for i in range(LITE_WRITERS) for name in lite_topics(i)]
    resender = DeadLetterResender(history, access, t0)
    pop_groups = (
        (POP_GROUP, TOPIC, RELEASE_EVERY, False),
        (FIFO_GROUP, FIFO_TOPIC, FIFO_RELEASE_EVERY, False),
        (DLQ_GROUP, TOPIC, 0, True, None, resender),
        (LITE_GROUP, LITE_TOPIC, FIFO_RELEASE_EVERY, False, every_lite_topic),
        (PRIORITY_GROUP, PRIORITY_TOPIC, RELEASE_EVERY, False),
    )
    reading += [
        thread(group, pop_consumer, history, access, group, topic, stop_consumers, t0, *how)
        for group, topic, *how in pop_groups
    ]
    reading.append(thread("dead-letter resender", resender.run, stop_consumers))
    for started in writing + reading:
        started.start()
    return writing, reading, resender


def recording_errors(history: History, name: str, t0: float, target, *args):
    """``target(*args)`` for a workload thread, recording the exception that ends it: a
    thread that died quietly would show only as writes or deliveries that stopped."""

    def run() -> None:
        try:
            target(*args)
        except Exception as error:
            history.client_error(time.monotonic() - t0, f"{name} ended: {error!r}")
            raise

    return run


def wait_caught_up(
    addresses: list[str],
    consumers: dict[str, str],
    stall_s: float,
    limit_s: float,
    more: Callable[[], dict[str, Backlog]] = dict,
) -> CatchUp:
    """Until every consumer group has no lag and nothing in flight on any queue of its
    topic (as the masters see it), nor any of ``more``'s backlogs anything left (the
    dead-letter resender's). A group still moving is waited for: the wait ends when no
    group progressed for ``stall_s`` (stuck), or after ``limit_s`` in all."""
    return wait_until_drained(
        lambda: {**group_backlogs(addresses, consumers), **more()}, stall_s, limit_s
    )


@dataclass(frozen=True)
class Backlog:
    """One group's work left (lag plus in flight) and how far it has consumed (the sum of
    its committed offsets); ``None`` when no master answered for it."""

    remaining: int | None
    consumed: int = 0

    def describe(self) -> str:
        if self.remaining is None:
            return "no master answered"
        return f"{self.remaining} left (lag and in flight)"


def group_backlogs(addresses: list[str], consumers: dict[str, str]) -> dict[str, Backlog]:
    """Each group's backlog from the first node whose Admin answers."""
    for address in addresses:
        try:
            with Admin(address, timeout_s=2) as admin:
                backlogs = {}
                for group, topic in consumers.items():
                    progress = admin.group_progress(group, topic)
                    backlogs[group] = Backlog(
                        sum(q.lag + q.in_flight for q in progress),
                        sum(q.consumer_offset for q in progress),
                    )
                return backlogs
        except FerryError:
            continue
    return {group: Backlog(None) for group in consumers}


def wait_until_drained(
    read_backlogs: Callable[[], dict[str, Backlog]],
    stall_s: float,
    limit_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> CatchUp:
    """Poll ``read_backlogs`` until every group has nothing left. Progress is a group's
    backlog below its lowest yet or its consumed count above its highest yet: both
    measures are monotone, so a group that goes round in circles (redelivered, never
    finished) is not taken for one that moves, and the wait stays bounded by ``limit_s``."""
    started = last_progress = clock()
    lowest: dict[str, int] = {}
    highest: dict[str, int] = {}
    while True:
        backlogs = read_backlogs()
        now = clock()
        for group, backlog in backlogs.items():
            if backlog.remaining is None:
                continue
            if group not in lowest or backlog.remaining < lowest[group]:
                lowest[group], last_progress = backlog.remaining, now
            if group not in highest or backlog.consumed > highest[group]:
                highest[group], last_progress = backlog.consumed, now
        behind = {g: b.describe() for g, b in backlogs.items() if b.remaining != 0}
        waited = now - started
        stalled = now - last_progress >= stall_s
        if not behind or stalled or waited >= limit_s:
            return CatchUp(limit_s, round(waited, 3), not behind, behind, stall_s)
        sleep(0.2)


def read_served(access: str) -> list[ServedRecord]:
    """Every record of the workload topics as the masters serve them (Data.Fetch from each
    queue's first offset), read while the healed cluster runs; the checker compares it
    with what the offline drain finds in the logs."""
    served = []
    for topic in TOPICS:
        with PullConsumer(access, GROUP, start="beginning", batch_size=4096, timeout_s=10) as pull:
            pull.assign(topic, list(range(QUEUES)))
            while batch := pull.poll(wait_s=0):
                served.extend(
                    ServedRecord(topic, m.queue_id, m.queue_offset, m.body.decode()) for m in batch
                )
    return served


@dataclass(frozen=True)
class LogCopies:
    """Copies of stopped nodes' logs, taken at once and read later. Copying a data
    directory takes a moment; reading the records out of it takes seconds of CPU (more as
    the log grows), which a fault must not spend while its nodes wait to be restarted:
    the recovery it measures would be the harness's (``Nemesis.settle``)."""

    scratch: str
    store_settings: dict

    def take(self, node_id: str, data_dir: str) -> str:
        """A copy of ``data_dir`` as it is now; the node may still run (an isolated
        master): files it renames or removes meanwhile are skipped, none of which the
        records are read from."""
        copy = os.path.join(self.scratch, f"snapshot-{node_id}-{time.monotonic_ns()}")
        transient = shutil.ignore_patterns("*.tmp", "*.pending", "chaos-sync-*")
        shutil.copytree(data_dir, copy, ignore=transient)
        return copy

    def read(self, node_id: str, copy: str) -> MasterSnapshot:
        """Where every workload body sits in the copy, and its last epoch; the copy goes."""
        from ha.epochs import EpochHistory

        try:
            records = read_records(copy, self.store_settings)[1]
            positions = {r.body: r.physical_offset for r in records}
            return MasterSnapshot(node_id, EpochHistory(copy).last_epoch, positions)
        finally:
            shutil.rmtree(copy, ignore_errors=True)


def read_records(
    data_dir: str, store_settings: dict
) -> tuple[int, list[StoredRecord], list[str], list[str]]:
    """The CommitLog end, the workload topics' records, the bodies in the dead-letter
    topics of the groups that ack everything, and those in the dead-letter group's, of
    one (stopped) node."""
    from store.config import StoreConfig
    from store.message_store import MessageStore

    acking = (GROUP, POP_GROUP, FIFO_GROUP, LITE_GROUP, PRIORITY_GROUP)
    dead_letter_topics = {f"%DLQ%{group}" for group in acking}
    store = MessageStore.open(StoreConfig(data_dir, **store_settings))
    try:
        log = store.commitlog
        records, dead_lettered, on_purpose = [], [], []
        for m in log.iterate(log.min_offset, log.write_offset):
            if m.topic in TOPICS:
                records.append(
                    StoredRecord(
                        m.queue_id, m.queue_offset, m.physical_offset, m.body.decode(), m.topic
                    )
                )
            elif m.topic in dead_letter_topics:
                dead_lettered.append(m.body.decode())
            elif m.topic == f"%DLQ%{DLQ_GROUP}":
                on_purpose.append(m.body.decode())
        return log.write_offset, records, dead_lettered, on_purpose
    finally:
        store.shutdown()


def log_digest(data_dir: str, length: int) -> str:
    digest = hashlib.sha256()
    remaining = length
    for path in sorted(glob.glob(os.path.join(data_dir, "commitlog", "*"))):
        with open(path, "rb") as f:
            chunk = f.read(remaining)
        digest.update(chunk)
        remaining -= len(chunk)
        if remaining <= 0:
            break
    return digest.hexdigest()


def rolled_back(data_dirs: list[str]) -> tuple[list[str], list[str]]:
    """The workload bodies in every node's rollback files (tails cut at a rejoin), and
    ``<file>: <error>`` for each file that could not be read (a finding, not a crash)."""
    from ha import rollback

    bodies, unreadable = set(), []
    for data_dir in data_dirs:
        for path in rollback.rollback_files(data_dir):
            try:
                kept = [m.body.decode() for m in rollback.records_in(path) if m.topic in TOPICS]
            except (OSError, ValueError) as error:
                unreadable.append(f"{path}: rollback file not readable: {error}")
                continue
            bodies.update(kept)
    return sorted(bodies), unreadable


def drain(
    nodes: list[tuple[str, str, str]], store_settings: dict
) -> tuple[list[Replica], list[str]]:
    """Read every replica ``(id, role, data_dir)`` of a stopped cluster; digests of each
    log up to the common end. Also returns ``<node>: <error>`` for each replica whose
    store could not be opened: a finding for the report (the node could not restart
    either), not a reason to lose the run's history."""
    read: list[tuple[Replica, str]] = []
    unreadable = []
    for node_id, role, data_dir in nodes:
        try:
            end, records, dead_lettered, on_purpose = read_records(data_dir, store_settings)
        except Exception as error:  # the store's own checks (assertions included)
            unreadable.append(f"{node_id}: store not readable: {type(error).__name__}: {error}")
            continue
        replica = Replica(node_id, role, end, records, {}, dead_lettered, on_purpose)
        read.append((replica, data_dir))
    common = min((replica.log_end for replica, _ in read), default=0)
    for replica, data_dir in read:
        replica.digest_to[common] = log_digest(data_dir, common)
    return [replica for replica, _ in read], unreadable
