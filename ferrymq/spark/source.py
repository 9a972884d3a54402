"""The ``ferrymq`` data source: batch and streaming reads, batch and streaming writes.

Reads: every Spark partition is one queue's offset range (``reading.QueueRange``). A
streaming offset is canonical JSON ``{"topic": {"queueId": next offset}}`` (topics and
queue ids in sorted order, integers only), because Spark compares offsets as strings and
writes them to its checkpoint before a batch runs; a batch Spark runs again after a crash
therefore reads the same range. Queues a topic gains mid-query join at their earliest
offset. Driver-side objects keep only plain data: Spark pickles them to other processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from ferrymq.spark import topology
from ferrymq.spark.options import (
    EARLIEST,
    LATEST,
    ReadOptions,
    read_options,
    write_options,
)
from ferrymq.spark.reading import QueueRange, read_range
from ferrymq.spark.records import SCHEMA_DDL

try:  # Spark 4.2+: admission control and a real Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # 4.0 / 4.1: latestOffset() without arguments, one AvailableNow batch
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


Position = dict[str, dict[str, int]]  # the JSON form Spark stores: topic -> "queueId" -> offset


class QueuePartition(InputPartition):
    def __init__(self, queue_range: QueueRange) -> None:
        super().__init__(queue_range)
        self.queue_range = queue_range


class FerryDataSource(DataSource):
    """``spark.read.format("ferrymq")``: see ferrymq/spark/options.py for the options."""

    @classmethod
    def name(cls) -> str:
        return "ferrymq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from ferrymq.spark.sink import BatchWriter

        return BatchWriter(write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from ferrymq.spark.sink import StreamWriter

        return StreamWriter(write_options(self.options), schema)


def _range(
    options: ReadOptions, state: topology.QueueState, start: int, end: int, new_queue=False
) -> QueueRange:
    return QueueRange(
        endpoints=options.endpoints,
        group=options.group,
        topic=state.topic,
        queue_id=state.queue_id,
        start=start,
        end=end,
        address=state.address,
        broker_group=state.broker_group,
        fail_on_data_loss=options.fail_on_data_loss,
        retry_timeout_ms=options.retry_timeout_ms,
        fetch_messages=options.fetch_messages,
        new_queue=new_queue,
    )


def _states(options: ReadOptions) -> dict[str, list[topology.QueueState]]:
    states = {
        topic: topology.queue_states(options.endpoints, topic, options.retry_timeout_ms)
        for topic in options.topics
    }
    for topic, queues in states.items():
        groups = {s.broker_group for s in queues}
        if len(groups) > 1:
            # Offsets are keyed by queue id (Kafka's shape); two groups' queue 0 would clash.
            raise ValueError(
                f"topic {topic!r} spans broker groups {sorted(groups)}: the Spark source "
                "reads topics of one broker group for now (create it with --groups)"
            )
    return states


def _check_named_queues(options: ReadOptions, states) -> None:
    for offsets, name in ((options.starting, "startingOffsets"), (options.ending, "endingOffsets")):
        for topic, queues in offsets.specific.items():
            known = {s.queue_id for s in states[topic]}
            for queue_id in queues:
                if queue_id not in known:
                    raise ValueError(
                        f"option '{name}': topic {topic!r} has no queue {queue_id} "
                        f"(it has {len(known)} queues)"
                    )


def _resolve_start(options: ReadOptions, state: topology.QueueState) -> int:
    """A starting offset for one queue, checked against what the queue retains."""
    wanted = options.starting.for_queue(state.topic, state.queue_id)
    if wanted == EARLIEST:
        return state.min_offset
    if wanted == LATEST:
        return state.max_offset
    where = f"{state.topic}/{state.queue_id}"
    if wanted < state.min_offset:
        if options.fail_on_data_loss:
            raise ValueError(
                f"option 'startingOffsets': offset {wanted} of {where} is below the retained "
                f"minimum {state.min_offset} (the queue holds [{state.min_offset}, "
                f"{state.max_offset})); start at or after it, or set failOnDataLoss=false"
            )
        return state.min_offset
    if wanted > state.max_offset:
        raise ValueError(
            f"option 'startingOffsets': offset {wanted} of {where} is past the end of the "
            f"queue ({state.max_offset})"
        )
    return wanted


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._partitions: list[QueuePartition] | None = None

    def partitions(self) -> list[InputPartition]:
        if self._partitions is None:
            self._partitions = self._plan()
        return list(self._partitions)

    def _plan(self) -> list[QueuePartition]:
        options = self.options
        topology.ensure_group(options.endpoints, options.group, options.retry_timeout_ms)
        states = _states(options)
        _check_named_queues(options, states)
        planned = []
        for topic in options.topics:
            for state in states[topic]:
                start = _resolve_start(options, state)
                end = options.ending.for_queue(topic, state.queue_id)
                if end == LATEST:
                    end = state.max_offset
                elif end > state.max_offset:
                    raise ValueError(
                        f"option 'endingOffsets': offset {end} of {topic}/{state.queue_id} is "
                        f"past the end of the queue ({state.max_offset})"
                    )
                if end < start:
                    raise ValueError(
                        f"{topic}/{state.queue_id}: endingOffsets {end} is before "
                        f"startingOffsets {start}"
                    )
                if end > start:
                    planned.append(QueuePartition(_range(options, state, start, end)))
        return planned

    def read(self, partition: InputPartition) -> Iterator:
        queue_range = getattr(partition, "queue_range", None)
        if queue_range is None:  # Spark turns an empty plan into one empty partition
            return iter(())
        return read_range(queue_range)


def canonical(position: dict) -> Position:
    """Sorted topics, queue ids sorted as numbers, int offsets: one spelling per position."""
    return {
        topic: {str(q): int(position[topic][q]) for q in sorted(position[topic], key=int)}
        for topic in sorted(position)
    }


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side of a streaming read. Spark keeps one instance per query run (the same
    process answers ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit``);
    ``read`` runs on a pickled copy, so partitions carry everything it needs."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._initial: Position | None = None
        self._available_now: Position | None = None
        self._group_ready = False

    # ---- positions -----------------------------------------------------------------
    def _ensure_group(self) -> None:
        if not self._group_ready:
            options = self.options
            topology.ensure_group(options.endpoints, options.group, options.retry_timeout_ms)
            self._group_ready = True

    def _latest(self) -> tuple[Position, dict[tuple[str, int], topology.QueueState]]:
        self._ensure_group()
        states = _states(self.options)
        by_queue = {(s.topic, s.queue_id): s for topic in states for s in states[topic]}
        latest = {t: {str(s.queue_id): s.max_offset for s in states[t]} for t in states}
        return canonical(latest), by_queue

    def initialOffset(self) -> dict:
        # Spark may call this twice for a new query: the first answer is kept, so "latest"
        # cannot move between the two.
        if self._initial is None:
            self._ensure_group()
            options = self.options
            states = _states(options)
            _check_named_queues(options, states)
            self._initial = canonical(
                {
                    topic: {str(s.queue_id): _resolve_start(options, s) for s in states[topic]}
                    for topic in states
                }
            )
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()[0]

    def getDefaultReadLimit(self):
        if ReadMaxRows is not None and self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        latest, _ = self._latest()
        if self._available_now is not None:
            latest = _capped(latest, self._available_now)
        if start is None:  # Spark 4.0 / 4.1: no admission control
            return latest
        start = canonical(start)
        # Offsets never go backwards, even if a queue was truncated (failover).
        latest = canonical(
            {
                t: {q: max(o, start.get(t, {}).get(q, 0)) for q, o in queues.items()}
                for t, queues in latest.items()
            }
        )
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is None:
            return latest
        return _admit(start, latest, max_rows)

    def reportLatestOffset(self):
        return None

    # ---- planning and reading ------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start, end = canonical(start), canonical(end)
        _, states = self._latest()
        planned = []
        for topic, queues in end.items():
            for queue, end_offset in queues.items():
                known = start.get(topic, {})
                new_queue = queue not in known
                start_offset = known.get(queue, 0)
                if end_offset <= start_offset:
                    continue
                state = states.get((topic, int(queue)))
                if state is None:  # gone from routing: the read will ask again
                    state = topology.QueueState(
                        topic, int(queue), self.options.endpoints[0], "", 0, 0
                    )
                planned.append(
                    QueuePartition(_range(self.options, state, start_offset, end_offset, new_queue))
                )
        return planned

    def read(self, partition: InputPartition) -> Iterator:
        return read_range(partition.queue_range)

    def commit(self, end: dict) -> None:
        """Nothing to release: positions live in Spark's checkpoint, never in the node."""

    def stop(self) -> None:
        pass


def _capped(latest: Position, cap: Position) -> Position:
    """``latest`` no further than ``cap`` (queues unknown to ``cap`` keep their start)."""
    return canonical(
        {
            t: {q: min(o, cap.get(t, {}).get(q, o)) for q, o in queues.items()}
            for t, queues in latest.items()
        }
    )


def _admit(start: Position, latest: Position, max_rows: int) -> Position:
    """At most ``max_rows`` new offsets in total, shared in proportion to each queue's
    backlog (floors first, then one more each in queue order until the limit), as Kafka's
    ``maxOffsetsPerTrigger``. Deterministic for a given (start, latest)."""
    backlog = {
        (t, q): o - start.get(t, {}).get(q, 0)
        for t, queues in latest.items()
        for q, o in queues.items()
    }
    total = sum(b for b in backlog.values() if b > 0)
    if total <= max_rows:
        return latest
    share = {k: (b * max_rows) // total if b > 0 else 0 for k, b in backlog.items()}
    spare = max_rows - sum(share.values())
    for key in sorted(backlog, key=lambda k: (k[0], int(k[1]))):
        if spare == 0:
            break
        if backlog[key] > share[key]:
            share[key] += 1
            spare -= 1
    return canonical(
        {
            t: {
                q: start.get(t, {}).get(q, 0) + max(share[(t, q)], 0) if backlog[(t, q)] > 0 else o
                for q, o in queues.items()
            }
            for t, queues in latest.items()
        }
    )
