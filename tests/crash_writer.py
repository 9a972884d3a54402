"""Child process for the crash tests: appends forever and reports each acknowledged write.

Usage: python tests/crash_writer.py DATA_DIR FLUSH_MODE START_SEQUENCE

Every put that returns OK is reported on stdout as ``ack <unique key> ...`` *after* the put
returned, so the parent knows exactly which writes were acknowledged when it SIGKILLs us.
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from store.config import FlushMode, StoreConfig
from store.message import Message
from store.message_store import MessageStore

CONFIG = dict(
    commitlog_segment_bytes=256 * 1024,
    max_message_body_bytes=16 * 1024,
    consume_queue_entries_per_file=64,
    index_slot_count=97,
    index_entry_count=300,
)


def main() -> None:
    data_dir, mode, start = sys.argv[1], FlushMode(sys.argv[2]), int(sys.argv[3])
    store = MessageStore.open(StoreConfig(data_dir, flush_mode=mode, **CONFIG))
    print("ready", flush=True)
    rng = random.Random(start)
    sequence = start
    out = sys.stdout
    while True:
        batch = []
        for _ in range(rng.randint(1, 6)):
            sequence += 1
            batch.append(
                Message.build(
                    rng.choice(["orders", "payments"]),
                    os.urandom(rng.randint(1, 3000)),
                    queue_id=rng.randrange(3),
                    tags=rng.choice(["TagA", "TagB", None]),
                    keys=[f"key-{sequence % 50}"],
                    unique_key=f"U{sequence:012d}",
                )
            )
        result = store.put_messages(batch)
        if result.ok:
            out.write("ack " + " ".join(m.properties["UNIQ_KEY"] for m in batch) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
