"""How the cost grows with the work: throughput as the number of topics grows, and the
consume rate of a large backlog read hot and cold (ferrymq, Apache RocketMQ, Kafka).

**Topics.** The topics are created in levels (1, then up to 100, 1,000, 10,000), each
system with its own admin API from this process (ferrymq's Admin; Kafka's AdminClient,
``CREATE_BATCH`` topics a request; Apache RocketMQ's broker, ``CREATE_BATCH`` topic
configs per UPDATE_AND_CREATE_TOPIC_LIST request): one queue (partition) each, replicated
as the system's other topics are. At each level a producer sends ``count`` 1 KiB messages
spread round-robin over every topic created so far, ``IN_FLIGHT`` outstanding, after one
untimed message per topic (routes, metadata and connections are warm): msgs/s. Each
producer has its client's ordinary settings: Kafka's its own defaults (acks=all,
idempotence, 5 requests in flight per broker, linger 5 ms: ``kafka_kraft.ORDINARY_PRODUCER``),
not the one-message-at-a-time latency producer of the sequential workloads. librdkafka puts
one partition in each produce request, so over many topics its requests carry few messages.

**Backlog.** One topic (8 queues) filled with 1 and 4 GiB of 1 KiB messages (batched,
the fill rate recorded too); read from the beginning by a fresh consumer while it is all
in the page cache (hot: just written); then the nodes are stopped, their data files
evicted (``pagecache.evict``), the nodes started again and another fresh consumer reads
it all (cold). How much of the nodes' files was resident when the cold read began (what
their start read back in) is reported with it, as a fraction and in MB. Each system is
written and read with its fastest client here (``growth_client``, the topics part too):
Apache RocketMQ over its remoting protocol straight to the master broker
(``bench.peers.remoting``), since its official Python client moves ~1,000 messages a
second, which would measure the client, and gigabytes would take hours.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from bench.peers import pagecache
from bench.peers.workloads import BODY_BYTES, log

TOPIC_COUNTS = {"full": (1, 100, 1000, 10_000), "quick": (1, 100, 1000), "smoke": (1, 10)}
SPREAD_MESSAGES = {"full": 40_000, "quick": 8000, "smoke": 512}
BACKLOG_BYTES = {"full": (1 << 30, 4 << 30), "quick": (256 << 20,), "smoke": (16 << 20,)}
CREATE_BATCH = 500
BACKLOG_QUEUES = 8
BACKLOG_GROUPS = ("backlog-hot", "backlog-cold")


def topic_names(start: int, stop: int) -> list[str]:
    """The scaling topics ``start`` .. ``stop - 1``, the same names on every system."""
    return [f"Spread{i:05d}" for i in range(start, stop)]


def batches(names: list[str], size: int = CREATE_BATCH) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


def spread(names: list[str], count: int) -> list[str]:
    """The topic of each of ``count`` messages: round-robin over ``names``."""
    return [names[i % len(names)] for i in range(count)]


def backlog_messages(size_bytes: int) -> int:
    return size_bytes // BODY_BYTES


class GrowingPeer(Protocol):
    name: str

    def create_topics(self, names: list[str]) -> None:
        """One-queue topics, replicated like the system's others; returns once each can
        be written to."""
        ...

    def spread_send(self, names: list[str], count: int) -> float:
        """One untimed message to each topic, then ``count`` sends round-robin over
        ``names`` with IN_FLIGHT outstanding: seconds for the ``count``."""
        ...

    def backlog_prepare(self, topic: str, groups: tuple[str, ...]) -> None: ...

    def fill(self, topic: str, count: int) -> float: ...

    def read_all(self, topic: str, count: int, group: str) -> float: ...

    def stop_nodes(self) -> None: ...

    def start_nodes(self) -> None: ...

    def data_dirs(self) -> list[str]: ...

    def backlog_cleanup(self, topic: str) -> None: ...


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


class PartialLevel(Exception):
    """A level's sends did not all finish within the wait: the rate of what was
    acknowledged is the level's figure (marked partial), and the part stops there."""

    def __init__(self, acknowledged: int, seconds: float, reason: str) -> None:
        super().__init__(f"{acknowledged:,} acknowledged in {seconds:.0f} s: {reason}")
        self.acknowledged, self.seconds = acknowledged, seconds


def growth_client(peer: GrowingPeer) -> str:
    """The client the topics and backlog parts use for ``peer`` (its own, unless it names
    a faster one for these parts)."""
    return getattr(peer, "growth_client", getattr(peer, "client", ""))


def run_topics(peer: GrowingPeer, counts: tuple[int, ...], count: int) -> dict:
    """One row per level: topics, creation time, msgs/s spread over all of them."""
    rows: list[dict] = []
    created = 0
    result: dict = {"messages_per_level": count, "levels": rows, "client": growth_client(peer)}
    try:
        for level in counts:
            names = topic_names(created, level)
            create_s = _timed(lambda names=names: peer.create_topics(names))
            created = level
            row = {"topics": level, "created": len(names), "create_s": round(create_s, 2)}
            try:
                row["msgs_per_s"] = round(count / peer.spread_send(topic_names(0, level), count))
            except PartialLevel as partial:
                row["msgs_per_s"] = round(partial.acknowledged / partial.seconds)
                row["partial"] = str(partial)
            rows.append(row)
            partial = " (partial: not all acknowledged in time)" if "partial" in row else ""
            log(
                f"  {peer.name} topics={level}: {row['msgs_per_s']:,} msgs/s "
                f"({len(names)} created in {create_s:.1f} s){partial}"
            )
            if "partial" in row:
                result["error"] = f"stopped at {level:,} topics: {row['partial']}"
                break
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"[:500]
        log(f"  {peer.name} topics failed: {error!r}")
    return result


def run_backlog(peer: GrowingPeer, sizes: tuple[int, ...]) -> dict:
    rows: list[dict] = []
    result: dict = {"rows": rows, "client": growth_client(peer)}
    for number, size in enumerate(sizes):
        topic = f"Backlog{number}"
        count = backlog_messages(size)
        row: dict = {"bytes": size, "messages": count}
        rows.append(row)
        stopped = False
        try:
            peer.backlog_prepare(topic, BACKLOG_GROUPS)
            row["fill_msgs_per_s"] = round(count / peer.fill(topic, count))
            hot = peer.read_all(topic, count, BACKLOG_GROUPS[0])
            row["hot_msgs_per_s"] = round(count / hot)
            row["hot_mb_per_s"] = round(size / hot / 1e6, 1)
            stopped = True
            peer.stop_nodes()
            row["evict"] = pagecache.evict(peer.data_dirs())
            peer.start_nodes()
            stopped = False
            # What the nodes' start read back in (recovery, warm-ups): all their files.
            files = pagecache.data_files(peer.data_dirs())
            row["resident_at_cold_start"] = pagecache.resident_fraction(files)
            row["resident_mb_at_cold_start"] = pagecache.resident_mb(files)
            cold = peer.read_all(topic, count, BACKLOG_GROUPS[1])
            row["cold_msgs_per_s"] = round(count / cold)
            row["cold_mb_per_s"] = round(size / cold / 1e6, 1)
            log(
                f"  {peer.name} backlog {size >> 20} MiB: hot {row['hot_msgs_per_s']:,} msgs/s, "
                f"cold {row['cold_msgs_per_s']:,} msgs/s ({row['resident_mb_at_cold_start']} MB "
                f"of the data files resident at its start)"
            )
        except Exception as error:
            row["error"] = f"{type(error).__name__}: {error}"[:500]
            log(f"  {peer.name} backlog {size >> 20} MiB failed: {error!r}")
        finally:
            try:
                if stopped:  # the parts after this one need the nodes up
                    peer.start_nodes()
                peer.backlog_cleanup(topic)
            except Exception as error:
                log(f"  {peer.name} backlog cleanup: {error!r}")
    return result
