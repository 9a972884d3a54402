"""Property test: random puts, gets, key queries, restarts (clean and abrupt) and retention
against a simple in-memory model of what the store must return."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import GetStatus
from tests.store_checks import assert_derived_files_agree

TOPICS = ["alpha", "beta"]
TAGS = [None, "Aa", "BB", "TagC"]  # "Aa" and "BB" share Java's hash code
KEYS = ["Aa", "BB", "k1", "k2"]
HOUR_MS = 3600 * 1000
CONFIG = dict(
    commitlog_segment_bytes=40 * 1024,
    max_message_body_bytes=2048,
    consume_queue_entries_per_file=8,
    index_slot_count=3,
    index_entry_count=16,
    retention_ms=HOUR_MS,
)


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


message_strategy = st.tuples(
    st.sampled_from(TOPICS),
    st.integers(0, 1),
    st.binary(min_size=0, max_size=1800),
    st.sampled_from(TAGS),
    st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
)


class StoreModel(RuleBasedStateMachine):
    @initialize()
    def open_store(self):
        self.directory = tempfile.mkdtemp(prefix="ferrymq-model-")
        self.now_ms = 1_700_000_000_000
        self.config = StoreConfig(self.directory, **CONFIG)
        self.store = MessageStore.open(self.config, clock_ms=lambda: self.now_ms)
        self.sent: list[Sent] = []
        self.sequence = 0
        self.max_offsets: dict[tuple[str, int], int] = {}

    def teardown(self):
        store = getattr(self, "store", None)
        if store is not None and store.is_open:
            store.shutdown()
        shutil.rmtree(getattr(self, "directory", ""), ignore_errors=True)

    # ---- the model ---------------------------------------------------------------
    def live(self) -> list[Sent]:
        floor = self.store.commitlog.min_offset
        return [s for s in self.sent if s.physical_offset >= floor]

    def _put(self, specs) -> None:
        messages = []
        for topic, queue_id, body, tags, keys in specs:
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
        result = self.store.put_messages(messages)
        assert result.ok, result
        for (topic, queue_id, body, tags, keys), message, appended in zip(
            specs, messages, result.appended, strict=True
        ):
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
                )
            )
        self.now_ms += 1_000

    # ---- rules ---------------------------------------------------------------------
    @rule(spec=message_strategy)
    def put_one(self, spec):
        self._put([spec])

    @rule(specs=st.lists(message_strategy, min_size=2, max_size=12))
    def put_batch(self, specs):
        self._put(specs)

    @rule(batches=st.integers(1, 3), queue_id=st.integers(0, 1))
    def put_bulk(self, batches, queue_id):
        """Large batches, so segments roll and retention has something to delete."""
        for i in range(batches):
            self._put([("alpha", queue_id, bytes([i]) * 1800, "TagC", ["k1"]) for _ in range(10)])

    @rule(
        topic=st.sampled_from(TOPICS),
        queue_id=st.integers(0, 1),
        start=st.integers(-2, 80),
        count=st.integers(1, 10),
        tags=st.sampled_from([None, ["Aa"], ["BB", "TagC"]]),
    )
    def get(self, topic, queue_id, start, count, tags):
        queue = [s for s in self.sent if s.topic == topic and s.queue_id == queue_id]
        low = self.store.min_offset_in_queue(topic, queue_id)
        result = self.store.get_messages(topic, queue_id, start, count, tags)
        if not queue:
            assert result.status is GetStatus.NO_MESSAGE_IN_QUEUE
            return
        high = len(queue)
        if start < low:
            assert result.status is GetStatus.OFFSET_TOO_SMALL
            return
        if start >= high:
            expected = (
                GetStatus.OFFSET_OVERFLOW_ONE if start == high else GetStatus.OFFSET_OVERFLOW_BADLY
            )
            assert result.status is expected
            return
        window = queue[start : start + count * 16]
        wanted = [s for s in window if tags is None or s.tags in tags][:count]
        got = [(m.queue_offset, m.body, m.tags) for m in result.messages]
        assert got == [(s.queue_offset, s.body, s.tags) for s in wanted]

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from([*KEYS, "missing"]))
    def query_key(self, topic, key):
        expected = sorted(s.unique_key for s in self.live() if s.topic == topic and key in s.keys)
        found = self.store.query_by_key(topic, key, max_count=10_000)
        assert sorted(m.unique_key for m in found) == expected
        assert all(key in m.keys and m.topic == topic for m in found)

    @rule(data=st.data())
    def query_unique_and_offset_id(self, data):
        if not self.sent:
            return
        chosen = data.draw(st.sampled_from(self.sent))
        found = self.store.query_by_unique_key(chosen.topic, chosen.unique_key)
        alive = chosen.physical_offset >= self.store.commitlog.min_offset
        assert (found is not None) == alive
        if alive:
            assert found.body == chosen.body
            by_id = self.store.look_message_by_id(found.offset_message_id)
            assert by_id is not None and by_id.unique_key == chosen.unique_key

    @rule()
    def restart_clean(self):
        self.store.shutdown()
        self.store = MessageStore.open(self.config, clock_ms=lambda: self.now_ms)
        assert self.store.recovery_report.corruption is None

    @rule()
    def restart_abrupt(self):
        self.store.close_abruptly_for_tests()
        self.store = MessageStore.open(self.config, clock_ms=lambda: self.now_ms)
        assert not self.store.recovery_report.clean_shutdown
        assert self.store.recovery_report.corruption is None

    @rule(hours=st.integers(0, 3))
    def retention(self, hours):
        self.now_ms += hours * HOUR_MS
        deleted = self.store.delete_expired()
        event(f"retention deleted {'some' if deleted else 'no'} segments")

    # ---- invariants ----------------------------------------------------------------
    @invariant()
    def queues_match_the_model(self):
        if not hasattr(self, "store"):
            return
        for topic in TOPICS:
            for queue_id in (0, 1):
                key = (topic, queue_id)
                count = sum(1 for s in self.sent if (s.topic, s.queue_id) == key)
                high = self.store.max_offset_in_queue(topic, queue_id)
                assert high == count
                assert high >= self.max_offsets.get(key, 0)  # never moves backwards
                self.max_offsets[key] = high
                low = self.store.min_offset_in_queue(topic, queue_id)
                live = [s for s in self.live() if (s.topic, s.queue_id) == key]
                assert low == (live[0].queue_offset if live else count)

    @invariant()
    def derived_files_agree(self):
        if hasattr(self, "store"):
            assert_derived_files_agree(self.store)


StoreModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_store_behaves_like_the_model = StoreModel.TestCase
