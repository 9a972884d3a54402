"""Property test: random puts (single and batch), gets (any offset, tag filters), key,
unique-key, offset-id and time queries, clean and abrupt restarts, and retention (by age
with an injected clock, and by an injected disk high-water mark) against a simple
in-memory model of what the store must return.

The model is a list of every message sent, with the queue and physical offsets and the
store time the store assigned. Retention removes a prefix of the log: the model predicts
how many segments go (age: a segment goes when the first record of the next one is older
than retention; high water: all but the active one, up to the per-run limit), and every
message below the new CommitLog minimum is then gone from every read path.

Deterministic: derandomized, fixed clocks, no background retention (the housekeeping
interval is out of reach) and an injected disk-usage callable."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from store import index_service
from store.config import StoreConfig
from store.hashing import tag_hash_code
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus
from tests.support.stores import assert_derived_files_agree

TOPICS = ["alpha", "beta"]
QUEUE_IDS = [0, 1, 2]
TAGS = [None, "Aa", "BB", "TagC", "标签"]  # "Aa" and "BB" share Java's hash code (2112)
KEYS = ["Aa", "BB", "k1", "shared"]  # "Aa"/"BB" collide in Java; one index slot each 3
TAG_FILTERS = [None, [], ["Aa"], ["BB"], ["BB", "TagC"], ["标签"]]
HOUR_MS = 3600 * 1000
T0 = 1_700_000_000_000
SEGMENT = 40 * 1024
CONFIG = dict(
    commitlog_segment_bytes=SEGMENT,
    max_message_body_bytes=2048,
    consume_queue_entries_per_file=8,
    index_slot_count=3,  # every chain is shared by many keys
    index_entry_count=16,  # index files roll often
    retention_ms=HOUR_MS,
    max_segments_deleted_per_run=3,
    # Retention only when a rule asks: the background housekeeping never comes due.
    retention_check_interval_ms=10**12,
    derived_flush_interval_ms=10**9,
)
LOW_DISK = (1000, 100, 900)


@dataclass
class Sent:
    topic: str
    queue_id: int
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    unique_key: str
    queue_offset: int
    physical_offset: int
    size: int
    store_ms: int
    message_id: str


message_strategy = st.tuples(
    st.sampled_from(TOPICS),
    st.sampled_from(QUEUE_IDS),
    st.binary(min_size=0, max_size=1800),
    st.sampled_from(TAGS),
    st.lists(st.sampled_from(KEYS), max_size=3),  # a key may repeat within a message
    st.sampled_from([0, 1, 999, 1000, 60_000]),  # clock advance before the put
)


def java_index_hash(key: bytes) -> int:
    """Java's String.hashCode as the index hash: "alpha#Aa" and "alpha#BB" then share
    their 4-byte hash, so only the record check keeps their queries apart."""
    return tag_hash_code(key.decode()) & 0xFFFFFFFF


class StoreModel(RuleBasedStateMachine):
    @initialize(java_hash=st.booleans())
    def open_store(self, java_hash):
        if java_hash:
            self.real_index_hash = index_service.index_key_hash
            index_service.index_key_hash = java_index_hash
        self.directory = tempfile.mkdtemp(prefix="ferrymq-model-")
        self.now_ms = T0
        self.config = StoreConfig(self.directory, **CONFIG)
        self.sent: list[Sent] = []
        self.sequence = 0
        self.floor = 0  # the model's CommitLog minimum
        self.max_seen: dict[tuple[str, int], int] = {}
        self.store = self._open()
        assert self.store.commitlog.min_offset == 0

    def _open(self) -> MessageStore:
        store = MessageStore.open(self.config, clock_ms=lambda: self.now_ms)
        store.disk_usage = lambda path: LOW_DISK
        return store

    def teardown(self):
        store = getattr(self, "store", None)
        if store is not None and store.is_open:
            store.shutdown()
        shutil.rmtree(getattr(self, "directory", ""), ignore_errors=True)
        if hasattr(self, "real_index_hash"):
            index_service.index_key_hash = self.real_index_hash

    # ---- the model ---------------------------------------------------------------
    def live(self) -> list[Sent]:
        return [s for s in self.sent if s.physical_offset >= self.floor]

    def queue(self, topic: str, queue_id: int) -> list[Sent]:
        return [s for s in self.sent if s.topic == topic and s.queue_id == queue_id]

    def queue_min(self, topic: str, queue_id: int) -> int:
        queue = self.queue(topic, queue_id)
        live = [s for s in queue if s.physical_offset >= self.floor]
        return live[0].queue_offset if live else len(queue)

    def write_offset(self) -> int:
        return self.sent[-1].physical_offset + self.sent[-1].size if self.sent else 0

    def expected_deletions(self, over_high_water: bool) -> int:
        """How many segments delete_expired must remove, from the model alone."""
        first, last = self.floor // SEGMENT, self.write_offset() // SEGMENT
        segments = last - first + 1  # the active segment is the one holding the end
        limit = min(self.config.max_segments_deleted_per_run, segments - 1)
        if over_high_water:
            return max(limit, 0)
        count = 0
        while count < limit:
            following = (first + count + 1) * SEGMENT
            head = next((s for s in self.sent if s.physical_offset >= following), None)
            if head is None or self.now_ms - head.store_ms <= self.config.retention_ms:
                break
            count += 1
        return count

    def _put(self, specs) -> None:
        messages = []
        for topic, queue_id, body, tags, keys, _advance in specs:
            self.sequence += 1
            messages.append(
                Message.build(
                    topic,
                    body,
                    queue_id=queue_id,
                    tags=tags,
                    keys=keys,
                    unique_key=f"U{self.sequence}",
                )
            )
        self.now_ms += specs[0][5]
        result = self.store.put_messages(messages)
        assert result.ok, result
        for (topic, queue_id, body, tags, keys, _), message, appended in zip(
            specs, messages, result.appended, strict=True
        ):
            expected_offset = len(self.queue(topic, queue_id))
            assert appended.queue_offset == expected_offset
            assert appended.physical_offset == self.write_offset() or (
                # rolled to the next segment behind a blank
                appended.physical_offset % SEGMENT == 0
                and appended.physical_offset // SEGMENT == self.write_offset() // SEGMENT + 1
            )
            self.sent.append(
                Sent(
                    topic,
                    queue_id,
                    body,
                    tags,
                    tuple(keys),
                    message.properties["UNIQ_KEY"],
                    appended.queue_offset,
                    appended.physical_offset,
                    appended.size,
                    self.now_ms,
                    appended.offset_message_id,
                )
            )
        # A batch is written whole in one segment.
        first, last = self.sent[-len(specs)], self.sent[-1]
        assert first.physical_offset // SEGMENT == (last.physical_offset + last.size - 1) // SEGMENT

    # ---- rules: writing ------------------------------------------------------------
    @rule(spec=message_strategy)
    def put_one(self, spec):
        self._put([spec])

    @rule(specs=st.lists(message_strategy, min_size=2, max_size=12))
    def put_batch(self, specs):
        self._put(specs)

    @rule(
        batches=st.integers(1, 3),
        topic=st.sampled_from(TOPICS),
        queue_id=st.sampled_from(QUEUE_IDS),
        advance=st.sampled_from([0, 600_000]),
    )
    def put_bulk(self, batches, topic, queue_id, advance):
        """Large batches, so segments roll and retention has something to delete."""
        for i in range(batches):
            self._put(
                [(topic, queue_id, bytes([i]) * 1800, "TagC", ["k1"], advance)]
                + [(topic, queue_id, bytes([i]) * 1800, "TagC", ["k1"], 0)] * 9
            )

    # ---- rules: reading ------------------------------------------------------------
    @rule(
        topic=st.sampled_from(TOPICS),
        queue_id=st.sampled_from(QUEUE_IDS),
        start=st.integers(-2, 90),
        count=st.integers(1, 10),
        tags=st.sampled_from(TAG_FILTERS),
    )
    def get(self, topic, queue_id, start, count, tags):
        queue = self.queue(topic, queue_id)
        result = self.store.get_messages(topic, queue_id, start, count, tags)
        if not queue:
            assert result.status is GetStatus.NO_MESSAGE_IN_QUEUE
            assert result.messages == []
            return
        low, high = self.queue_min(topic, queue_id), len(queue)
        assert (result.min_offset, result.max_offset) == (low, high)
        if start < low:
            assert result.status is GetStatus.OFFSET_TOO_SMALL
            assert result.next_begin_offset == low and result.messages == []
            return
        if start >= high:
            expected = (
                GetStatus.OFFSET_OVERFLOW_ONE if start == high else GetStatus.OFFSET_OVERFLOW_BADLY
            )
            assert result.status is expected and result.messages == []
            assert result.next_begin_offset == min(start, high)
            return
        wanted: list[Sent] = []
        next_offset = start
        for s in queue[start : start + count * 16]:  # the store scans a bounded window
            next_offset = s.queue_offset + 1
            if tags is None or s.tags in tags:
                wanted.append(s)
                if len(wanted) == count:
                    break
        assert [m.physical_offset for m in result.messages] == [s.physical_offset for s in wanted]
        for got, expected in zip(result.messages, wanted, strict=True):
            self._same(got, expected)
        assert result.next_begin_offset == next_offset
        assert result.status is (GetStatus.FOUND if wanted else GetStatus.NO_MATCHED_MESSAGE)

    @staticmethod
    def _same(got, expected: Sent) -> None:
        assert (got.topic, got.queue_id, got.queue_offset) == (
            expected.topic,
            expected.queue_id,
            expected.queue_offset,
        )
        assert got.body == expected.body
        assert got.tags == expected.tags
        assert got.keys == list(expected.keys)
        assert got.unique_key == expected.unique_key
        assert got.store_timestamp_ms == expected.store_ms
        assert got.offset_message_id == expected.message_id

    @rule(
        topic=st.sampled_from(TOPICS),
        key=st.sampled_from([*KEYS, "aA", "missing"]),
        data=st.data(),
    )
    def query_key_in_time_range(self, topic, key, data):
        times = sorted({s.store_ms for s in self.sent}) or [T0]
        begin = data.draw(st.sampled_from(times)) + data.draw(st.sampled_from([-1, 0, 1]))
        end = begin + data.draw(st.sampled_from([0, 999, 1000, 60_000, 1 << 40]))
        expected = [
            s.physical_offset
            for s in reversed(self.live())
            if s.topic == topic and key in s.keys and begin <= s.store_ms <= end
        ]
        found = self.store.query_by_key(topic, key, 10_000, begin, end)
        assert [m.physical_offset for m in found] == expected  # newest first

    @rule(data=st.data(), wrong_topic=st.booleans())
    def query_unique_key_and_offset_id(self, data, wrong_topic):
        if not self.sent:
            return
        chosen = data.draw(st.sampled_from(self.sent))
        alive = chosen.physical_offset >= self.floor
        topic = chosen.topic
        if wrong_topic:
            topic = next(t for t in TOPICS if t != chosen.topic)
            alive = False
        found = self.store.query_by_unique_key(topic, chosen.unique_key)
        assert (found is not None) == alive
        if found is not None:
            self._same(found, chosen)
        by_id = self.store.look_message_by_id(chosen.message_id)
        if chosen.physical_offset >= self.floor:
            self._same(by_id, chosen)
        else:
            assert by_id is None
            assert self.store.look_message_by_offset(chosen.physical_offset) is None

    @rule(topic=st.sampled_from(TOPICS), queue_id=st.sampled_from(QUEUE_IDS), data=st.data())
    def offset_by_time(self, topic, queue_id, data):
        times = sorted({s.store_ms for s in self.sent}) or [T0]
        probe = data.draw(st.sampled_from([0, *times, 1 << 50])) + data.draw(
            st.sampled_from([-1, 0, 1])
        )
        queue = self.queue(topic, queue_id)
        live = [s for s in queue if s.physical_offset >= self.floor]
        expected = next((s.queue_offset for s in live if s.store_ms >= probe), len(queue))
        assert self.store.offset_by_time(topic, queue_id, probe) == expected

    # ---- rules: lifecycle and retention --------------------------------------------
    @rule()
    def restart_clean(self):
        self.store.shutdown()
        self.store = self._open()
        report = self.store.recovery_report
        assert report.clean_shutdown and report.corruption is None
        assert report.end_offset == max(self.write_offset(), self.floor)

    @rule()
    def restart_abrupt(self):
        self.store.close_abruptly_for_tests()
        self.store = self._open()
        report = self.store.recovery_report
        assert not report.clean_shutdown and report.corruption is None
        assert report.end_offset == max(self.write_offset(), self.floor)

    @rule(hours=st.sampled_from([0, 1, 2, 5]))
    def retention_by_age(self, hours):
        self.now_ms += hours * HOUR_MS
        expected = self.expected_deletions(over_high_water=False)
        assert self.store.delete_expired() == expected
        self.floor += expected * SEGMENT
        event(f"age retention deleted {min(expected, 1)}+ segments")

    @rule(used=st.sampled_from([500, 850, 851, 990]))
    def retention_by_disk_high_water(self, used):
        self.store.disk_usage = lambda path: (1000, used, 1000 - used)
        expected = self.expected_deletions(over_high_water=used > 850)
        try:
            assert self.store.delete_expired() == expected
        finally:
            self.store.disk_usage = lambda path: LOW_DISK
        self.floor += expected * SEGMENT
        event(f"high-water retention deleted {min(expected, 1)}+ segments")

    # ---- invariants ----------------------------------------------------------------
    @invariant()
    def log_and_queues_match_the_model(self):
        if not hasattr(self, "store"):
            return
        store = self.store
        assert store.commitlog.min_offset == self.floor
        assert store.commitlog.write_offset == max(self.write_offset(), self.floor)
        for topic in TOPICS:
            for queue_id in QUEUE_IDS:
                key = (topic, queue_id)
                queue = self.queue(topic, queue_id)
                high = store.max_offset_in_queue(topic, queue_id)
                assert high == len(queue)
                assert high >= self.max_seen.get(key, 0)  # never moves backwards
                self.max_seen[key] = high
                low = store.min_offset_in_queue(topic, queue_id)
                assert low == self.queue_min(topic, queue_id)
                if not queue:
                    continue
                # Every live message of the queue, read back in one get.
                result = store.get_messages(topic, queue_id, low, 10_000)
                live = queue[low:]
                assert len(result.messages) == len(live)
                for got, expected in zip(result.messages, live, strict=True):
                    self._same(got, expected)
                # Colliding tags ("Aa"/"BB" share a hash code) never leak into a filter.
                for tags in (["Aa"], ["BB"], ["标签"]):
                    result = store.get_messages(topic, queue_id, low, 10_000, tags)
                    expected_offsets = [s.queue_offset for s in live if s.tags in tags]
                    assert [m.queue_offset for m in result.messages] == expected_offsets

    @invariant()
    def key_queries_match_the_model(self):
        if not hasattr(self, "store"):
            return
        live = list(reversed(self.live()))
        for topic in TOPICS:
            for key in KEYS:
                expected = [s.unique_key for s in live if s.topic == topic and key in s.keys]
                found = self.store.query_by_key(topic, key, max_count=10_000)
                assert [m.unique_key for m in found] == expected, (
                    topic,
                    key,
                    [m.unique_key for m in found],
                    expected,
                )

    @invariant()
    def derived_files_agree(self):
        if hasattr(self, "store"):
            assert_derived_files_agree(self.store)


StoreModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_store_behaves_like_the_model = StoreModel.TestCase
