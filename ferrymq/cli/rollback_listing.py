"""What ``ferrymq rollback --data DIR`` reads offline: the bytes a node cut from its log
and kept aside first.

Two kinds of files: rollback files (``ha/rollback.py``), the tail a node cut when it
rejoined a new master, whole records; and damaged ranges (``store/damaged_ranges.py``),
what recovery cut after an invalid record, of which the records that still validate are
listed and the bytes that do not are shown as unreadable spans with their reason.

Damaged ranges are resent with ``--resend`` like rollback files, except the records the
node's log holds again byte for byte at the same offset: those came back from its master
when it refilled the range, and sending them would store them twice.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from ferrymq.codec.commitlog_record import StoredMessage
from ha import rollback
from store.damaged_ranges import (
    DamagedRange,
    LogFiles,
    Unreadable,
    described_ranges,
    read_kept,
)

KIND_ROLLBACK = "rollback"
KIND_DAMAGED = "damaged"
KIND_UNREADABLE = "unreadable"
UNDESCRIBED = "no description: the reason is unknown"


@dataclass(frozen=True)
class KeptRange:
    """One damaged range as the listing shows it: its file, its description (None when
    that cannot be read: ``problem`` says why) and what the file holds."""

    path: str
    start: int  # the offset of the file's first byte
    description: DamagedRange | None
    problem: str
    items: list[StoredMessage | Unreadable]

    @property
    def file(self) -> str:
        return os.path.basename(self.path)


def damaged_ranges(data_dir: str) -> list[KeptRange]:
    found = []
    for path, description, problem in described_ranges(data_dir):
        if description is not None:
            start, reason = description.start, description.reason
        else:
            start, reason = _start_from_name(os.path.basename(path)), UNDESCRIBED
        items = read_kept(path, start, reason)
        found.append(KeptRange(path, start, description, problem, items))
    return found


def _start_from_name(name: str) -> int:
    digits = name.split("-", 1)[0]
    return int(digits) if digits.isdigit() else 0


def rows(data_dir: str, ranges: list[KeptRange]) -> list[dict]:
    """One row per message of the rollback files and the damaged ranges, and one per
    unreadable span, in file order."""
    listed = []
    for path in rollback.rollback_files(data_dir):
        for message in rollback.records_in(path):
            listed.append(message_row(os.path.basename(path), KIND_ROLLBACK, message))
    for kept in ranges:
        refilled = kept.description.refilled_to if kept.description else None
        for item in kept.items:
            if isinstance(item, Unreadable):
                row = message_row(kept.file, KIND_UNREADABLE, None)
                row.update(physical_offset=item.start, end_offset=item.end, reason=item.reason)
            else:
                row = message_row(kept.file, KIND_DAMAGED, item)
            row["refilled_to"] = refilled
            listed.append(row)
    return listed


def message_row(file: str, kind: str, message: StoredMessage | None) -> dict:
    if message is None:
        return {
            "file": file,
            "kind": kind,
            "topic": "",
            "queue_id": -1,
            "queue_offset": -1,
            "physical_offset": -1,
            "message_id": "",
            "tag": "",
            "keys": [],
            "body": b"",
        }
    return {
        "file": file,
        "kind": kind,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "physical_offset": message.physical_offset,
        "message_id": message.unique_key or "",
        "tag": message.tags or "",
        "keys": message.keys,
        "body": message.body,
    }


def table_row(row: dict) -> list:
    if row["kind"] == KIND_UNREADABLE:
        length = row["end_offset"] - row["physical_offset"]
        what = f"{length} bytes unreadable, to {row['end_offset']}: {row['reason']}"
        return [row["file"], row["kind"], row["physical_offset"], "", "", "", "", "", "", what]
    return [
        row["file"],
        row["kind"],
        row["physical_offset"],
        row["topic"],
        row["queue_id"],
        row["queue_offset"],
        row["message_id"],
        row["tag"],
        " ".join(row["keys"]),
        row["body"],
    ]


TABLE_HEADERS = [
    "file",
    "kind",
    "log offset",
    "topic",
    "queue",
    "offset",
    "message id",
    "tag",
    "keys",
    "body",
]


def summary(kept: KeptRange) -> str:
    """One line per damaged range: where, why, when, and whether it was refilled."""
    damaged = kept.description
    if damaged is None:
        return f"damaged range in {kept.file}: {kept.problem}"
    found = datetime.datetime.fromtimestamp(damaged.found_ms / 1000, datetime.UTC)
    records = sum(1 for item in kept.items if not isinstance(item, Unreadable))
    line = (
        f"damaged range [{damaged.start}, {damaged.end}) cut by recovery at "
        f"{found:%Y-%m-%d %H:%M:%S} UTC: {damaged.reason}; {kept.file} holds "
        f"[{damaged.start}, {damaged.kept_end}), {records} records of it still valid; "
    )
    if damaged.refilled_to is None:
        return line + "not refilled from a master"
    return line + f"refilled from a master (the log reached {damaged.refilled_to})"


def resendable(data_dir: str, ranges: list[KeptRange]) -> tuple[list[StoredMessage], int]:
    """The valid records of the damaged ranges that the node's log does not hold again,
    and how many it does (refilled from its master: not to be sent twice)."""
    log = LogFiles(data_dir)
    missing, held = [], 0
    for kept in ranges:
        with open(kept.path, "rb") as f:
            for item in kept.items:
                if isinstance(item, Unreadable):
                    continue
                f.seek(item.physical_offset - kept.start)
                if log.holds(item.physical_offset, f.read(item.size)):
                    held += 1
                else:
                    missing.append(item)
    return missing, held
