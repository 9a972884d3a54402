"""The recorded history of one chaos run: every send invocation and its outcome, every
delivery to a consumer (pull, and POP with its ack's outcome), every resend of the
dead-letter group's dead letters, every fault window, how long the consumers took to
catch up after heal, and the final state drained from each replica.

Times are ``time.monotonic()`` seconds relative to the run's start. A ``History`` is filled
by several threads (writers, the consumer, the nemesis): every append holds its lock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

# Outcomes of a send, from the writer's point of view.
OK = "ok"  # acknowledged: the mode's promise covers it
NOT_REPLICATED = "not-replicated"  # stored on the master, not confirmed by the slaves in time
FAILED = "failed"  # refused before anything was written (the node said so)
UNKNOWN = "unknown"  # no answer (transport error, deadline): it may or may not be stored
OUTCOMES = (OK, NOT_REPLICATED, FAILED, UNKNOWN)
NOT_ACKED = ""  # a POP delivery whose ack was never attempted (the consumer failed over)
RELEASED = "released"  # left unacked on purpose: it must be delivered again once visible
NACKED = "nacked"  # handed back on purpose (doomed): redelivered until it is dead-lettered

TOPIC = "chaos"  # NORMAL topic: the pull consumer and a POP group read it
FIFO_TOPIC = "chaos-fifo"  # FIFO topic: sends carry a message group; a FIFO POP group
# LITE topic (RocketMQ 5.5): sends name a lite topic of their writer's; a lite consumer
# subscribed to all of them receives each lite topic in order.
LITE_TOPIC = "chaos-lite"
# PRIORITY topic (RocketMQ 5.4): a send's priority is its queue; a POP group takes the
# highest first.
PRIORITY_TOPIC = "chaos-priority"
# The dead-letter group nacks every delivery of a doomed body until the node moves it to
# its %DLQ% topic (one body of the NORMAL topic in DOOM_EVERY); a resender gives the
# dead letters back to the group, which acks each resent one.
DLQ_GROUP = "chaos-dlq"
DOOM_EVERY = 20


def doomed(body: str) -> bool:
    """Whether the dead-letter group refuses ``body`` (``w<writer>-<seq>``) every time."""
    return body.startswith("w") and int(body.rpartition("-")[2]) % DOOM_EVERY == DOOM_EVERY // 2


def flat(record) -> dict:
    """A dataclass of plain fields as a dict for JSON. ``asdict`` deep-copies every field:
    on a long run's million records that took the report 20 minutes under load."""
    return dict(vars(record))


@dataclass
class Send:
    """One send invocation of one writer: ``body`` is unique in the run and names the
    writer and its sequence number (``w<writer>-<seq>``, ``f<writer>-<seq>`` on the FIFO
    topic, ``l`` on the LITE topic, ``p`` on the PRIORITY one), so order per writer, and
    per message group, is known. ``message_group`` is a FIFO send's message group or a
    LITE send's lite topic (each delivered in order)."""

    writer: int
    seq: int
    body: str
    invoked_s: float
    completed_s: float | None = None
    outcome: str | None = None
    code: str = ""
    queue_offset: int = -1
    topic: str = TOPIC
    message_group: str = ""


@dataclass(frozen=True)
class Delivery:
    """One message handed to a consumer."""

    at_s: float
    consumer: str
    queue_id: int
    queue_offset: int
    body: str


@dataclass
class PopDelivery:
    """One message handed to a POP consumer group, and the outcome of acking it.

    ``asked_s`` is when the receive that returned it was invoked: a delivery asked for
    after an ack of the same body completed (``acked_s``) is a redelivery of an acked
    message. ``ack`` is one of ``OUTCOMES``, ``NOT_ACKED`` when no ack was tried, or
    ``RELEASED`` when the consumer let it expire on purpose, ``NACKED`` when it handed a
    doomed body back; ``ack_invoked_s`` is when the ack was sent (the node applied it at
    some moment between the two). A lite topic's delivery has its lite topic as
    ``message_group`` and its CommitLog offset as ``queue_offset`` (a lite topic's offsets
    are those). A ``resent`` delivery is a dead letter given back to the group: its queue
    is the dead-letter queue's (``RESENT_QUEUE_ID``), its offset that queue's."""

    asked_s: float
    at_s: float
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    body: str
    attempt: int
    message_group: str = ""
    ack: str = NOT_ACKED
    ack_code: str = ""
    acked_s: float | None = None
    ack_invoked_s: float | None = None
    message_id: str = ""
    resent: bool = False  # a dead letter resent to the group (its queue is the DLQ's)

    @property
    def ack_sent_s(self) -> float | None:
        """When the ack was sent (older histories recorded only its answer)."""
        return self.acked_s if self.ack_invoked_s is None else self.ack_invoked_s


@dataclass
class Resend:
    """One call of the dead-letter group's resender (``Admin.resend_dead_letters``): the
    dead-letter queue's ``offsets`` it named on ``broker_group`` and their message ids
    (read from the queue just before), and the answer: ``outcome`` as a send's, and the
    offsets answered resent, resent before, and left for a later call."""

    invoked_s: float
    broker_group: str
    offsets: list[int]
    message_ids: list[str]
    completed_s: float | None = None
    outcome: str | None = None
    code: str = ""
    resent: list[int] = field(default_factory=list)
    already_resent: list[int] = field(default_factory=list)
    not_yet: list[int] = field(default_factory=list)


@dataclass
class CatchUp:
    """The wait after the writers stopped until every consumer group had consumed its
    topic (no lag, nothing in flight): it ends once no group progressed for ``stall_s``
    or after ``deadline_s`` in all; ``behind`` says, per group still lagging at the end,
    by how much. (Histories written before the stall rule have ``stall_s`` 0.)"""

    deadline_s: float
    waited_s: float
    caught_up: bool
    behind: dict[str, str] = field(default_factory=dict)
    stall_s: float = 0.0


@dataclass
class Fault:
    """One nemesis action: ``kind`` (kill, pause, restart-all...), the node(s) it hit and
    the role they had, its window (start until the fault was healed: for a restart, until
    the processes were started again) and when the cluster was ready again after it
    (``ready_s``: every node answering, each group with a master and all in sync; None
    when not within the runner's deadline)."""

    kind: str
    targets: list[str]
    role: str
    start_s: float
    end_s: float | None = None
    note: str = ""
    ready_s: float | None = None


@dataclass(frozen=True)
class Election:
    """A master election the controller logged (``chaos.elections``): when (since the
    run's start), whom it elected and deposed, and whether a fault excuses it."""

    at_s: float
    elected: str
    deposed: str  # "" when the reason names none
    epoch: int  # the new one
    reason: str
    spurious: bool = False


@dataclass(frozen=True)
class StoredRecord:
    """One message of the workload's topics in a replica's CommitLog after the run."""

    queue_id: int
    queue_offset: int
    physical_offset: int
    body: str
    topic: str = TOPIC


@dataclass(frozen=True)
class ServedRecord:
    """One message of the workload's topics as a master served it (Data.Fetch) after the
    consumers caught up, before the cluster stopped."""

    topic: str
    queue_id: int
    queue_offset: int
    body: str


@dataclass
class Replica:
    """What the final drain read from one node: its records of the workload topic, its
    CommitLog end and the SHA-256 of each prefix length asked for by the checker."""

    node: str
    role: str
    log_end: int
    records: list[StoredRecord]
    digest_to: dict[int, str] = field(default_factory=dict)
    dead_lettered: list[str] = field(default_factory=list)  # bodies in %DLQ%<group>
    # Bodies in the dead-letter group's %DLQ% topic, where the doomed ones must end up.
    dead_lettered_on_purpose: list[str] = field(default_factory=list)


@dataclass
class MasterSnapshot:
    """A copy of a master's log taken the moment a fault deposed it (the node was dead or
    stopped): where each body sat, and the last epoch it knew. ASYNC may lose what sat at
    or beyond the start of the next epoch, nothing before it."""

    node: str
    last_epoch: int
    positions: dict[str, int]  # body -> physical offset


@dataclass
class History:
    mode: str
    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    pop_deliveries: list[PopDelivery] = field(default_factory=list)
    # Every consumer the workload ran (pull consumer name or POP group) -> its topic.
    consumers: dict[str, str] = field(default_factory=dict)
    catch_up: CatchUp | None = None  # None: the consumers were not waited for
    faults: list[Fault] = field(default_factory=list)
    replicas: list[Replica] = field(default_factory=list)
    # Every queue of the workload topics read through the Data service from offset 0 while
    # the healed cluster ran; None when not read.
    served: list[ServedRecord] | None = None
    snapshots: list[MasterSnapshot] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # final (epoch, start offset)
    # Bodies that no node held any more after a power loss of every node (unsynced).
    lost_to_power: list[str] = field(default_factory=list)
    # Bodies in the nodes' rollback files (ha/rollback.py): tails cut when a node rejoined
    # a master that never had them, whichever fault or decision deposed their writer.
    rolled_back: list[str] = field(default_factory=list)
    # Nodes found exited without a fault's doing, and exceptions in the nodes' logs.
    crashes: list[str] = field(default_factory=list)
    node_errors: list[str] = field(default_factory=list)
    # Answers the workload could not decode and exceptions that ended one of its threads.
    client_errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    started_wall: float = 0.0  # time.time() at the run's start (the logs' clock)
    elections: list[Election] = field(default_factory=list)
    resends: list[Resend] = field(default_factory=list)  # the dead-letter group's
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def invoke(
        self,
        writer: int,
        seq: int,
        body: str,
        at_s: float,
        topic: str = TOPIC,
        message_group: str = "",
    ) -> Send:
        send = Send(writer, seq, body, at_s, topic=topic, message_group=message_group)
        with self.lock:
            self.sends.append(send)
        return send

    def complete(
        self, send: Send, outcome: str, at_s: float, code: str = "", offset: int = -1
    ) -> None:
        assert outcome in OUTCOMES, outcome
        with self.lock:
            send.outcome, send.completed_s, send.code, send.queue_offset = (
                outcome,
                at_s,
                code,
                offset,
            )

    def deliver(self, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries.append(delivery)

    def client_error(self, at_s: float, text: str) -> None:
        with self.lock:
            self.client_errors.append(f"{at_s:.1f} s: {text}")

    def pop_deliver(self, delivery: PopDelivery) -> PopDelivery:
        with self.lock:
            self.pop_deliveries.append(delivery)
        return delivery

    def released(self, delivery: PopDelivery) -> None:
        with self.lock:
            delivery.ack = RELEASED

    def nacked(self, delivery: PopDelivery) -> None:
        with self.lock:
            delivery.ack = NACKED

    def acked(
        self, delivery: PopDelivery, outcome: str, invoked_s: float, at_s: float, code: str = ""
    ) -> None:
        assert outcome in OUTCOMES, outcome
        with self.lock:
            delivery.ack, delivery.ack_code = outcome, code
            delivery.ack_invoked_s, delivery.acked_s = invoked_s, at_s

    def resend_asked(self, resend: Resend) -> Resend:
        with self.lock:
            self.resends.append(resend)
        return resend

    def resend_answered(
        self,
        resend: Resend,
        outcome: str,
        at_s: float,
        code: str = "",
        *,
        resent: Sequence[int] = (),
        already_resent: Sequence[int] = (),
        not_yet: Sequence[int] = (),
    ) -> None:
        """The answer's offsets: resent now, resent before, and not yet."""
        assert outcome in OUTCOMES, outcome
        with self.lock:
            resend.outcome, resend.completed_s, resend.code = outcome, at_s, code
            resend.resent, resend.already_resent = list(resent), list(already_resent)
            resend.not_yet = list(not_yet)

    def fault(self, fault: Fault) -> Fault:
        with self.lock:
            self.faults.append(fault)
        return fault

    def to_json(self) -> dict:
        with self.lock:
            return {
                "mode": self.mode,
                "duration_s": self.duration_s,
                "sends": [flat(s) for s in self.sends],
                "deliveries": [flat(d) for d in self.deliveries],
                "pop_deliveries": [flat(d) for d in self.pop_deliveries],
                "consumers": self.consumers,
                "catch_up": None if self.catch_up is None else asdict(self.catch_up),
                "faults": [asdict(f) for f in self.faults],
                "replicas": [
                    {
                        **flat(r),
                        "records": [flat(x) for x in r.records],
                        "digest_to": {str(k): v for k, v in r.digest_to.items()},
                    }
                    for r in self.replicas
                ],
                "served": None if self.served is None else [flat(r) for r in self.served],
                "snapshots": [asdict(s) for s in self.snapshots],
                "epochs": self.epochs,
                "lost_to_power": self.lost_to_power,
                "rolled_back": self.rolled_back,
                "crashes": self.crashes,
                "node_errors": self.node_errors,
                "client_errors": self.client_errors,
                "started_wall": self.started_wall,
                "elections": [asdict(e) for e in self.elections],
                "resends": [flat(r) for r in self.resends],
            }

    @classmethod
    def from_json(cls, raw: dict) -> History:
        return cls(
            mode=raw["mode"],
            duration_s=raw.get("duration_s", 0.0),
            sends=[Send(**s) for s in raw["sends"]],
            deliveries=[Delivery(**d) for d in raw["deliveries"]],
            pop_deliveries=[PopDelivery(**d) for d in raw.get("pop_deliveries", [])],
            consumers=raw.get("consumers", {}),
            catch_up=CatchUp(**raw["catch_up"]) if raw.get("catch_up") else None,
            faults=[Fault(**f) for f in raw["faults"]],
            replicas=[
                Replica(
                    r["node"],
                    r["role"],
                    r["log_end"],
                    [StoredRecord(**x) for x in r["records"]],
                    {int(k): v for k, v in r.get("digest_to", {}).items()},
                    r.get("dead_lettered", []),
                    r.get("dead_lettered_on_purpose", []),
                )
                for r in raw["replicas"]
            ],
            served=None
            if raw.get("served") is None
            else [ServedRecord(**r) for r in raw["served"]],
            snapshots=[MasterSnapshot(**s) for s in raw.get("snapshots", [])],
            epochs=[tuple(e) for e in raw.get("epochs", [])],
            lost_to_power=raw.get("lost_to_power", []),
            rolled_back=raw.get("rolled_back", []),
            crashes=raw.get("crashes", []),
            node_errors=raw.get("node_errors", []),
            client_errors=raw.get("client_errors", []),
            started_wall=raw.get("started_wall", 0.0),
            elections=[Election(**e) for e in raw.get("elections", [])],
            resends=[Resend(**r) for r in raw.get("resends", [])],
        )

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f)
