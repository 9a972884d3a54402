"""Child process of the SIGKILL tests: appends until killed, reporting every acknowledged put.

Usage: python tests/support/store_crash_writer.py DATA_DIR FLUSH_MODE SEED

Opens the store (recovering whatever the previous, killed writer left), prints
``ready <write offset>``, then loops over single puts and batches of 2-5 messages on two
topics, four queues, with tags, shared keys and a unique key per message. Only *after* a
put returned OK does it report, one line per message::

    ack <unique key> <topic> <queue id> <queue offset> <physical offset> <crc32 of body>

All lines of one put go out in a single ``os.write`` to the pipe on stdout: below PIPE_BUF
that write is atomic, so the parent never sees half a put, and nothing sits in a user-space
buffer that a SIGKILL would drop. Unique keys start with SEED, so every run's are distinct.
"""

from __future__ import annotations

import os
import random
import sys
import zlib

# Run as a script (``python tests/support/store_crash_writer.py``): the checkout's packages.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore

CONFIG = dict(
    commitlog_segment_bytes=128 * 1024,
    max_message_body_bytes=16 * 1024,
    consume_queue_entries_per_file=64,
    index_slot_count=101,
    index_entry_count=400,
)
TOPICS = ("orders", "payments")
QUEUES = 4
SHARED_KEYS = 40
MAX_BATCH = 5


def config_for(data_dir: str, mode: FlushMode) -> StoreConfig:
    return StoreConfig(data_dir, flush_mode=mode, **CONFIG)


def body_of(unique_key: str, length: int) -> bytes:
    """Deterministic content, so a record read back can be checked byte for byte."""
    return random.Random(unique_key).randbytes(length)


def main() -> None:
    data_dir, mode, seed = sys.argv[1], FlushMode(sys.argv[2]), int(sys.argv[3])
    store = MessageStore.open(config_for(data_dir, mode))
    os.write(1, f"ready {store.commitlog.write_offset}\n".encode())
    rng = random.Random(seed)
    sequence = 0
    while True:
        batch = []
        for _ in range(1 if rng.random() < 0.5 else rng.randint(2, MAX_BATCH)):
            sequence += 1
            unique_key = f"S{seed}-{sequence}"
            batch.append(
                Message.build(
                    rng.choice(TOPICS),
                    body_of(unique_key, rng.randint(0, 3000)),
                    queue_id=rng.randrange(QUEUES),
                    tags=rng.choice(("TagA", "TagB", None)),
                    keys=[f"key-{rng.randrange(SHARED_KEYS)}"],
                    unique_key=unique_key,
                )
            )
        result = store.put_messages(batch)
        if not result.ok:
            os.write(1, f"nack {result.status.value}\n".encode())
            continue
        lines = [
            f"ack {m.properties['UNIQ_KEY']} {m.topic} {m.queue_id} {a.queue_offset} "
            f"{a.physical_offset} {zlib.crc32(m.body)}\n"
            for m, a in zip(batch, result.appended, strict=True)
        ]
        os.write(1, "".join(lines).encode())


if __name__ == "__main__":
    main()
