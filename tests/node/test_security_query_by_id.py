"""Lookups by offset id return only real records (security review, issue 25).

The review's attack: a user who may publish to ``mine`` writes a record header inside a
message body, with a body length that runs over the next records (another topic's), closes
it with a second message of its own, and asks QueryMessageById (topic ``mine``) for the
forged offset: the victim's bytes came back. Now a lookup answers only at a record its
consume queue points at, after every check recovery makes (magic, lengths, body CRC), and
a caller naming a topic gets only records stored in that topic: transaction halves and
delayed messages waiting in system topics are not their real topic's messages yet.

Record parsing never relies on ``assert``: the checks that decide whether bytes are a
record are run under ``python -O`` (which strips asserts) in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from crc32c import crc32c

from ferrymq.client import Admin, ClientSecurity, Producer
from ferrymq.client.admin import AclRule
from ferrymq.client.messages import Message as ClientMessage
from ferrymq.codec import commitlog_record as record
from ferrymq.codec.message_id import offset_message_id
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.services.transactions import HALF_TOPIC
from store.config import StoreConfig
from store.message import TIMER_TOPIC, Message
from store.message_store import MessageStore
from tests.support import ROOT
from tests.support.nodes import start_node

SPAN = 4096  # the forged body's length: over the victim's records into the closing message


def forged_header(at: int, topic: bytes, crc: int = 0) -> bytes:
    """A record header a producer writes into its message body: a record of ``topic`` at
    ``at`` (its PHYSICALOFFSET field says so) whose body runs ``SPAN`` bytes on."""
    size = record.record_size(SPAN, len(topic), 0)
    no_host = bytes(8)
    return record.HEADER.pack(
        size, record.MESSAGE_MAGIC, crc, 0, 0, 0, at, 0, 0, no_host, 0, no_host, 0, 0, SPAN
    )


def closing_body(forged_at: int, closing_at: int, topic: bytes) -> bytes:
    """The body of the message stored at ``closing_at`` that ends the forged record: filler
    up to the forged body's end, then TOPICLENGTH, TOPIC and empty properties."""
    filler = forged_at + record.HEADER_SIZE + SPAN - (closing_at + record.HEADER_SIZE)
    assert filler >= 0, "the victim's records outgrew the forged span"
    return b"y" * filler + bytes([len(topic)]) + topic + b"\x00\x00" + b"z" * 8


def secret(i: int) -> bytes:
    return b"VICTIM-SECRET-%d-" % i + b"s" * 60


# ---- the store ----------------------------------------------------------------------


def open_store(tmp_path) -> MessageStore:
    return MessageStore.open(
        StoreConfig(
            str(tmp_path / "store"),
            commitlog_segment_bytes=1 << 20,
            max_message_body_bytes=64 << 10,
            consume_queue_entries_per_file=100,
            index_slot_count=64,
            index_entry_count=400,
        )
    )


@pytest.mark.parametrize("topic", [b"mine", b"victim", b"\xff\xfe"], ids=["own", "victim", "utf8"])
@pytest.mark.parametrize("crc_known", [False, True], ids=["crc-guessed", "crc-known"])
def test_a_header_forged_in_a_body_is_never_read_as_a_record(tmp_path, topic, crc_known):
    """With ``crc-known`` the attacker is granted every byte its forged body spans (the
    forged CRC is right): only the consume-queue check then stands between it and the
    victim's bytes. The forged record claims its own topic, the victim's, or one that is
    not UTF-8 (no record has such a topic: nothing is found, and nothing raises)."""
    store = open_store(tmp_path)
    try:
        first_at = store.commitlog.write_offset
        forged_at = first_at + record.HEADER_SIZE  # the header opens the first body
        first = store.put_message(Message("mine", forged_header(forged_at, topic) + b"x" * 16))
        assert first.appended[0].physical_offset == first_at
        victims = [
            store.put_message(Message.build("victim", secret(i), unique_key=f"V{i}")).appended[0]
            for i in range(3)
        ]
        closing_at = store.commitlog.write_offset
        store.put_message(Message("mine", closing_body(forged_at, closing_at, topic)))
        segment = store.commitlog.segments.find(forged_at)
        if crc_known:
            body_at = forged_at - segment.base_offset + record.HEADER_SIZE
            crc = crc32c(segment.map[body_at : body_at + SPAN])
            at = forged_at - segment.base_offset + record.OFFSET_BODY_CRC
            record.CRC_AT.pack_into(segment.map, at, crc)
        forged_local = forged_at - segment.base_offset
        assert (record.check_at(segment.map, forged_local, segment.size).size > 0) == crc_known

        forged_id = offset_message_id(store.commitlog.store_host, forged_at)
        for found in (store.look_message_by_id(forged_id), store.look_message_by_offset(forged_at)):
            assert found is None, f"the forged offset read {found.topic}: {found.body[:120]!r}"
        for i, victim in enumerate(victims):  # the real records still answer
            assert store.look_message_by_id(victim.offset_message_id).body == secret(i)
    finally:
        store.shutdown()


def test_a_flipped_body_byte_makes_every_lookup_of_that_record_find_nothing(tmp_path):
    store = open_store(tmp_path)
    try:
        put = [
            store.put_message(Message.build("T", body, keys=["k"], unique_key=key)).appended[0]
            for key, body in (("A", b"before"), ("D", b"to be damaged"), ("C", b"after"))
        ]
        damaged = put[1]
        segment = store.commitlog.segments.find(damaged.physical_offset)
        at = damaged.physical_offset - segment.base_offset + record.HEADER_SIZE + 3
        segment.map[at] ^= 0x01

        assert store.look_message_by_id(damaged.offset_message_id) is None
        assert store.look_message_by_offset(damaged.physical_offset) is None
        assert store.query_by_unique_key("T", "D") is None
        assert sorted(m.unique_key for m in store.query_by_key("T", "k")) == ["A", "C"]
        assert store.look_message_by_id(put[0].offset_message_id).body == b"before"
        assert store.look_message_by_id(put[2].offset_message_id).body == b"after"
    finally:
        store.shutdown()


# ---- python -O: no check is an assert -------------------------------------------------

OPTIMIZED = r"""
import itertools, json, sys, tempfile
from ferrymq.client.errors import FerryError
from ferrymq.client.messages import decode_records
from ferrymq.codec import commitlog_record as record
from store.commitlog import CODEC, dispatch_request_at
from store.config import StoreConfig
from ferrymq.codec.properties import encode_properties
from store.message import Message
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
results["C dispatch_plan: bad magic"] = outcome(
    lambda: CODEC.dispatch_plan(bad["bad magic"], 0, len(good), 4, (), (), None)
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
        "C dispatch_plan: bad magic": refused,
        "Fetch answer: bad magic": "FerryError",  # the SDK's MALFORMED_ANSWER
        "keys indexed": 36,
        "iterate over zeros": refused,
    }


# ---- the Admin service with authentication on ----------------------------------------

ROOT_USER = ClientSecurity("root", "root-secret-key")
MALLORY = ClientSecurity("mallory", "mallory-secret-key")
AUTH_TOML = """
[cluster]
secret = "query-by-id-test-cluster-secret"
[security]
auth = true
clock_skew_s = 120
admin_access_key = "root"
admin_secret_key = "root-secret-key"
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One node with auth: ``mallory`` may publish and subscribe on ``mine*`` only;
    ``victim`` is somebody else's topic."""
    node = start_node(str(tmp_path_factory.mktemp("query-by-id") / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT_USER) as root:
            root.create_topic("mine", 1)
            root.create_topic("victim", 1)
            root.create_topic("mine-tx", 1, message_type="TRANSACTION")
            root.create_topic("mine-later", 1, message_type="DELAY")
            root.create_user("mallory", "mallory-secret-key")
            for action in ("PUBLISH", "SUBSCRIBE"):
                root.grant("mallory", AclRule("ALLOW", action, "TOPIC", "mine*"))
        yield node.address
    finally:
        node.sigterm()


def offset_of(admin: Admin, key: str) -> tuple[str, int]:
    """Host and physical offset of a message of ``mine`` found by key: what any user of a
    topic learns about where the log ends (offset ids show physical offsets)."""
    (found,) = admin.query_by_key("mine", key)
    return found.offset_message_id[:16], int(found.offset_message_id[16:], 16)


def write_offset_seen_by(admin: Admin, producer: Producer, probe: str) -> tuple[str, int]:
    """Where the next record goes, as a producer of ``mine`` finds it: two records of the
    same shape, the second's offset plus their size (the node is quiet otherwise)."""
    offsets = []
    for twin in "ab":
        producer.send(ClientMessage("mine", b"probe", keys=[f"{probe}-{twin}"]))
        host, offset = offset_of(admin, f"{probe}-{twin}")
        offsets.append(offset)
    return host, offsets[1] + (offsets[1] - offsets[0])


def test_query_by_id_of_a_forged_offset_does_not_read_another_topic(secured):
    """The review's attack end to end, with mallory's credentials and only what mallory
    can learn: its own offsets (QueryMessageByKey), then the forged id."""
    with (
        Admin(secured, security=MALLORY) as mallory,
        Producer(secured, security=MALLORY) as producer,
        Producer(secured, security=ROOT_USER) as victim,
    ):
        host, first_at = write_offset_seen_by(mallory, producer, "before")
        forged_at = first_at + record.HEADER_SIZE
        producer.send(
            ClientMessage("mine", forged_header(forged_at, b"mine") + b"x" * 16, keys=["first"])
        )
        assert offset_of(mallory, "first")[1] == first_at, "somebody else wrote meanwhile"
        for i in range(3):
            victim.send(ClientMessage("victim", secret(i)))
        _, closing_at = write_offset_seen_by(mallory, producer, "after")
        producer.send(
            ClientMessage("mine", closing_body(forged_at, closing_at, b"mine"), keys=["closing"])
        )
        assert offset_of(mallory, "closing")[1] == closing_at, "somebody else wrote meanwhile"

        forged_id = host + f"{forged_at:016X}"
        answer = mallory.query_by_id(forged_id, "mine")
        assert not any(b"VICTIM-SECRET" in m.body for m in answer), answer[0].body[:200]
        assert answer == []
        with Admin(secured, security=ROOT_USER) as root:
            assert root.query_by_id(forged_id) == []  # no record starts there, for anyone


def offset_id_in(address: str, system_topic: str, message_id: str) -> str:
    """The offset id of the record parked in ``system_topic`` for ``message_id``, as an
    admin finds it."""
    with Admin(address, security=ROOT_USER) as root:
        request = api.QueryMessageByKeyRequest(topic=system_topic, key=message_id)
        answer = root.connection.call(root.stub.QueryMessageByKey, request)
    assert answer.status.code == 0, answer.status
    (parked,) = answer.messages
    assert parked.topic == system_topic
    return parked.offset_message_id


def test_a_transaction_half_is_not_readable_by_id_until_committed(secured):
    with Admin(secured, security=MALLORY) as mallory, Producer(secured, security=MALLORY) as p:
        sent = p.send(ClientMessage("mine-tx", b"half-secret"))
        assert sent.transaction_id
        half_id = offset_id_in(secured, HALF_TOPIC, sent.message_id)

        assert mallory.query_by_id(half_id, "mine-tx") == []
        assert mallory.query_by_id(sent.message_id, "mine-tx") == []

        end = rpc.EndTransactionRequest(
            topic=pb.Resource(name="mine-tx"),
            message_id=sent.message_id,
            transaction_id=sent.transaction_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT,
        )
        connection = mallory.connection
        assert connection.call(connection.messaging.EndTransaction, end).status.code == pb.OK
        (committed,) = mallory.query_by_id(sent.message_id, "mine-tx")
        assert committed.topic == "mine-tx" and committed.body == b"half-secret"
        assert committed.offset_message_id != half_id
        assert mallory.query_by_id(committed.offset_message_id, "mine-tx") == [committed]
        assert mallory.query_by_id(half_id, "mine-tx") == []  # the half stays a system record
    with Admin(secured, security=ROOT_USER) as root:
        (half,) = root.query_by_id(half_id)  # admins, asking without a topic, see it
        assert half.topic == HALF_TOPIC


def test_a_delayed_message_is_not_readable_by_id_until_due(secured):
    with Admin(secured, security=MALLORY) as mallory, Producer(secured, security=MALLORY) as p:
        due_ms = time.time_ns() // 1_000_000 + 3_000
        sent = p.send(ClientMessage("mine-later", b"later-secret", delivery_time_ms=due_ms))
        parked_id = offset_id_in(secured, TIMER_TOPIC, sent.message_id)

        assert mallory.query_by_id(parked_id, "mine-later") == []
        released = until(
            lambda: mallory.query_by_id(sent.message_id, "mine-later"),
            timeout_s=30,
            what="the delayed message in its topic",
        )
        assert time.time_ns() // 1_000_000 >= due_ms
        (copy,) = released
        assert copy.topic == "mine-later" and copy.body == b"later-secret"
        assert copy.offset_message_id != parked_id
        assert mallory.query_by_id(parked_id, "mine-later") == []
