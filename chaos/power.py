"""Imitate a machine losing power: the node is killed, then every CommitLog segment and
consume-queue file keeps only what its last fsync made durable (``store.sync_ledger``,
which the nodes write when ``FERRYMQ_CHAOS_SYNC_LEDGER=1``); the rest is zeroed, as the
disk would hold it. A file never synced is zeroed whole. Index files, which are not
append-only, are replaced by the copy taken at their last completed sync (zeroed when
they never completed one).

Not imitated: the Raft journal of routing, which pysyncobj never fsyncs
(docs/guarantees.md: a power loss of a majority of voters can lose recent routing changes;
discarding it whole would test that known gap, not the message store).
"""

from __future__ import annotations

import os
import shutil

from store.sync_ledger import read as read_ledger
from store.sync_ledger import synced_copy

LINEAR_FILE_DIRECTORIES = ("commitlog", "consumequeue")
INDEX_DIRECTORY = "index"


def discard_unsynced(data_dir: str) -> int:
    """Zero what ``data_dir``'s store had not forced to disk; how many written bytes
    that lost (up to the last non-zero byte of each file: files are preallocated)."""
    durable = read_ledger(data_dir)
    discarded = 0
    for directory in LINEAR_FILE_DIRECTORIES:
        for root, _, names in os.walk(os.path.join(data_dir, directory)):
            for name in names:
                path = os.path.join(root, name)
                keep = durable.get(os.path.relpath(path, data_dir), 0)
                size = os.path.getsize(path)
                if keep < size:
                    with open(path, "r+b") as f:
                        f.seek(keep)
                        discarded += len(f.read().rstrip(b"\0"))
                        f.truncate(keep)
                        f.truncate(size)  # a hole: reads as zeros
    for root, _, names in os.walk(os.path.join(data_dir, INDEX_DIRECTORY)):
        for name in names:
            path = os.path.join(root, name)
            copy = synced_copy(data_dir, os.path.relpath(path, data_dir))
            with open(path, "rb") as f:
                before = f.read()
            if copy is not None:
                with open(copy, "rb") as f:
                    after = f.read()
                shutil.copyfile(copy, path)
            else:
                after = bytes(len(before))
                with open(path, "r+b") as f:
                    f.truncate(0)
                    f.truncate(len(before))  # a hole: reads as zeros
            discarded += bytes_differing(before, after)
    return discarded


def bytes_differing(before: bytes, after: bytes, block: int = 1 << 16) -> int:
    """How many bytes differ, comparing whole blocks first (index files are mostly
    unchanged, and a byte-by-byte loop over them in Python would take minutes)."""
    differing = abs(len(before) - len(after))
    for start in range(0, min(len(before), len(after)), block):
        old, new = before[start : start + block], after[start : start + block]
        if old != new:
            differing += sum(a != b for a, b in zip(old, new, strict=False))
    return differing
