"""Judges a ``History`` against the mode's promises (docs/guarantees.md, "Chaos").

Reads only the history: sends and their outcomes, deliveries, fault windows, and what the
final drain found on every replica. The authoritative final state is the log of the
replica with the longest CommitLog (after heal every replica should equal it).

Verdict per replication mode:
- SYNC: no acknowledged send lost, whatever the single-node fault.
- ASYNC: an acknowledged send may be lost only if, in the copy of the log of a master
  taken when a fault deposed it, it sat at or beyond the start offset of the next epoch
  (the slaves never had it); any other loss is a violation.
- ASYNC_FLUSH, either replication: a power loss of every node may lose what no node had
  forced to disk (``History.lost_to_power``); under SYNC_FLUSH nothing acknowledged is.
- Both: nothing unexpected (never sent), no duplicate, no refused send present, no hole
  in a queue's offsets, per-writer order kept within each queue, replicas byte-identical
  to their common length, and under SYNC no consumer saw a message that was later lost.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from chaos.history import FAILED, NOT_REPLICATED, OK, UNKNOWN, History, Replica, Send


@dataclass
class Findings:
    mode: str
    sends: int = 0
    acknowledged: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    lost_by_position: dict[str, int] = field(default_factory=dict)  # prefix/middle/suffix
    lost_within_async_bound: list[str] = field(default_factory=list)
    lost_within_power_bound: list[str] = field(default_factory=list)  # unsynced everywhere
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    recovered: int = 0  # unknown / not-replicated outcome, yet present
    failed_but_present: list[str] = field(default_factory=list)
    queue_holes: dict[str, list[int]] = field(default_factory=dict)
    order_violations: list[str] = field(default_factory=list)
    delivered_then_lost: list[str] = field(default_factory=list)
    delivered_unexpected: list[str] = field(default_factory=list)
    replicas_differ: dict[str, str] = field(default_factory=dict)
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
        raw["valid"] = self.valid
        return raw


def authoritative(replicas: list[Replica]) -> Replica | None:
    return max(replicas, key=lambda r: (r.log_end, r.role == "MASTER"), default=None)


def check(history: History) -> Findings:
    sync = history.mode.startswith("sync")
    found = Findings(history.mode, sends=len(history.sends))
    for outcome in (OK, NOT_REPLICATED, FAILED, UNKNOWN):
        found.outcomes[outcome] = sum(1 for s in history.sends if s.outcome == outcome)
    found.outcomes["pending"] = sum(1 for s in history.sends if s.outcome is None)
    acked = [s for s in history.sends if s.outcome == OK]
    found.acknowledged = len(acked)
    sent = {s.body: s for s in history.sends}

    final = authoritative(history.replicas)
    records = final.records if final else []
    copies: dict[str, int] = defaultdict(int)
    for record in records:
        copies[record.body] += 1
    present = set(copies)

    # Lost, classified by where in the writer's acknowledged sequence it sits.
    by_writer: dict[int, list[Send]] = defaultdict(list)
    for send in acked:
        by_writer[send.writer].append(send)
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
    queues: dict[int, list] = defaultdict(list)
    for record in records:
        queues[record.queue_id].append(record)
    for queue_id, rows in sorted(queues.items()):
        rows.sort(key=lambda r: r.queue_offset)
        offsets = [r.queue_offset for r in rows]
        holes = [o for o in range(offsets[0], offsets[-1] + 1) if o not in set(offsets)]
        if holes:
            found.queue_holes[str(queue_id)] = holes[:50]
        last_seq: dict[int, int] = {}
        for row in rows:
            send = sent.get(row.body)
            if send is None:
                continue
            if last_seq.get(send.writer, -1) > send.seq:
                found.order_violations.append(f"queue {queue_id} offset {row.queue_offset}")
            last_seq[send.writer] = max(last_seq.get(send.writer, -1), send.seq)

    delivered = {d.body for d in history.deliveries}
    found.delivered_unexpected = sorted(b for b in delivered if b not in sent)
    if final is not None:
        found.delivered_then_lost = sorted(b for b in delivered if b in sent and b not in present)

    # Replicas byte-identical up to their common length.
    if history.replicas:
        common = min(r.log_end for r in history.replicas)
        digests = {r.node: r.digest_to.get(common, "") for r in history.replicas}
        if len(set(digests.values())) > 1 or "" in digests.values():
            found.replicas_differ = digests

    # ASYNC: which losses the promise allows (beyond the replicated offset at a fault).
    allowed = set()
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

    found.unavailability = unavailability(history)
    found.violations = verdict(found, sync)
    return found


def unavailability(history: History) -> list[dict]:
    """Per fault: seconds from its start until the first send invoked after it that was
    acknowledged, and until the fault ended; None when no send after it succeeded."""
    rows = []
    ok_invocations = sorted((s.invoked_s, s.completed_s) for s in history.sends if s.outcome == OK)
    faults = sorted(history.faults, key=lambda f: f.start_s)
    acks = sorted(done for _, done in ok_invocations)
    for turn, fault in enumerate(faults):
        first = next((done for invoked, done in ok_invocations if invoked >= fault.start_s), None)
        # The longest stretch without any acknowledgement, from the fault until the next.
        until_s = faults[turn + 1].start_s if turn + 1 < len(faults) else history.duration_s
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
    checks = [
        ("duplicated", found.duplicated),
        ("unexpected (never sent)", found.unexpected),
        ("delivered but never sent", found.delivered_unexpected),
        ("refused yet present", found.failed_but_present),
        ("queues with offset holes", found.queue_holes),
        ("order violations", found.order_violations),
        ("replicas differing to their common length", found.replicas_differ),
    ]
    for name, value in checks:
        if value:
            violations.append(f"{len(value)} {name}")
    return violations
