"""The data source's options, parsed and checked once on the driver.

Offsets follow Kafka's source: JSON ``{"topic": {"queueId": offset}}`` with the queue id as
a string key, ``-2`` for earliest and ``-1`` for latest; a stored offset is always the
*next* one to read (an exclusive end). Every mistake is reported as a ``ValueError`` that
names the option and what to write instead, before any job runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1
DEFAULT_GROUP = "ferrymq-spark"
DEFAULT_RETRY_TIMEOUT_MS = 60_000
DEFAULT_FETCH_MESSAGES = 4096

# topic -> queue id -> offset (or EARLIEST / LATEST)
OffsetSpec = dict[str, dict[int, int]]


@dataclass(frozen=True)
class Offsets:
    """A starting or ending position: a default for every queue, overridden per queue."""

    default: int  # EARLIEST or LATEST
    specific: OffsetSpec

    def for_queue(self, topic: str, queue_id: int) -> int:
        return self.specific.get(topic, {}).get(queue_id, self.default)


@dataclass(frozen=True)
class ReadOptions:
    endpoints: tuple[str, ...]
    topics: tuple[str, ...]
    starting: Offsets
    ending: Offsets  # batch only
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    group: str
    retry_timeout_ms: int
    fetch_messages: int


@dataclass(frozen=True)
class WriteOptions:
    endpoints: tuple[str, ...]
    topic: str | None  # overrides the ``topic`` column
    sink_id: str | None  # streaming: defaults to the query id (stable across restarts)
    batch_id: int | None  # a batch write made idempotent (foreachBatch)
    retry_timeout_ms: int
    chunk_messages: int


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands a case-insensitive mapping; plain dicts (tests, jobs) are matched the same.
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def _endpoints(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = _get(options, "endpoints")
    if not raw or not raw.strip():
        raise ValueError(
            "option 'endpoints' is required: one or more node addresses, "
            "e.g. .option('endpoints', '127.0.0.1:8081')"
        )
    endpoints = tuple(e.strip() for e in raw.split(",") if e.strip())
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"option 'endpoints': {endpoint!r} is not host:port")
    return endpoints


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option '{name}' must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"option '{name}' must be a positive integer, not {raw!r}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError(f"option '{name}' must be true or false, not {raw!r}")


def parse_offsets(
    name: str, raw: str | None, default: int, topics: tuple[str, ...], *, allow: tuple[int, ...]
) -> Offsets:
    """``earliest``, ``latest`` or the JSON form; ``allow`` lists the special values this
    option accepts (``endingOffsets`` cannot be earliest, a batch cannot start at latest)."""
    words = {"earliest": EARLIEST, "latest": LATEST}
    if raw is None or not raw.strip():
        return Offsets(default, {})
    text = raw.strip()
    if text.lower() in words:
        value = words[text.lower()]
        if value not in allow:
            raise ValueError(f"option '{name}' cannot be {text!r} here")
        return Offsets(value, {})
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"option '{name}' is neither 'earliest', 'latest' nor valid JSON ({error.msg} at "
            f'character {error.pos}); expected e.g. {{"orders": {{"0": 12, "1": -2}}}}'
        ) from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError(
            f"option '{name}' must map topic names to {{queueId: offset}} objects, "
            f'e.g. {{"orders": {{"0": 12, "1": -2}}}}; got {text}'
        )
    specific: OffsetSpec = {}
    for topic, queues in parsed.items():
        if topic not in topics:
            raise ValueError(
                f"option '{name}' names topic {topic!r}, which is not in 'subscribe' {topics}"
            )
        specific[topic] = {}
        for queue, offset in queues.items():
            if not (isinstance(queue, str) and queue.isdigit()):
                raise ValueError(
                    f"option '{name}': queue id {queue!r} of {topic!r} is not a number"
                )
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(
                    f"option '{name}': offset {offset!r} of {topic}/{queue} is not an integer"
                )
            if offset < 0 and offset not in allow:
                raise ValueError(
                    f"option '{name}': offset {offset} of {topic}/{queue} is not allowed "
                    f"(use a queue offset >= 0{''.join(_special(a) for a in allow)})"
                )
            specific[topic][int(queue)] = offset
    return Offsets(default, specific)


def _special(value: int) -> str:
    return ", -2 for earliest" if value == EARLIEST else ", -1 for latest"


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    endpoints = _endpoints(options)
    raw_topics = _get(options, "subscribe")
    topics = tuple(sorted({t.strip() for t in (raw_topics or "").split(",") if t.strip()}))
    if not topics:
        raise ValueError("option 'subscribe' is required: a comma-separated list of topics")
    for option in ("subscribePattern", "assign"):
        if _get(options, option) is not None:
            raise ValueError(f"option '{option}' is not supported; use 'subscribe'")
    if streaming:
        starting = parse_offsets(
            "startingOffsets",
            _get(options, "startingOffsets"),
            LATEST,
            topics,
            allow=(EARLIEST, LATEST),
        )
        if _get(options, "endingOffsets") is not None:
            raise ValueError("option 'endingOffsets' is for batch reads only")
        ending = Offsets(LATEST, {})
    else:
        starting = parse_offsets(
            "startingOffsets",
            _get(options, "startingOffsets"),
            EARLIEST,
            topics,
            allow=(EARLIEST,),
        )
        ending = parse_offsets(
            "endingOffsets", _get(options, "endingOffsets"), LATEST, topics, allow=(LATEST,)
        )
    max_per_trigger = _positive_int(options, "maxOffsetsPerTrigger", None)
    if max_per_trigger is not None and not streaming:
        raise ValueError("option 'maxOffsetsPerTrigger' is for streaming reads only")
    return ReadOptions(
        endpoints=endpoints,
        topics=topics,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        group=_get(options, "group") or DEFAULT_GROUP,
        retry_timeout_ms=_positive_int(options, "retryTimeoutMs", DEFAULT_RETRY_TIMEOUT_MS),
        fetch_messages=min(
            _positive_int(options, "fetchMessages", DEFAULT_FETCH_MESSAGES), DEFAULT_FETCH_MESSAGES
        ),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    batch_id = _get(options, "batchId")
    if batch_id is not None and not batch_id.strip().isdigit():
        raise ValueError(f"option 'batchId' must be an integer >= 0, not {batch_id!r}")
    sink_id = _get(options, "sinkId")
    if batch_id is not None and not sink_id:
        raise ValueError("option 'batchId' needs 'sinkId' (what makes the write idempotent)")
    return WriteOptions(
        endpoints=_endpoints(options),
        topic=(_get(options, "topic") or "").strip() or None,
        sink_id=sink_id,
        batch_id=int(batch_id) if batch_id is not None else None,
        retry_timeout_ms=_positive_int(options, "retryTimeoutMs", DEFAULT_RETRY_TIMEOUT_MS),
        chunk_messages=_positive_int(options, "chunkMessages", 1024),
    )
