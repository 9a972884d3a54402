"""Record parsing never relies on ``assert`` (security review, issue 25): the checks that
decide whether bytes are a record are run under ``python -O`` (which strips asserts) in a
subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.node_process import ROOT

# ---- python -O: no check is an assert -------------------------------------------------

OPTIMIZED = r"""
import itertools, json, sys, tempfile
from ferrymq.client.errors import FerryError
from ferrymq.client.messages import decode_records
from store import commitlog_record as record
from store.commitlog import CODEC, dispatch_request_at
from store.config import StoreConfig
from store.message import Message, encode_properties
from store.message_store import MessageStore

asserts_run = False
try:
    assert False
except AssertionError:
    asserts_run = True

props = encode_properties({"UNIQ_KEY": "U1", "KEYS": "k"})
size = record.record_size(5, 1, len(props))
good = record.encode(
    size=size, body=b"hello", topic=b"T", properties=props, queue_id=0, flag=0,
    queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp_ms=1, born_host=bytes(8),
    store_timestamp_ms=2, store_host=bytes(8), reconsume_times=0, prepared_transaction_offset=0,
)

def patched(at, raw):
    return good[:at] + raw + good[at + len(raw):]

bad = {
    "bad magic": patched(4, b"\x00\x00\x00\x01"),
    "size past the lengths": patched(0, (size + 10).to_bytes(4, "big")) + bytes(10),
    "size past the data": patched(0, (size + 1000).to_bytes(4, "big")),
    "topic not UTF-8": patched(record.HEADER_SIZE + 6, b"\xff"),
}

def outcome(call):
    try:
        call()
    except Exception as error:
        return type(error).__name__
    return "decoded"

results = {"asserts_run": asserts_run}
for name, data in bad.items():
    results["decode: " + name] = outcome(lambda: record.decode(data, 0))
results["dispatch_request_at: bad magic"] = outcome(
    lambda: dispatch_request_at(bad["bad magic"], 0)
)
results["C dispatch_requests: bad magic"] = outcome(
    lambda: CODEC.dispatch_requests(bad["bad magic"], 0, len(good), 4)
)
results["Fetch answer: bad magic"] = outcome(lambda: decode_records(bad["bad magic"]))

with tempfile.TemporaryDirectory() as directory:
    store = MessageStore.open(StoreConfig(
        directory, commitlog_segment_bytes=1 << 16, max_message_body_bytes=8 << 10,
        consume_queue_entries_per_file=100,
        index_slot_count=7, index_entry_count=4,
    ))
    # Three keys a record in files of four entries: records fill files mid-record.
    keys = [["k%d-%s" % (i, c) for c in "abc"] for i in range(12)]
    for i in range(12):
        store.put_message(Message.build("T", b"m%d" % i, keys=keys[i]))
    results["keys indexed"] = sum(1 for k in sum(keys, []) if store.query_by_key("T", k))
    log = store.commitlog
    # Zeros after the last record, read as if they were records.
    records = itertools.islice(log.iterate(0, log.write_offset + 200), 20)
    results["iterate over zeros"] = outcome(lambda: list(records))
    store.shutdown()
print(json.dumps(results))
"""


def test_record_parsing_refuses_bad_bytes_under_python_dash_o():
    """Under ``python -O`` asserts vanish: each check that decides whether bytes are a
    record must still refuse them, with ``CorruptRecordError`` (the client's Fetch
    decoding with ``FerryError``), and an index file that fills up must still take the key
    that overflowed it (that put was inside an ``assert``)."""
    ran = subprocess.run(
        [sys.executable, "-O", "-c", OPTIMIZED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    refused = "CorruptRecordError"
    assert json.loads(ran.stdout) == {
        "asserts_run": False,  # really -O
        "decode: bad magic": refused,
        "decode: size past the lengths": refused,
        "decode: size past the data": refused,
        "decode: topic not UTF-8": refused,
        "dispatch_request_at: bad magic": refused,
        "C dispatch_requests: bad magic": refused,
        "Fetch answer: bad magic": "FerryError",  # the SDK's MALFORMED_ANSWER
        "keys indexed": 36,
        "iterate over zeros": refused,
    }
