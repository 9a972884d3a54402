"""Judges a ``History`` against the mode's promises (docs/guarantees.md, "Chaos").

Reads only the history: sends and their outcomes, deliveries, fault windows, and what the
final drain found on every replica. The authoritative final state is the log of the
replica with the longest CommitLog (after heal every replica should equal it).

Verdict per replication mode:
- SYNC: no acknowledged send lost, whatever the single-node fault.
- ASYNC: an acknowledged send may be lost only if, in the copy of the log of a master
  taken when a fault deposed it, it sat at or beyond the start offset of the next epoch
  (the slaves never had it); any other loss is a violation.
- ASYNC_FLUSH, either replication: a power loss of every node may lose what one of the
  in-sync nodes had not forced to disk (``History.lost_to_power``: that node may resume as
  master, and the others cut their longer tails to it); under SYNC_FLUSH nothing
  acknowledged is.
- Both: nothing unexpected (never sent), no duplicate, no refused send present, no hole
  in a queue's offsets, per-writer order kept within each queue, replicas byte-identical
  to their common length, and under SYNC no consumer saw a message that was later lost.
- The healed cluster serves (Data.Fetch of every queue from its first offset) exactly
  the records the offline drain finds in the final log, at the same queue offsets.
- Consumers (pull and POP groups), both modes: nothing delivered that was never sent; a
  delivered body still present sits at the queue offset it was delivered from; in a
  FIFO group, the first deliveries of each message group follow send order (a lite
  consumer's, of each lite topic: lite topics are delivered in order); a receive of the
  PRIORITY topic hands out no message before one of higher priority; nothing is
  dead-lettered in the groups that ack every delivery at once (none uses up its attempts).
- The dead-letter group (``chaos-dlq``, 3 attempts) nacks every delivery of a doomed body
  (``history.doomed``) and acks the rest. SYNC (ASYNC reports them): every doomed
  acknowledged send still present reaches the group's %DLQ% topic once the consumers
  caught up (except, under ASYNC_FLUSH, when a power loss of every node followed its
  last nack: the dead letter was written but maybe not yet on disk), and no body the
  group acked successfully does (except, under ASYNC_FLUSH, after a power loss of every
  node). Other bodies there used up their attempts on acks that failed in a fault:
  reported.
- Its dead letters are resent to it (``workload.DeadLetterResender``). SYNC (ASYNC
  reports them): no dead-letter queue offset is answered ``resent`` by two calls (a resend
  is done once), and every message answered ``resent`` is delivered to the group again,
  from the dead-letter queue, after the call (once the consumers caught up); under
  ASYNC_FLUSH a power loss of every node in between excuses either.
- Consumers, SYNC only (ASYNC reports them: a new master may lack the last consumer
  offsets or ack records, and a pull consumer's position may pass offsets that a new
  master then fills with other messages): every acknowledged send still present is
  delivered to every group once the runner waited for the consumers to catch up; a POP
  delivery whose ack succeeded is not delivered again to its group (except, under
  ASYNC_FLUSH, after a power loss of every node, which may forget the ack); in a FIFO
  group, a delivery left to expire on purpose comes back before any later body of its
  message group is delivered.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from chaos.history import (
    DLQ_GROUP,
    FAILED,
    LITE_TOPIC,
    NACKED,
    NOT_REPLICATED,
    OK,
    PRIORITY_TOPIC,
    RELEASED,
    TOPIC,
    UNKNOWN,
    History,
    PopDelivery,
    Replica,
    Send,
    doomed,
)


@dataclass
class Findings:
    mode: str
    sends: int = 0
    acknowledged: int = 0
    acknowledged_by_topic: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    # The same for the sends invoked inside a fault window: what faults cost the writers.
    outcomes_in_faults: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    lost_by_position: dict[str, int] = field(default_factory=dict)  # prefix/middle/suffix
    lost_within_async_bound: list[str] = field(default_factory=list)
    lost_within_power_bound: list[str] = field(default_factory=list)  # unsynced on an in-sync node
    rolled_back: int = 0  # bodies the nodes kept in rollback files (tails cut at a rejoin)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    recovered: int = 0  # unknown / not-replicated outcome, yet present
    failed_but_present: list[str] = field(default_factory=list)
    queue_holes: dict[str, list[int]] = field(default_factory=dict)
    order_violations: list[str] = field(default_factory=list)
    delivered_then_lost: list[str] = field(default_factory=list)
    misplaced_deliveries: list[str] = field(default_factory=list)  # delivered at another offset
    delivered_unexpected: list[str] = field(default_factory=list)
    replicas_differ: dict[str, str] = field(default_factory=dict)
    served_records: int = -1  # read back through the Data service; -1: not read
    served_differs: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    elections: int = 0  # master elections the controllers logged
    # Elections that deposed a master no fault had killed, stopped or cut off
    # (``chaos.elections``): "<at> s: <elected> for <deposed>: <reason>".
    spurious_failovers: list[str] = field(default_factory=list)
    node_errors: list[str] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)
    pop_deliveries: int = 0
    pop_redeliveries: int = 0  # deliveries of a body the group had been handed before
    pop_released: int = 0  # deliveries the consumer let expire on purpose
    acked_then_redelivered: list[str] = field(default_factory=list)
    redelivered_after_power_loss: list[str] = field(default_factory=list)  # allowed
    never_delivered: dict[str, list[str]] = field(default_factory=dict)  # group -> bodies
    fifo_order_violations: list[str] = field(default_factory=list)
    # FIFO: a later body of a message group delivered while one left to expire had not
    # come back yet.
    fifo_release_overtaken: list[str] = field(default_factory=list)
    # PRIORITY: a receive that handed out a message before one of higher priority.
    priority_order_violations: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    # The dead-letter group: nacks, doomed bodies missing from its %DLQ% topic, bodies
    # there after a successful ack, and the others there (acks failed in a fault).
    pop_nacked: int = 0
    doomed_dead_lettered: int = 0
    doomed_not_dead_lettered: list[str] = field(default_factory=list)
    dead_letters_lost_to_power: list[str] = field(default_factory=list)  # allowed
    dead_lettered_after_ack: list[str] = field(default_factory=list)
    dead_lettered_unacked: list[str] = field(default_factory=list)
    # Its resends: calls and their outcomes, dead letters answered resent, those delivered
    # again since, offsets answered resent twice, and those never delivered again
    # (excused under ASYNC_FLUSH when a power loss of every node came between).
    resend_outcomes: dict[str, int] = field(default_factory=dict)
    resent: int = 0
    resent_delivered_again: int = 0
    resent_twice: list[str] = field(default_factory=list)
    resent_never_delivered: list[str] = field(default_factory=list)
    resends_after_power_loss: list[str] = field(default_factory=list)
    catch_up: dict | None = None
    unavailability: list[dict] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations

    def to_json(self, sample: int = 20) -> dict:
        raw = asdict(self)
        for key, value in raw.items():
            if isinstance(value, list) and value and isinstance(value[0], str):
                raw[key] = {"count": len(value), "sample": value[:sample]}
        raw["never_delivered"] = {
            group: {"count": len(bodies), "sample": bodies[:sample]}
            for group, bodies in self.never_delivered.items()
        }
        raw["valid"] = self.valid
        return raw


def authoritative(replicas: list[Replica]) -> Replica | None:
    return max(replicas, key=lambda r: (r.log_end, r.role == "MASTER"), default=None)


def outcomes_in_faults(history: History) -> dict[str, int]:
    """Outcomes of the sends invoked while a fault was in force (its start until healed)."""
    windows = [
        (f.start_s, f.end_s if f.end_s is not None else history.duration_s) for f in history.faults
    ]
    counts = dict.fromkeys((OK, NOT_REPLICATED, FAILED, UNKNOWN, "pending"), 0)
    for send in history.sends:
        if any(start <= send.invoked_s <= end for start, end in windows):
            counts[send.outcome or "pending"] += 1
    return counts


def check(history: History) -> Findings:
    sync = history.mode.startswith("sync")
    found = Findings(history.mode, sends=len(history.sends))
    for outcome in (OK, NOT_REPLICATED, FAILED, UNKNOWN):
        found.outcomes[outcome] = sum(1 for s in history.sends if s.outcome == outcome)
    found.outcomes["pending"] = sum(1 for s in history.sends if s.outcome is None)
    found.outcomes_in_faults = outcomes_in_faults(history)
    acked = [s for s in history.sends if s.outcome == OK]
    found.acknowledged = len(acked)
    for send in acked:
        found.acknowledged_by_topic[send.topic] = found.acknowledged_by_topic.get(send.topic, 0) + 1
    sent = {s.body: s for s in history.sends}

    final = authoritative(history.replicas)
    records = final.records if final else []
    copies: dict[str, int] = defaultdict(int)
    for record in records:
        copies[record.body] += 1
    present = set(copies)

    # Lost, classified by where in the writer's acknowledged sequence it sits.
    by_writer: dict[tuple[str, int], list[Send]] = defaultdict(list)
    for send in acked:
        by_writer[send.topic, send.writer].append(send)
    positions = {"prefix": 0, "middle": 0, "suffix": 0}
    for sends in by_writer.values():
        sends.sort(key=lambda s: s.seq)
        kept = [i for i, s in enumerate(sends) if s.body in present]
        first, last = (kept[0], kept[-1]) if kept else (len(sends), -1)
        for i, send in enumerate(sends):
            if send.body in present:
                continue
            found.lost.append(send.body)
            positions["prefix" if i < first else "suffix" if i > last else "middle"] += 1
    found.lost_by_position = positions

    found.duplicated = sorted(b for b, n in copies.items() if n > 1)
    found.unexpected = sorted(b for b in present if b not in sent)
    found.recovered = sum(
        1 for s in history.sends if s.outcome in (UNKNOWN, NOT_REPLICATED) and s.body in present
    )
    found.failed_but_present = sorted(
        s.body for s in history.sends if s.outcome == FAILED and s.body in present
    )

    # Queue offsets contiguous; per writer, sequence numbers rise with the queue offset.
    queues: dict[tuple[str, int], list] = defaultdict(list)
    for record in records:
        queues[record.topic, record.queue_id].append(record)
    for (topic, queue_id), rows in sorted(queues.items()):
        rows.sort(key=lambda r: r.queue_offset)
        offsets = [r.queue_offset for r in rows]
        holes = [o for o in range(offsets[0], offsets[-1] + 1) if o not in set(offsets)]
        queue = queue_label(topic, queue_id)
        if holes:
            found.queue_holes[queue] = holes[:50]
        last_seq: dict[int, int] = {}
        for row in rows:
            send = sent.get(row.body)
            if send is None:
                continue
            if last_seq.get(send.writer, -1) > send.seq:
                found.order_violations.append(f"queue {queue} offset {row.queue_offset}")
            last_seq[send.writer] = max(last_seq.get(send.writer, -1), send.seq)

    delivered = {d.body for d in history.deliveries} | {d.body for d in history.pop_deliveries}
    found.delivered_unexpected = sorted(b for b in delivered if b not in sent)
    if final is not None:
        found.delivered_then_lost = sorted(b for b in delivered if b in sent and b not in present)
        found.misplaced_deliveries = misplaced_deliveries(history, records)

    if history.served is not None and final is not None:
        found.served_records = len(history.served)
        found.served_differs = served_differs(history.served, records)

    # Replicas byte-identical up to their common length.
    if history.replicas:
        common = min(r.log_end for r in history.replicas)
        digests = {r.node: r.digest_to.get(common, "") for r in history.replicas}
        if len(set(digests.values())) > 1 or "" in digests.values():
            found.replicas_differ = digests

    # ASYNC: which losses the promise allows (beyond the replicated offset at a fault): what
    # a copy of a master deposed by a fault held past the next epoch's start, and what any
    # node cut when it rejoined (its rollback files), also after a deposition the
    # controller made on its own.
    allowed = set(history.rolled_back)
    found.rolled_back = len(history.rolled_back)
    for snapshot in history.snapshots:
        later = [start for epoch, start in history.epochs if epoch > snapshot.last_epoch]
        if not later:
            continue
        next_start = min(later)
        allowed |= {b for b, at in snapshot.positions.items() if at >= next_start}
    found.lost_within_async_bound = [b for b in found.lost if b in allowed]
    unsynced = set(history.lost_to_power) if history.mode.endswith("async-flush") else set()
    found.lost_within_power_bound = [b for b in found.lost if b in unsynced]
    found.delivered_then_lost = [b for b in found.delivered_then_lost if b not in unsynced]

    found.pop_deliveries = len(history.pop_deliveries)
    handed: set[tuple[str, str]] = set()
    for delivery in history.pop_deliveries:
        found.pop_redeliveries += (delivery.group, delivery.body) in handed
        found.pop_released += delivery.ack == RELEASED
        found.pop_nacked += delivery.ack == NACKED
        handed.add((delivery.group, delivery.body))
    found.acked_then_redelivered, found.redelivered_after_power_loss = redelivered_after_ack(
        history
    )
    if final is not None:
        found.never_delivered = never_delivered(history, acked, present)
        found.dead_lettered = sorted(final.dead_lettered)
        if DLQ_GROUP in consumers_of(history):
            dead_letters_on_purpose(history, found, acked, present, final)
    judge_resends(history, found)
    found.fifo_order_violations = fifo_order_violations(history.pop_deliveries, sent)
    found.priority_order_violations = priority_order_violations(history.pop_deliveries)
    found.fifo_release_overtaken = fifo_release_overtaken(history.pop_deliveries, sent, present)
    if history.catch_up is not None:
        found.catch_up = asdict(history.catch_up)

    found.unavailability = unavailability(history)
    found.crashes = list(history.crashes)
    found.elections = len(history.elections)
    found.spurious_failovers = [
        f"{e.at_s:.1f} s: {e.elected} for {e.deposed or '?'} (epoch {e.epoch}): {e.reason}"
        for e in history.elections
        if e.spurious
    ]
    found.node_errors = list(history.node_errors)
    found.client_errors = list(history.client_errors)
    found.violations = verdict(found, sync)
    return found


def dead_letters_on_purpose(
    history: History, found: Findings, acked: list[Send], present: set[str], final: Replica
) -> None:
    """The dead-letter group's findings: each doomed acknowledged send still present must
    be in its %DLQ% topic; a body there that the group acked successfully is a forgotten
    ack (excused when a power loss of every node under ASYNC_FLUSH followed the ack)."""
    in_dlq = set(final.dead_lettered_on_purpose)
    doomed_sent = [s.body for s in acked if s.topic == TOPIC and doomed(s.body)]
    found.doomed_dead_lettered = sum(1 for body in doomed_sent if body in in_dlq)
    acked_at: dict[str, float] = {}  # body -> when its first successful ack was sent
    nacked_at: dict[str, float] = {}  # body -> when it was last handed out and nacked
    for d in history.pop_deliveries:  # (a resent one's ack follows its dead-lettering)
        if d.group == DLQ_GROUP and d.ack == OK and d.acked_s is not None and not d.resent:
            acked_at[d.body] = min(d.ack_sent_s, acked_at.get(d.body, d.ack_sent_s))
        if d.group == DLQ_GROUP and d.ack == NACKED:
            nacked_at[d.body] = max(d.at_s, nacked_at.get(d.body, d.at_s))
    power_cuts = forgetting_power_cuts(history)
    for body in (b for b in doomed_sent if b in present and b not in in_dlq):
        nacked = nacked_at.get(body)
        if nacked is not None and any(at > nacked for at in power_cuts):
            found.dead_letters_lost_to_power.append(
                f"{DLQ_GROUP}: {body} last nacked at {nacked:.3f} s, its dead letter lost "
                "to a power loss"
            )
        else:
            found.doomed_not_dead_lettered.append(body)
    for body in sorted(b for b in in_dlq if not doomed(b)):
        ack_s = acked_at.get(body)
        if ack_s is None:
            found.dead_lettered_unacked.append(body)
        elif any(at > ack_s for at in power_cuts):
            found.redelivered_after_power_loss.append(
                f"{DLQ_GROUP}: {body} acked at {ack_s:.3f} s, dead-lettered after a power loss"
            )
        else:
            found.dead_lettered_after_ack.append(f"{DLQ_GROUP}: {body} acked at {ack_s:.3f} s")


def judge_resends(history: History, found: Findings) -> None:
    """The dead-letter group's resends (module docstring): offsets answered resent by two
    calls, and messages answered resent that the group was not handed again, from the
    dead-letter queue, after the call."""
    power_cuts = forgetting_power_cuts(history)
    for resend in history.resends:
        outcome = resend.outcome or "pending"
        found.resend_outcomes[outcome] = found.resend_outcomes.get(outcome, 0) + 1
    given_back: dict[str, list[float]] = defaultdict(list)  # message id -> delivered at
    for d in history.pop_deliveries:
        if d.group == DLQ_GROUP and d.resent:
            given_back[d.message_id].append(d.at_s)
    first_answer: dict[tuple[str, int, str], float] = {}  # an entry -> its first answer
    answered = sorted((r for r in history.resends if r.outcome == OK), key=lambda r: r.invoked_s)
    for resend in answered:
        ids = dict(zip(resend.offsets, resend.message_ids, strict=True))
        for offset in resend.resent:
            found.resent += 1
            message_id = ids.get(offset, "")
            where = f"{resend.broker_group} DLQ offset {offset} ({message_id})"
            if any(at >= resend.invoked_s for at in given_back.get(message_id, ())):
                found.resent_delivered_again += 1
            else:
                cut = any(at > resend.invoked_s for at in power_cuts)
                missed = found.resends_after_power_loss if cut else found.resent_never_delivered
                missed.append(f"{where} resent at {resend.invoked_s:.3f} s, never delivered again")
            earlier = first_answer.setdefault(
                (resend.broker_group, offset, message_id), resend.completed_s
            )
            if earlier != resend.completed_s:
                cut = any(earlier < at < resend.invoked_s for at in power_cuts)
                twice = found.resends_after_power_loss if cut else found.resent_twice
                twice.append(
                    f"{where} resent at {earlier:.3f} s and again at {resend.invoked_s:.3f} s"
                )


def served_differs(served: list, records: list) -> list[str]:
    """Where what the masters served differs from the final log: a record served but not
    there (or elsewhere), or one there but never served."""
    stored = {(r.topic, r.queue_id, r.queue_offset): r.body for r in records}
    given = {(r.topic, r.queue_id, r.queue_offset): r.body for r in served}
    found = []
    for (topic, queue_id, offset), body in sorted(given.items()):
        if stored.get((topic, queue_id, offset)) != body:
            held = stored.get((topic, queue_id, offset), "nothing")
            found.append(
                f"queue {queue_label(topic, queue_id)} offset {offset}: served {body},"
                f" the log holds {held}"
            )
    found += [
        f"queue {queue_label(topic, queue_id)} offset {offset}: {body} in the log, never served"
        for (topic, queue_id, offset), body in sorted(stored.items())
        if (topic, queue_id, offset) not in given
    ]
    return found


def misplaced_deliveries(history: History, records: list) -> list[str]:
    """Deliveries (pull and POP) whose body, still in the final log, sits at another queue
    or offset than the one it was delivered from: the consumer read a position that a new
    master filled differently. Replicas copy bytes verbatim, so in every mode a body that
    survived keeps the position it was read at. (A lite topic's offset is the body's
    CommitLog offset.)"""
    where = {r.body: (r.topic, r.queue_id, r.queue_offset) for r in records}
    lite_where = {r.body: (r.topic, r.queue_id, r.physical_offset) for r in records}
    read_at = [(d.consumer, TOPIC, d.queue_id, d.queue_offset, d.body) for d in history.deliveries]
    read_at += [  # a resent dead letter is delivered from the dead-letter queue
        (d.group, d.topic, d.queue_id, d.queue_offset, d.body)
        for d in history.pop_deliveries
        if not d.resent
    ]
    found = set()
    for group, topic, queue_id, queue_offset, body in read_at:
        stored = (lite_where if topic == LITE_TOPIC else where).get(body)
        if stored is not None and stored != (topic, queue_id, queue_offset):
            found.add(
                f"{group}: {body} delivered from queue {queue_label(topic, queue_id)} offset"
                f" {queue_offset}, stored at queue {queue_label(*stored[:2])} offset {stored[2]}"
            )
    return sorted(found)


def queue_label(topic: str, queue_id: int) -> str:
    """``3`` for a queue of the NORMAL topic, ``chaos-fifo:3`` for another topic's."""
    return str(queue_id) if topic == TOPIC else f"{topic}:{queue_id}"


def consumers_of(history: History) -> dict[str, str]:
    """Each consumer group the workload ran -> its topic (histories without the record:
    the groups that received anything)."""
    if history.consumers:
        return history.consumers
    groups = {d.consumer: TOPIC for d in history.deliveries}
    groups.update({d.group: d.topic for d in history.pop_deliveries})
    return groups


def never_delivered(history: History, acked: list[Send], present: set[str]) -> dict[str, list[str]]:
    """Per consumer group: acknowledged sends of its topic that are in the final log yet
    were never delivered to it (a delivery the consumer let expire on purpose does not
    count: it promises another). At-least-once delivery promises them all, given time: a
    violation under SYNC when the runner waited for the consumers to catch up."""
    delivered: dict[str, set[str]] = defaultdict(set)
    for d in history.deliveries:
        delivered[d.consumer].add(d.body)
    for p in history.pop_deliveries:
        if p.ack != RELEASED:  # left to expire on purpose: only its redelivery counts
            delivered[p.group].add(p.body)
    missing = {}
    for group, topic in sorted(consumers_of(history).items()):
        bodies = [
            s.body
            for s in acked
            if s.topic == topic and s.body in present and s.body not in delivered[group]
        ]
        if bodies:
            missing[group] = bodies
    return missing


def forgetting_power_cuts(history: History) -> list[float]:
    """When every node lost power under ASYNC_FLUSH: each may have taken POP records
    (acks) written but not yet on disk."""
    return [
        f.start_s
        for f in history.faults
        if f.kind == "power-loss-all" and history.mode.endswith("async-flush")
    ]


def redelivered_after_ack(history: History) -> tuple[list[str], list[str]]:
    """POP deliveries asked for after an ack of the same body by the same group had
    succeeded: at-least-once redelivers only what was not acked. Returned in two lists:
    those the mode's promise forbids, and those a power loss of every node between the
    ack and the receive excuses under ASYNC_FLUSH (the ack record was not yet on disk).

    A fault's ``start_s`` is taken once every node is dead, and an answer can reach the
    client after that (it was on its way): so a cut excuses an ack *sent* before it, whose
    record the node may have written before it died, not only one whose answer came
    before it."""
    power_cuts = forgetting_power_cuts(history)
    # (group, body) -> (ack sent, ack answered) of its first successful ack
    acked_at: dict[tuple[str, str], tuple[float, float]] = {}
    forbidden, excused = [], []
    for delivery in sorted(history.pop_deliveries, key=lambda d: d.asked_s):
        key = (delivery.group, delivery.body)
        ack = acked_at.get(key)
        if ack is not None and delivery.asked_s > ack[1]:
            line = (
                f"{delivery.group}: {delivery.body} acked at {ack[1]:.3f} s, delivered again"
                f" (attempt {delivery.attempt}) asked at {delivery.asked_s:.3f} s"
            )
            cut = any(ack[0] < at < delivery.asked_s for at in power_cuts)
            (excused if cut else forbidden).append(line)
        if delivery.ack == OK and delivery.acked_s is not None and key not in acked_at:
            acked_at[key] = (delivery.ack_sent_s, delivery.acked_s)
    return forbidden, excused


def fifo_order_violations(deliveries: list[PopDelivery], sent: dict[str, Send]) -> list[str]:
    """Per message group, bodies must be first delivered in send order: a body delivered
    for the first time after a body of the same group sent later, while it was itself
    acknowledged, is out of order (an unacknowledged send may have been stored late, and
    redeliveries of unacked messages are allowed). Sends lost before they were ever
    delivered are not waited for."""
    violations = []
    seen: set[tuple[str, str]] = set()
    latest: dict[str, Send] = {}  # message group -> highest seq first delivered so far
    for delivery in sorted(deliveries, key=lambda d: d.at_s):
        send = sent.get(delivery.body)
        if not delivery.message_group or send is None:
            continue
        key = (delivery.group, delivery.body)
        if key in seen:
            continue
        seen.add(key)
        group = f"{delivery.group}/{delivery.message_group}"
        ahead = latest.get(group)
        if ahead is not None and ahead.seq > send.seq and send.outcome == OK:
            violations.append(
                f"{group}: {send.body} first delivered at {delivery.at_s:.3f} s, after {ahead.body}"
            )
        if ahead is None or send.seq > ahead.seq:
            latest[group] = send
    return violations


def priority_order_violations(deliveries: list[PopDelivery]) -> list[str]:
    """A receive from the PRIORITY topic takes the highest priority ready first: within
    one batch (the deliveries of one receive, recorded together in the order returned),
    a message's priority (its queue) never rises. Across receives nothing is promised
    that a history can check: what was ready when, on which master."""
    found = []
    batches = itertools.groupby(
        (d for d in deliveries if d.topic == PRIORITY_TOPIC),
        key=lambda d: (d.group, d.asked_s, d.at_s),
    )
    for (group, _, at_s), batch in batches:
        rows = list(batch)
        for before, after in itertools.pairwise(rows):
            if after.queue_id > before.queue_id:
                found.append(
                    f"{group}: {after.body} (priority {after.queue_id}) handed out after"
                    f" {before.body} (priority {before.queue_id}) in the receive of {at_s:.3f} s"
                )
    return found


def fifo_release_overtaken(
    deliveries: list[PopDelivery], sent: dict[str, Send], present: set[str]
) -> list[str]:
    """Per FIFO group and message group: once a delivery is left to expire on purpose, the
    next deliveries of that message group must begin with it again; a later body handed
    out first overtook it. A body gone from the final log (a loss the mode allows) is not
    waited for, nor is a body never sent (reported apart). Deliveries of one receive share
    ``at_s`` and come in queue order."""
    by_group: dict[tuple[str, str], list[PopDelivery]] = defaultdict(list)
    for d in deliveries:
        if d.message_group and d.body in sent:
            by_group[d.group, d.message_group].append(d)
    found = []
    for (group, message_group), rows in sorted(by_group.items()):
        outstanding: dict[str, tuple[int, float]] = {}  # released body -> (seq, released at)
        for d in sorted(rows, key=lambda d: (d.at_s, d.queue_offset)):
            seq = sent[d.body].seq
            # Its batch-mates went out with it: only a later receive can overtake it.
            waiting = [(s, b, at) for b, (s, at) in outstanding.items() if s < seq and at < d.at_s]
            if waiting and d.body not in outstanding:
                _, body, at = min(waiting)
                found.append(
                    f"{group}/{message_group}: {d.body} delivered at {d.at_s:.3f} s before"
                    f" {body}, left to expire at {at:.3f} s, came back"
                )
                outstanding.clear()  # one finding per overtaking, then follow anew
            outstanding.pop(d.body, None)
            if d.ack == RELEASED and d.body in present:
                outstanding[d.body] = (seq, d.at_s)
    return found


def unavailability(history: History) -> list[dict]:
    """Per fault: seconds from its start until the first send invoked after it that was
    acknowledged, and until the fault ended; None when no send after it succeeded."""
    rows = []
    ok_invocations = sorted((s.invoked_s, s.completed_s) for s in history.sends if s.outcome == OK)
    faults = sorted(history.faults, key=lambda f: f.start_s)
    acks = sorted(done for _, done in ok_invocations)
    # The last fault's stretch ends with the writers, not with the run (which goes on
    # while the consumers catch up).
    writers_end_s = max(
        (s.completed_s if s.completed_s is not None else s.invoked_s for s in history.sends),
        default=history.duration_s,
    )
    for turn, fault in enumerate(faults):
        first = next((done for invoked, done in ok_invocations if invoked >= fault.start_s), None)
        # The longest stretch without any acknowledgement, from the fault until the next.
        if turn + 1 < len(faults):
            until_s = faults[turn + 1].start_s
        else:
            until_s = max(fault.start_s, writers_end_s)
        marks = [fault.start_s, *(a for a in acks if fault.start_s < a < until_s), until_s]
        gap = max(b - a for a, b in itertools.pairwise(marks))
        rows.append(
            {
                "kind": fault.kind,
                "targets": fault.targets,
                "role": fault.role,
                "start_s": round(fault.start_s, 3),
                "window_s": None if fault.end_s is None else round(fault.end_s - fault.start_s, 3),
                "writes_back_after_s": None if first is None else round(first - fault.start_s, 3),
                "longest_gap_s": round(gap, 3),
            }
        )
    return rows


def verdict(found: Findings, sync: bool) -> list[str]:
    violations = []
    powered = set(found.lost_within_power_bound)
    if sync and set(found.lost) - powered:
        lost = len(set(found.lost) - powered)
        violations.append(f"{lost} acknowledged sends lost {found.lost_by_position}")
    if not sync:
        beyond = len(set(found.lost) - powered - set(found.lost_within_async_bound))
        if beyond:
            violations.append(
                f"{beyond} acknowledged sends lost that the slaves had before the fault"
            )
    if sync and found.delivered_then_lost:
        violations.append(f"{len(found.delivered_then_lost)} delivered messages later lost")
    if sync and found.acked_then_redelivered:
        violations.append(
            f"{len(found.acked_then_redelivered)} POP deliveries of messages already acked"
        )
    if sync and found.fifo_release_overtaken:
        violations.append(
            f"{len(found.fifo_release_overtaken)} FIFO deliveries that overtook one left to expire"
        )
    if sync and found.dead_lettered_after_ack:
        violations.append(
            f"{len(found.dead_lettered_after_ack)} messages dead-lettered after a successful ack"
        )
    consumers_waited_for = found.catch_up is not None
    if sync and consumers_waited_for:
        for group, bodies in found.never_delivered.items():
            violations.append(f"{len(bodies)} acknowledged sends never delivered to {group}")
        if found.doomed_not_dead_lettered:
            missing = len(found.doomed_not_dead_lettered)
            violations.append(f"{missing} doomed acknowledged sends never dead-lettered")
        if found.resent_never_delivered:
            missing = len(found.resent_never_delivered)
            violations.append(f"{missing} dead letters answered resent, never delivered again")
    if sync and found.resent_twice:
        violations.append(f"{len(found.resent_twice)} dead letters answered resent twice")
    if consumers_waited_for and not found.catch_up["caught_up"]:
        # In every mode: once healed, each group must reach the end of its topic (under
        # ASYNC a failover may take messages from under a committed offset, not progress).
        behind = found.catch_up["behind"]
        violations.append(f"{len(behind)} consumer groups not caught up after heal {behind}")
    checks = [
        ("duplicated", found.duplicated),
        ("unexpected (never sent)", found.unexpected),
        ("delivered but never sent", found.delivered_unexpected),
        ("refused yet present", found.failed_but_present),
        ("queues with offset holes", found.queue_holes),
        ("order violations", found.order_violations),
        ("FIFO message group order violations", found.fifo_order_violations),
        ("receives that handed out a lower priority first", found.priority_order_violations),
        ("deliveries from another queue offset than the body's", found.misplaced_deliveries),
        # The consumers ack every delivery at once: reaching a dead-letter topic takes 16
        # deliveries in a row whose acks all failed, which no fault schedule here makes.
        ("messages dead-lettered although every delivery is acked", found.dead_lettered),
        ("replicas differing to their common length", found.replicas_differ),
        ("differences between the records served and the final log", found.served_differs),
        ("node processes found exited (crashed)", found.crashes),
        ("spurious failovers (a live, connected master deposed)", found.spurious_failovers),
        ("exceptions in the nodes' logs", found.node_errors),
        ("answers the workload could not decode or exceptions in it", found.client_errors),
    ]
    for name, value in checks:
        if value:
            violations.append(f"{len(value)} {name}")
    return violations
