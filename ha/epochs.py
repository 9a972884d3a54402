"""A node's epoch history: ``(epoch, start offset)`` for every term of mastership whose
records its CommitLog holds (RocketMQ 5's epoch file, AutoSwitch).

Invariants: epochs and start offsets strictly increase; the last entry's epoch is the
newest term this log has data of. Entry *i* covers ``[start_i, start_{i+1})``, the last one
up to the log's end. Two logs agree up to the end of the newest epoch they share with the
same start offset, which is where a diverged slave truncates (``truncation_point``).

The file ``<data>/epochs`` is text: a count, a CRC32 of the entry lines, then one
``epoch start`` line each; written to a temporary file, fsynced and renamed.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import itertools
import os
import zlib
from dataclasses import dataclass

EPOCH_FILE = "epochs"


class EpochFileError(ValueError):
    """The epoch file is damaged (its CRC or its order is wrong)."""


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochHistory:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, EPOCH_FILE)
        self.entries: list[EpochEntry] = []
        if os.path.exists(self.path):
            self.entries = self._read()

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def epoch_at(self, offset: int) -> EpochEntry | None:
        """The entry whose range holds ``offset``."""
        found = None
        for entry in self.entries:
            if entry.start_offset <= offset:
                found = entry
            else:
                break
        return found

    def append(self, epoch: int, start_offset: int) -> None:
        last = self.last
        if last is not None:
            if epoch <= last.epoch:
                raise ValueError(f"epoch {epoch} is not newer than {last.epoch}")
            if start_offset < last.start_offset:
                raise ValueError(f"epoch start {start_offset} is before {last.start_offset}")
            if start_offset == last.start_offset:
                # The previous term wrote nothing here: the new one replaces it.
                self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._write()

    def truncate_from(self, offset: int) -> None:
        """Forget terms that start at or after ``offset`` (the log was cut there)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    # ---- persistence -------------------------------------------------------------------
    def _read(self) -> list[EpochEntry]:
        with open(self.path, encoding="ascii") as f:
            lines = f.read().splitlines()
        if len(lines) < 2 or not lines[0].isdigit():
            raise EpochFileError(f"{self.path}: no header")
        count, crc = int(lines[0]), lines[1]
        body = lines[2:]
        if len(body) != count or f"{zlib.crc32(chr(10).join(body).encode()):08x}" != crc:
            raise EpochFileError(f"{self.path}: damaged (count or CRC mismatch)")
        entries = []
        for line in body:
            epoch, start = line.split()
            entries.append(EpochEntry(int(epoch), int(start)))
        for before, after in itertools.pairwise(entries):
            if not (before.epoch < after.epoch and before.start_offset <= after.start_offset):
                raise EpochFileError(f"{self.path}: entries out of order")
        return entries

    def _write(self) -> None:
        body = "\n".join(f"{e.epoch} {e.start_offset}" for e in self.entries)
        text = f"{len(self.entries)}\n{zlib.crc32(body.encode()):08x}\n{body}\n"
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="ascii") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        directory = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def truncation_point(
    local: list[EpochEntry], local_end: int, master: list[EpochEntry], master_end: int
) -> int | None:
    """Where a slave's log stops agreeing with its master's: the end of the newest epoch
    both hold with the same start offset (the shorter of the two ends).

    When they share no epoch: an empty log agrees with everyone (0). A log whose terms are
    all older than the master's newest, against a master whose history covers its whole
    log (first term at 0), holds nothing of the master's: it is cut whole (0). That is
    the old master of a group whose new master was promoted before it had received a
    record (a term that wrote nothing it received leaves no entry). Otherwise None: the
    log may be another group's, and an operator must decide."""
    if local_end == 0:
        return 0
    if not local:
        return None
    master_ranges = {}
    for index, entry in enumerate(master):
        end = master[index + 1].start_offset if index + 1 < len(master) else master_end
        master_ranges[(entry.epoch, entry.start_offset)] = end
    for index in range(len(local) - 1, -1, -1):
        entry = local[index]
        master_end_of = master_ranges.get((entry.epoch, entry.start_offset))
        if master_end_of is None:
            continue
        local_end_of = local[index + 1].start_offset if index + 1 < len(local) else local_end
        return min(local_end_of, master_end_of)
    if master and master[0].start_offset == 0 and local[-1].epoch < master[-1].epoch:
        return 0
    return None
