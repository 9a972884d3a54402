"""Imitate a machine losing power: the node is killed, then every CommitLog segment and
consume-queue file keeps only what its last fsync made durable (``store.sync_ledger``,
which the nodes write when ``FERRYMQ_CHAOS_SYNC_LEDGER=1``); the rest is zeroed, as the
disk would hold it. A file never synced is zeroed whole.

Not imitated: index files (a lookup aid by key, which the chaos checker does not read;
they keep their page-cache state, as after a SIGKILL) and the Raft journal of routing,
which pysyncobj never fsyncs (docs/guarantees.md: a power loss of a majority of voters
can lose recent routing changes; discarding it whole would test that known gap, not the
message store).
"""

from __future__ import annotations

import os

from store.sync_ledger import read as read_ledger

LINEAR_FILE_DIRECTORIES = ("commitlog", "consumequeue")


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
    return discarded
