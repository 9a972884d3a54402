"""POP consumption state: per (group, topic, queue) a cursor and the in-flight deliveries.

Invariants (checked by ``check``):
- every in-flight offset is below the cursor's ``next_offset``: a message is popped from
  the cursor before it can be in flight;
- an offset below ``next_offset`` that is not in flight is consumed for the group (acked,
  dead-lettered, or skipped by the group's tag filter);
- an in-flight message has one current delivery id, replaced at every redelivery and
  invisibility change; only the current one may ack, change or forward the message, so a
  handle of an earlier delivery is stale.

Records of ``%SYS%POP`` (all carry ``group``, ``topic``, ``queue``):
- ``pop``: ``next`` (new cursor), ``delivery``, ``visible`` (ms); body ``offset:attempt,...``
- ``ack`` / ``dlq``: body ``offset:delivery,...`` (dlq: moved to ``%DLQ%<group>``)
- ``change``: ``offset``, ``delivery`` (current), ``new``, ``visible``; ``suspend`` ("1")
  when the current delivery is not to count as an attempt (RocketMQ 5.5's suspend: it
  comes back with the attempt it had)
- ``reset``: the group's offsets of the queue were reset (``node/services/offset_reset.py``):
  the cursor goes with every delivery in flight (their handles are stale from then on),
  so the next receive starts a cursor at the reset committed offset
- ``expire``: ``upto``; the queue is an expired lite topic (``node/lite_expiry.py``): its
  deliveries at or below ``upto`` end, and the cursor goes when nothing past ``upto`` is
  left of it (a lite topic's cursor starts at its first message)
- ``resend``: ``delivery``, ``visible``; body ``offset,...``: dead letters of the group
  resent (``node/services/dead_letter_resend.py``), on the key ``(group, %DLQ%<group>,
  RESENT_QUEUE_ID)``: each offset (of ``%DLQ%<group>``'s queue 0) is in flight with attempt 0
  (its next delivery is the first of a fresh count) and is marked resent for good, so a
  second resend of it is known, after a restart or on a promoted replica as well
Each is applied by the same ``apply`` live and in replay, and ``apply`` ignores a delta
whose delivery is not current, so replay is deterministic whatever came before.

Memory and log agree, except after a refused pop of new messages: those stay in flight in
memory as delivered to nobody (attempt 0, visible), past a cursor that the log has not
moved (``PopCursor.unlogged``). Any later batch with a pop record of that queue moves the
log's cursor to memory's, so ``append`` first restates them in that batch: the log never
moves a cursor past a message it does not hold in flight. (Without it, a pop that
redelivered older messages moved the log's cursor past them, and a restart or failover
lost them for the group: found by a 30-minute chaos run.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from node.system_state import SystemState
from store.message import Message
from store.results import PutResult

POP_TOPIC = "%SYS%POP"
KIND_POP = "pop"
KIND_ACK = "ack"
KIND_DLQ = "dlq"
KIND_CHANGE = "change"
KIND_EXPIRE = "expire"
KIND_RESET = "reset"
KIND_RESEND = "resend"
# The queue id of the key that holds a group's resent dead letters, and of their receipt
# handles: no topic has that many queues (a Java int, so RocketMQ clients carry it).
RESENT_QUEUE_ID = 2**31 - 1

CursorKey = tuple[str, str, int]  # (group, topic, queue id)


@dataclass
class InFlight:
    delivery: str
    visible_at_ms: int
    attempt: int  # deliveries so far, this one included; 0: popped by a refused decision


@dataclass
class PopCursor:
    next_offset: int
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    # In flight in memory only: new messages of a refused pop (module docstring).
    unlogged: set[int] = field(default_factory=set)
    # Offsets resent from the dead-letter queue (the RESENT_QUEUE_ID key only), for good.
    resent: set[int] = field(default_factory=set)

    @property
    def consumed_below(self) -> int:
        """Every offset below this one is consumed by the group."""
        return min(self.in_flight, default=self.next_offset)

    def invisible_count(self, now_ms: int) -> int:
        return sum(1 for f in self.in_flight.values() if f.visible_at_ms > now_ms)


def _pairs(body: bytes) -> list[tuple[int, str]]:
    if not body:
        return []
    pairs = []
    for item in body.decode().split(","):
        offset, _, value = item.partition(":")
        pairs.append((int(offset), value))
    return pairs


def _runs(offsets: set[int]) -> list[list[int]]:
    """``offsets`` as ``[first, last]`` runs: a resend of a whole range is one run."""
    runs: list[list[int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] == offset - 1:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset])
    return runs


def _fields(key: CursorKey) -> dict[str, str]:
    return {"group": key[0], "topic": key[1], "queue": str(key[2])}


class PopState(SystemState):
    topic = POP_TOPIC

    def __init__(self, store) -> None:
        super().__init__(store)
        self.cursors: dict[CursorKey, PopCursor] = {}

    def clear(self) -> None:
        self.cursors.clear()

    # ---- reading -------------------------------------------------------------------
    def cursor(self, key: CursorKey) -> PopCursor | None:
        return self.cursors.get(key)

    def is_current(self, key: CursorKey, offset: int, delivery: str) -> bool:
        cursor = self.cursors.get(key)
        if cursor is None:
            return False
        found = cursor.in_flight.get(offset)
        return found is not None and found.delivery == delivery

    # ---- changes: each builds its record and applies it ----------------------------
    def pop(
        self,
        key: CursorKey,
        deliveries: list[tuple[int, int]],
        next_offset: int,
        delivery: str,
        visible_at_ms: int,
    ) -> Message:
        """Deliver ``(offset, attempt)`` pairs under one delivery id; move the cursor."""
        record = self.pop_record(key, deliveries, next_offset, delivery, visible_at_ms)
        self.apply(record.properties, record.body)
        return record

    def pop_record(
        self,
        key: CursorKey,
        deliveries: list[tuple[int, int]],
        next_offset: int,
        delivery: str,
        visible_at_ms: int,
    ) -> Message:
        """The record of ``pop``, not applied (for a change memory takes only once the
        log has it)."""
        body = ",".join(f"{o}:{a}" for o, a in deliveries).encode()
        fields = _fields(key) | {
            "next": str(next_offset),
            "delivery": delivery,
            "visible": str(visible_at_ms),
        }
        return self.record(KIND_POP, body, **fields)

    def ack(self, key: CursorKey, entries: list[tuple[int, str]], kind: str = KIND_ACK) -> Message:
        """End the deliveries ``(offset, delivery)``: acked, or moved to the DLQ."""
        body = ",".join(f"{o}:{d}" for o, d in entries).encode()
        return self._applied(kind, body, _fields(key))

    def change(
        self,
        key: CursorKey,
        offset: int,
        delivery: str,
        new_delivery: str,
        visible_at_ms: int,
        suspend: bool = False,
    ) -> Message:
        """Replace the current delivery of ``offset`` by ``new_delivery``, visible at
        ``visible_at_ms``; ``suspend``: the replaced delivery is not counted (its message
        comes back with the attempt it had)."""
        fields = _fields(key) | {
            "offset": str(offset),
            "delivery": delivery,
            "new": new_delivery,
            "visible": str(visible_at_ms),
        }
        if suspend:
            fields["suspend"] = "1"
        return self._applied(KIND_CHANGE, b"", fields)

    def expire(self, key: CursorKey, upto: int) -> tuple[Message, PopCursor | None]:
        """End the lite topic ``key``'s deliveries at or below ``upto`` (it expired); the
        record, and the cursor as it was (for ``restore_expired``)."""
        cursor = self.cursors.get(key)
        before = None
        if cursor is not None:
            before = PopCursor(cursor.next_offset, dict(cursor.in_flight), set(cursor.unlogged))
        return self._applied(KIND_EXPIRE, b"", _fields(key) | {"upto": str(upto)}), before

    def reset(self, key: CursorKey) -> tuple[Message, PopCursor | None]:
        """End ``key``'s cursor and its deliveries (an offset reset); the record, and the
        cursor as it was (for ``restore_reset``)."""
        before = self.cursors.get(key)
        return self._applied(KIND_RESET, b"", _fields(key)), before

    def resend(
        self, key: CursorKey, offsets: list[int], delivery: str, visible_at_ms: int
    ) -> Message:
        """Resend the dead letters at ``offsets`` (``node/services/dead_letter_resend.py``):
        applied now, before its append (memory order is log order, so a snapshot written
        meanwhile holds it); ``restore_resend`` undoes it if the log refuses the batch."""
        body = ",".join(str(offset) for offset in offsets).encode()
        fields = _fields(key) | {"delivery": delivery, "visible": str(visible_at_ms)}
        return self._applied(KIND_RESEND, body, fields)

    def restore_resend(self, key: CursorKey, offsets: list[int], delivery: str) -> None:
        """Undo a resend whose batch the log refused: its offsets are not resent, and
        their deliveries end unless a receive took them since (then they stay)."""
        cursor = self.cursors.get(key)
        if cursor is None:
            return
        for offset in offsets:
            cursor.resent.discard(offset)
            found = cursor.in_flight.get(offset)
            if found is not None and found.delivery == delivery:
                del cursor.in_flight[offset]

    def resent(self, key: CursorKey) -> set[int]:
        """The offsets of ``key``'s dead-letter queue resent so far."""
        cursor = self.cursors.get(key)
        return cursor.resent if cursor is not None else set()

    def restore_reset(self, key: CursorKey, before: PopCursor | None) -> None:
        """Undo a reset whose record failed to append, unless a receive made a new
        cursor since (the log then holds that receive's record after the refused one)."""
        if before is not None:
            self.cursors.setdefault(key, before)

    def restore_expired(self, key: CursorKey, before: PopCursor | None) -> None:
        """Undo an expiry whose record failed to append (so the log never had it), keeping
        what a receive did since."""
        if before is None:
            return
        cursor = self.cursors.setdefault(key, before)
        if cursor is not before:
            cursor.next_offset = max(cursor.next_offset, before.next_offset)
            for offset, entry in before.in_flight.items():
                cursor.in_flight.setdefault(offset, entry)
            cursor.unlogged |= before.unlogged

    def restore_change(self, key: CursorKey, offset: int, delivery: str, before: InFlight) -> None:
        """Undo a change whose record failed to append: ``offset`` is current under
        ``delivery`` again, as ``before``."""
        cursor = self.cursors.get(key)
        found = cursor.in_flight.get(offset) if cursor else None
        if found is not None and found.delivery == delivery:
            cursor.in_flight[offset] = before

    def keep_unlogged(self, key: CursorKey, offsets: list[int]) -> None:
        """``offsets`` stay in flight in memory only (their pop was refused): restated in
        the log before its cursor moves past them (``append``)."""
        cursor = self.cursors.get(key)
        if cursor is not None:
            cursor.unlogged.update(offsets)

    async def append(self, records: list[Message]) -> PutResult:
        """Append ``records`` as one batch, led by the restatement of every message in
        flight in memory only on a queue whose cursor a pop record in it moves."""
        restated = self._restatements(records)
        result = await super().append([record for _, _, record in restated] + records)
        if result.appended:
            for cursor, offsets, _ in restated:
                cursor.unlogged.difference_update(offsets)
        return result

    def _restatements(self, records: list[Message]) -> list[tuple[PopCursor, list[int], Message]]:
        keys = {
            (r.properties["group"], r.properties["topic"], int(r.properties["queue"]))
            for r in records
            if r.topic == POP_TOPIC and r.properties.get("kind") == KIND_POP
        }
        restated = []
        for key in sorted(keys):
            cursor = self.cursors.get(key)
            if cursor is None or not cursor.unlogged:
                continue
            cursor.unlogged.intersection_update(cursor.in_flight)  # ended since: nothing to say
            by_delivery: dict[tuple[str, int], list[int]] = {}
            for offset in sorted(cursor.unlogged):
                entry = cursor.in_flight[offset]
                by_delivery.setdefault((entry.delivery, entry.visible_at_ms), []).append(offset)
            for (delivery, visible), offsets in by_delivery.items():
                pairs = [(offset, cursor.in_flight[offset].attempt) for offset in offsets]
                record = self.pop_record(key, pairs, cursor.next_offset, delivery, visible)
                restated.append((cursor, offsets, record))
        return restated

    def restore_in_flight(self, key: CursorKey, entries: dict[int, InFlight]) -> None:
        """Undo an ack whose record failed to append (so the log never had it)."""
        cursor = self.cursors.get(key)
        if cursor is not None:
            for offset, entry in entries.items():
                cursor.in_flight.setdefault(offset, entry)

    def _applied(self, kind: str, body: bytes, fields: dict[str, str]) -> Message:
        record = self.record(kind, body, **fields)
        self.apply(record.properties, body)
        return record

    # ---- SystemState ---------------------------------------------------------------
    def apply(self, properties: dict[str, str], body: bytes) -> None:
        kind = properties.get("kind")
        key = (properties["group"], properties["topic"], int(properties["queue"]))
        if kind == KIND_POP:
            next_offset = int(properties["next"])
            cursor = self.cursors.get(key)
            if cursor is None:
                cursor = self.cursors[key] = PopCursor(next_offset)
            cursor.next_offset = max(cursor.next_offset, next_offset)
            delivery, visible = properties["delivery"], int(properties["visible"])
            for offset, attempt in _pairs(body):
                cursor.in_flight[offset] = InFlight(delivery, visible, int(attempt))
        elif kind in (KIND_ACK, KIND_DLQ):
            cursor = self.cursors.get(key)
            if cursor is None:
                return
            for offset, delivery in _pairs(body):
                found = cursor.in_flight.get(offset)
                if found is not None and found.delivery == delivery:
                    del cursor.in_flight[offset]
        elif kind == KIND_CHANGE:
            cursor = self.cursors.get(key)
            found = cursor.in_flight.get(int(properties["offset"])) if cursor else None
            if found is not None and found.delivery == properties["delivery"]:
                found.delivery = properties["new"]
                found.visible_at_ms = int(properties["visible"])
                if properties.get("suspend") == "1":
                    found.attempt = max(found.attempt - 1, 0)
        elif kind == KIND_RESEND:
            offsets = [int(item) for item in body.decode().split(",") if item]
            cursor = self.cursors.get(key)
            if cursor is None:
                cursor = self.cursors[key] = PopCursor(0)
            cursor.next_offset = max([cursor.next_offset, *(o + 1 for o in offsets)])
            delivery, visible = properties["delivery"], int(properties["visible"])
            for offset in offsets:
                if offset not in cursor.resent:  # a replayed older delta changes nothing
                    cursor.in_flight[offset] = InFlight(delivery, visible, 0)
                    cursor.resent.add(offset)
        elif kind == KIND_RESET:
            self.cursors.pop(key, None)
        elif kind == KIND_EXPIRE:
            cursor = self.cursors.get(key)
            if cursor is None:
                return
            upto = int(properties["upto"])
            for offset in [o for o in cursor.in_flight if o <= upto]:
                del cursor.in_flight[offset]
                cursor.unlogged.discard(offset)
            if not cursor.in_flight and cursor.next_offset <= upto + 1:
                del self.cursors[key]

    def restore(self, snapshot: bytes) -> None:
        """Rows of 5 fields (before resends) or 6 (the resent offsets as ``[first, last]``
        runs)."""
        self.cursors = {}
        for g, t, q, next_offset, in_flight, *rest in json.loads(snapshot):
            flying = {o: InFlight(d, v, a) for o, d, v, a in in_flight}
            resent = {
                o for first, last in (rest[0] if rest else []) for o in range(first, last + 1)
            }
            self.cursors[(g, t, q)] = PopCursor(next_offset, flying, resent=resent)

    def snapshot(self) -> bytes | None:
        if not self.cursors:
            return None
        rows = [
            [
                g,
                t,
                q,
                c.next_offset,
                [
                    [o, f.delivery, f.visible_at_ms, f.attempt]
                    for o, f in sorted(c.in_flight.items())
                ],
            ]
            + ([_runs(c.resent)] if c.resent else [])  # rows without resends: as before
            for (g, t, q), c in sorted(self.cursors.items())
        ]
        return json.dumps(rows).encode()

    def check(self) -> None:
        """Assert the invariants of the module docstring (tests call this)."""
        for key, cursor in self.cursors.items():
            for offset, entry in cursor.in_flight.items():
                assert offset < cursor.next_offset, (key, offset, cursor.next_offset)
                assert entry.attempt >= 0, (key, offset, entry)
