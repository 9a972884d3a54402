"""Routing's Raft files, written so that the Raft thread never frees disk blocks.

Why (issue 38): under a slow disk (``slow-disk-master``: the node's process tree held to
40 operations a second) a live master was deposed. Its routing host's Raft thread sat for
seconds in ``rename``: pysyncobj stores the term, the vote and the commit index by writing
``journal.meta.tmp`` and renaming it over ``journal.meta`` every second, the rename drops
the last link to the old file, and the kernel frees that file's blocks inside the call,
discards and all, queued behind the node's own throttled writes. A thread that stalls
there answers no append and applies no commit, so the node's heartbeats went unconfirmed
for its whole lease. The same happens, more rarely, when a snapshot replaces the last one.

So:
- ``TermFile`` keeps the term, the vote and the commit index in one fixed-size file,
  written in place: two slots taken in turn, each checked by a CRC and numbered, the
  newest whole one read back. No write changes its size or replaces it. A new term or
  vote is synced before it is used (Raft votes once per term, even across a power loss);
  the commit index, which a restarted replica learns again from its leader, is not.
- ``replace_keeping_old`` replaces a snapshot by rename after linking the old one aside:
  the rename then frees nothing, and the aside link is removed by a thread of its own.
- ``RaftJournal`` is pysyncobj's file journal for the entries and a ``TermFile`` for the
  rest; ``install`` makes pysyncobj build one for every replica with a journal file.

Upgrade: a ``journal.meta`` left by 0.1.0 is read once, when its ``journal.term`` is
created; after that it is neither read nor written (CHANGELOG.md).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import struct
import threading
import zlib
from dataclasses import dataclass

import pysyncobj.serializer
import pysyncobj.syncobj
from pysyncobj.journal import FileJournal, Journal, MemoryJournal

log = logging.getLogger("ferrymq.routing")

SLOT_BYTES = 512  # one sector: written whole by the disk
SLOTS = 2
MAGIC = b"FMQTERM1"
SLOT_HEADER = struct.Struct("<8sQII")  # magic, sequence, payload length, CRC-32
ASIDE_SUFFIX = ".replaced-"


@dataclass(frozen=True)
class TermRecord:
    term: int = 0
    voted_for: str | None = None
    commit_index: int = 1  # pysyncobj's first index


def encode_slot(sequence: int, record: TermRecord) -> bytes:
    payload = json.dumps(
        {"term": record.term, "voted_for": record.voted_for, "commit_index": record.commit_index}
    ).encode()
    crc = zlib.crc32(struct.pack("<QI", sequence, len(payload)) + payload)
    slot = SLOT_HEADER.pack(MAGIC, sequence, len(payload), crc) + payload
    assert len(slot) <= SLOT_BYTES, f"term record of {len(slot)} bytes outgrew its slot"
    return slot.ljust(SLOT_BYTES, b"\0")


def decode_slot(slot: bytes) -> tuple[int, TermRecord] | None:
    """(sequence, record) of a whole slot; None for an empty, torn or foreign one."""
    if len(slot) < SLOT_HEADER.size:
        return None
    magic, sequence, length, crc = SLOT_HEADER.unpack_from(slot)
    payload = slot[SLOT_HEADER.size : SLOT_HEADER.size + length]
    if magic != MAGIC or len(payload) != length:
        return None
    if zlib.crc32(struct.pack("<QI", sequence, length) + payload) != crc:
        return None
    fields = json.loads(payload)
    return sequence, TermRecord(fields["term"], fields["voted_for"], fields["commit_index"])


class TermFile:
    """The term, the vote and the commit index, in place (see the module's docstring).
    Used by one thread (pysyncobj's)."""

    def __init__(self, path: str, initial: TermRecord) -> None:
        """Open ``path``, or create it holding ``initial`` (the 0.1.0 values, if any)."""
        if not os.path.exists(path):
            _create_durably(path, encode_slot(0, initial) + bytes(SLOT_BYTES))
        self.path = path
        self._fd = os.open(path, os.O_RDWR)
        found = [decode_slot(os.pread(self._fd, SLOT_BYTES, i * SLOT_BYTES)) for i in range(SLOTS)]
        whole = [each for each in found if each is not None]
        if not whole:
            os.close(self._fd)
            raise ValueError(f"{path}: neither slot holds a whole term record")
        self._sequence, self.record = max(whole, key=lambda each: each[0])

    def store(self, record: TermRecord, *, durable: bool) -> None:
        """Write ``record`` over the older slot (synced first when ``durable``)."""
        sequence = self._sequence + 1
        slot = encode_slot(sequence, record)
        written = os.pwrite(self._fd, slot, (sequence % SLOTS) * SLOT_BYTES)
        assert written == SLOT_BYTES, f"short write of a term slot: {written} bytes"
        if durable:
            os.fdatasync(self._fd)
        self._sequence, self.record = sequence, record

    def close(self) -> None:
        os.close(self._fd)


def _create_durably(path: str, content: bytes) -> None:
    """``path`` holding ``content``, whole or not at all, even across a power loss."""
    temporary = path + ".tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class RaftJournal(Journal):
    """pysyncobj's ``FileJournal`` for the log's entries (written in place into a file
    that only grows) and a ``TermFile`` (``<journal>.term``) for the term, the vote and
    the commit index, which the ``FileJournal`` would store by rename."""

    def __init__(self, path: str) -> None:
        self._entries = FileJournal(path)  # reads a 0.1.0 journal.meta, never writes it
        initial = TermRecord(
            self._entries.getCurrentTerm(),
            self._entries.getVotedForNodeId(),
            self._entries.getRaftCommitIndex(),
        )
        self._terms = TermFile(path + ".term", initial)
        self._commit_index = self._terms.record.commit_index

    # ---- the entries: pysyncobj's file journal (its method names are pysyncobj's) --
    def add(self, command, idx, term) -> None:
        self._entries.add(command, idx, term)

    def clear(self) -> None:
        self._entries.clear()

    def deleteEntriesFrom(self, entryFrom) -> None:
        self._entries.deleteEntriesFrom(entryFrom)

    def deleteEntriesTo(self, entryTo) -> None:
        self._entries.deleteEntriesTo(entryTo)

    def __getitem__(self, item):
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def flush(self) -> None:
        self._entries.flush()

    def _destroy(self) -> None:
        self._entries._destroy()
        self._terms.close()

    # ---- the term, the vote, the commit index: the term file ----------------------
    def setCurrentTerm(self, term, votedForNodeId) -> None:
        # Raft: durable before any message that reflects it (a vote, a new term) leaves.
        assert votedForNodeId is None or isinstance(votedForNodeId, str), votedForNodeId
        record = TermRecord(term, votedForNodeId, self._commit_index)
        self._terms.store(record, durable=True)

    def getCurrentTerm(self) -> int:
        return self._terms.record.term

    def getVotedForNodeId(self) -> str | None:
        return self._terms.record.voted_for

    def setRaftCommitIndex(self, raftCommitIndex) -> None:
        self._commit_index = raftCommitIndex  # stored by the next second's timer

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def onOneSecondTimer(self) -> None:
        current = self._terms.record
        if current.commit_index != self._commit_index:
            record = TermRecord(current.term, current.voted_for, self._commit_index)
            self._terms.store(record, durable=False)


# ---- snapshots: replaced without freeing on the Raft thread ----------------------------
_asides: queue.SimpleQueue[str] = queue.SimpleQueue()
_aside_numbers = itertools.count()
_reaper_started = threading.Lock()
_reaper: threading.Thread | None = None


def replace_keeping_old(source: str, target: str) -> None:
    """``os.rename(source, target)``, but a ``target`` it replaces keeps a link (removed
    by the reaper thread), so the rename does not free its blocks on the caller's thread."""
    aside = f"{target}{ASIDE_SUFFIX}{os.getpid()}-{next(_aside_numbers)}"
    try:
        os.link(target, aside)
    except FileNotFoundError:  # nothing to replace
        aside = ""
    os.rename(source, target)
    if aside:
        _reclaim(aside)


def reclaim_leftovers(directory: str) -> None:
    """Hand the reaper the aside links an ended process left in ``directory``."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            if ASIDE_SUFFIX in name:
                _reclaim(os.path.join(directory, name))


def _reclaim(path: str) -> None:
    global _reaper
    with _reaper_started:
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="raft-file-reaper", daemon=True)
            _reaper.start()
    _asides.put(path)


def _reap() -> None:
    while True:
        path = _asides.get()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            log.exception("could not remove the replaced Raft file %s", path)


def _create_journal(journal_file: str | None) -> Journal:
    return MemoryJournal() if journal_file is None else RaftJournal(journal_file)


def install() -> None:
    """Make pysyncobj use these files: its nodes build their journal with the
    ``createJournal`` and replace snapshots with the ``atomicReplace`` of its modules."""
    pysyncobj.syncobj.createJournal = _create_journal
    pysyncobj.serializer.atomicReplace = replace_keeping_old
