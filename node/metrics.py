"""Prometheus metrics of one node: a registry per node, read at scrape time.

Two kinds of metrics, kept apart so the hot path pays almost nothing:

- **State read at scrape time** (``NodeStateCollector``): CommitLog offsets, dispatch and
  flush backlog, disk usage, consumer lag per group and queue, in-flight and DLQ counts,
  role, epoch, in-sync set, replication lag and Raft state. Nothing is counted while
  messages flow; a scrape reads what the store and the node already keep.
- **Counters and histograms on the RPC path** (``node.metrics_rpc``): a wrapper around
  every served method times every RPC by method and code, and counts messages and bytes in (sends)
  and out (pulls, POP receives, Data.Fetch) by topic and group, once per request; the
  remoting port times each request by request and response code (``node.metrics_remoting``).

Names follow the RocketMQ exporter (``rocketmq_group_diff``, ``rocketmq_broker_commitlog_diff``,
``rocketmq_brokeruntime_*``) or RocketMQ 5's own metrics (``rocketmq_messages_in_total``,
``rocketmq_storage_dispatch_behind_bytes``, ...) where one means the same thing; the others
are ``ferrymq_*``. ``FAMILIES`` lists them all; docs/architecture.md has the table.

Labels stay bounded: every family carries ``node`` and ``broker_group`` (one value per
process); ``topic``, ``group`` and ``queue_id`` take only names of the topic/group table
(counted only after the node accepted the request, so unknown names never become labels);
``slave`` takes node ids of the broker group; ``method`` the served RPCs. No message ids,
client ids or keys.

Replication and routing feed their state through two callables the node exposes,
``NodeMetrics.replication_status`` and ``NodeMetrics.routing_status``. Without them (unit
tests) a node is its own master at epoch 0 with an in-sync set of one, and exports no Raft
families. In a broker group only the master exports the per-topic and per-group families
(producer and consumer offsets, lag, in flight, DLQ, connections), as Admin's
GroupProgress reads only masters: summed over a group they count each queue once. Storage,
role and Raft families come from every node.

Thread-safety: the collector runs on the node's event loop (``node.metrics_http`` serves
scrapes there), so it reads the node's loop-owned state without locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from ha.status import ReplicationStatus
from node.consumer_offsets import ConsumerOffsets
from node.group_members import GroupMembers
from node.heartbeat import LEASE_AGE_BUCKETS_S, ROUND_TRIP_BUCKETS_S, HeartbeatTimes
from node.metrics_remoting import RemotingMetrics
from node.metrics_rpc import RpcMetrics
from node.pop_state import PopState
from node.topics import dead_letter_topic_of
from store.message_store import MessageStore

log = logging.getLogger("ferrymq.metrics")
NODE_LABELS = ("node", "broker_group")
ROLES = ("master", "slave")


@dataclass(frozen=True)
class RoutingStatus:
    """What the Raft routing code (``routing/``) reports, as this node sees it."""

    voter: bool
    leader: str | None  # Raft address of the leader this node knows; None while there is none
    is_leader: bool
    term: int
    commit_index: int


STANDALONE = ReplicationStatus()


class TopicSource(Protocol):
    """The topic/group table as the metrics read it (``node.topics.TopicTable``)."""

    topics: Mapping[str, object]  # name -> config with ``queue_count``
    groups: Mapping[str, object]


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "gauge", "counter", "histogram" as exposed
    labels: tuple[str, ...]
    help: str
    needs: str = ""  # "replication": series only on a master that has slaves


# Every family a node exports besides prometheus-client's process_* and python_* ones:
# those read at scrape time (``NodeStateCollector``), then those counted as requests come
# and go and the heartbeat's (``node.metrics_rpc``, ``node.metrics_remoting``,
# ``HeartbeatCollector``).
STATE_FAMILIES: tuple[Family, ...] = (
    Family("ferrymq_node_info", "gauge", ("version",), "Always 1; the node's version"),
    Family(
        "ferrymq_metrics_collect_errors",
        "gauge",
        (),
        "Sections of this scrape that failed (logged); their families are missing",
    ),
    Family(
        "rocketmq_brokeruntime_commitlog_minoffset",
        "gauge",
        (),
        "First CommitLog offset still on disk (bytes)",
    ),
    Family(
        "rocketmq_brokeruntime_commitlog_maxoffset", "gauge", (), "CommitLog write offset (bytes)"
    ),
    Family("ferrymq_commitlog_flushed_offset", "gauge", (), "CommitLog offset known on disk"),
    Family(
        "ferrymq_commitlog_confirmed_offset",
        "gauge",
        (),
        "CommitLog offset the in-sync set holds (consumers read below it)",
    ),
    Family("ferrymq_commitlog_dispatched_offset", "gauge", (), "CommitLog offset dispatched"),
    Family("ferrymq_commitlog_segments", "gauge", (), "CommitLog segment files"),
    Family(
        "ferrymq_commitlog_damaged",
        "gauge",
        (),
        "1 while a range recovery cut after an invalid record is not refilled from a master",
    ),
    Family(
        "ferrymq_commitlog_damaged_bytes",
        "gauge",
        (),
        "CommitLog bytes recovery cut after invalid records, in ranges still kept aside",
    ),
    Family(
        "rocketmq_storage_dispatch_behind_bytes",
        "gauge",
        (),
        "CommitLog bytes written but not yet in consume queues and index",
    ),
    Family(
        "rocketmq_storage_flush_behind_bytes",
        "gauge",
        (),
        "CommitLog bytes written but not yet flushed",
    ),
    Family(
        "rocketmq_brokeruntime_commitlog_disk_ratio",
        "gauge",
        (),
        "Used / total of the file system holding the data directory",
    ),
    Family(
        "ferrymq_disk_high_water_ratio",
        "gauge",
        (),
        "Disk usage ratio above which the oldest segments are deleted",
    ),
    Family("ferrymq_disk_free_bytes", "gauge", (), "Free bytes of the data directory's disk"),
    Family("rocketmq_topic_number", "gauge", (), "User topics this node's group serves"),
    Family("rocketmq_consumer_group_number", "gauge", (), "Consumer groups in the table"),
    Family(
        "rocketmq_producer_offset",
        "gauge",
        ("topic",),
        "Sum of the topic's queue max offsets (messages stored ever)",
    ),
    Family(
        "rocketmq_consumer_offset",
        "gauge",
        ("group", "topic"),
        "Sum of the group's consumer offsets over the topic's queues",
    ),
    Family(
        "rocketmq_group_diff",
        "gauge",
        ("group", "topic", "queue_id"),
        "Consumer lag in messages: queue max offset minus the group's consumed offset",
    ),
    Family(
        "rocketmq_consumer_inflight_messages",
        "gauge",
        ("group", "topic", "queue_id"),
        "POP deliveries of the group not yet acked",
    ),
    Family(
        "ferrymq_dlq_messages",
        "gauge",
        ("group",),
        "Messages held in the group's dead-letter topic %DLQ%<group>",
    ),
    Family(
        "rocketmq_topic_dlq_offset",
        "gauge",
        ("group",),
        "Messages ever dead-lettered for the group (its DLQ's max offsets)",
    ),
    Family(
        "rocketmq_consumer_connections", "gauge", ("group",), "Live members (heartbeats) of a group"
    ),
    Family("ferrymq_broker_role", "gauge", ("role",), "1 for the node's current role"),
    Family("ferrymq_broker_epoch", "gauge", (), "Mastership epoch the node is in"),
    Family("ferrymq_insync_replicas", "gauge", (), "Size of the broker group's in-sync set"),
    Family(
        "ferrymq_insync_replicas_min",
        "gauge",
        (),
        "Minimum in-sync set size for SYNC replication",
    ),
    Family("ferrymq_broker_group_replicas", "gauge", (), "Replicas configured in the group"),
    Family(
        "rocketmq_broker_commitlog_diff",
        "gauge",
        ("slave",),
        "Replication lag in bytes per slave (master max offset minus slave's acked)",
        needs="replication",
    ),
    Family("ferrymq_raft_voter", "gauge", (), "1 if this node votes in Raft"),
    Family("ferrymq_raft_is_leader", "gauge", (), "1 if this node leads Raft"),
    Family("ferrymq_raft_has_leader", "gauge", (), "1 if this node knows a leader"),
    Family("ferrymq_raft_term", "gauge", (), "Raft term this node is in"),
    Family("ferrymq_raft_commit_index", "gauge", (), "Raft commit index of this node"),
)
PATH_FAMILIES: tuple[Family, ...] = (
    Family(
        "rocketmq_rpc_latency_seconds",
        "histogram",
        ("method", "code"),
        "Time to answer an RPC, by method and gRPC code (streams: to their last message)",
    ),
    Family(
        "rocketmq_remoting_latency_seconds",
        "histogram",
        ("request_code", "response_code"),
        "Time to answer a remoting request, by request and response code",
    ),
    Family("ferrymq_remoting_connections", "gauge", (), "Connections open on the remoting port"),
    Family(
        "ferrymq_send_latency_seconds",
        "histogram",
        ("status",),
        "SendMessage latency by the RocketMQ status code of the answer",
    ),
    Family(
        "ferrymq_heartbeat_round_trip_seconds",
        "histogram",
        (),
        "Time from sampling a heartbeat to routing committing it",
    ),
    Family(
        "ferrymq_lease_age_at_renewal_seconds",
        "histogram",
        (),
        "Time since the last committed heartbeat left, when the next one committed (a "
        "master refuses writes once it passes two thirds of the lease)",
    ),
    Family(
        "ferrymq_heartbeats_failed_total",
        "counter",
        (),
        "Heartbeats routing did not commit (each is retried within 0.1 s)",
    ),
    Family(
        "ferrymq_heartbeats_withheld_total",
        "counter",
        (),
        "Heartbeats the routing host did not send: the node's process had shown no "
        "progress for two leases (stopped, or never given the GIL)",
    ),
    Family("rocketmq_messages_in_total", "counter", ("topic",), "Messages stored by sends"),
    Family(
        "ferrymq_produce_lane_total",
        "counter",
        ("outcome",),
        "FERRY_PRODUCE requests the produce lane took, or declined to the handler",
    ),
    Family(
        "rocketmq_throughput_in_total",
        "counter",
        ("topic",),
        "Bytes stored by sends (messages as serialized in the requests)",
    ),
    Family(
        "rocketmq_messages_out_total",
        "counter",
        ("topic", "group"),
        "Messages delivered by PullMessage, ReceiveMessage and Data.Fetch",
    ),
    Family(
        "rocketmq_throughput_out_total",
        "counter",
        ("topic", "group"),
        "Bytes delivered: bodies (pull, receive) or whole records (Data.Fetch)",
    ),
)
FAMILIES = STATE_FAMILIES + PATH_FAMILIES
_HELP = {f.name: f.help for f in FAMILIES}
_METRIC_TYPES = {
    "gauge": GaugeMetricFamily,
    "counter": CounterMetricFamily,
    "histogram": HistogramMetricFamily,
}


# What ``HeartbeatCollector`` serves; ``NodeStateCollector`` serves STATE_FAMILIES.
HEARTBEAT_FAMILIES = frozenset(
    {
        "ferrymq_heartbeat_round_trip_seconds",
        "ferrymq_lease_age_at_renewal_seconds",
        "ferrymq_heartbeats_failed_total",
        "ferrymq_heartbeats_withheld_total",
    }
)


def described(families: Iterable[Family]) -> list[Metric]:
    """``families`` as a collector's ``describe`` names them (no samples), so that a scrape
    asking for other names (``name[]``) does not read that collector."""
    return [_METRIC_TYPES[f.kind](f.name, f.help) for f in families]


def _version() -> str:
    try:
        return metadata.version("ferrymq")
    except metadata.PackageNotFoundError:
        return "unknown"


class NodeMetrics:
    """The metrics of one node: registry, RPC method wrapper, scrape-time collector.

    The node builds it once its state objects exist; ``wrap_method`` wraps the methods
    it serves; replication and routing assign ``replication_status`` / ``routing_status``.
    """

    def __init__(
        self,
        node_id: str,
        broker_group: str,
        store: MessageStore,
        topics: TopicSource,
        offsets: ConsumerOffsets,
        pop_state: PopState,
        members: GroupMembers,
    ) -> None:
        self.node_values = (node_id, broker_group)
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop_state = pop_state
        self.members = members
        self.replication_status: Callable[[], ReplicationStatus] = lambda: STANDALONE
        self.routing_status: Callable[[], RoutingStatus | None] = lambda: None
        # ``*_created`` series double the counters for a start time nobody graphs.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.rpc = RpcMetrics(self.registry, NODE_LABELS, self.node_values)
        self.wrap_method = self.rpc.wrap_method
        self.remoting = RemotingMetrics(self.registry, NODE_LABELS, self.node_values)
        self.registry.register(NodeStateCollector(self))
        self.heartbeat_times = HeartbeatTimes()  # replaced by the routing proxy's copy
        self.registry.register(HeartbeatCollector(self))


class HeartbeatCollector:
    """The heartbeat's times (``node/heartbeat.py``), kept by the liveness loop and read
    here at scrape time."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return described(f for f in PATH_FAMILIES if f.name in HEARTBEAT_FAMILIES)

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        times = m.heartbeat_times
        labels, values = list(NODE_LABELS), list(m.node_values)
        for name, bounds, counts, total in (
            (
                "ferrymq_heartbeat_round_trip_seconds",
                ROUND_TRIP_BUCKETS_S,
                list(times.round_trips),
                times.round_trip_sum_s,
            ),
            (
                "ferrymq_lease_age_at_renewal_seconds",
                LEASE_AGE_BUCKETS_S,
                list(times.lease_ages),
                times.lease_age_sum_s,
            ),
        ):
            family = HistogramMetricFamily(name, _HELP[name], labels=labels)
            cumulative, buckets = 0, []
            for bound, count in zip([*map(floatToGoString, bounds), "+Inf"], counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(values, buckets, total)
            yield family
        name = "ferrymq_heartbeats_failed_total"
        failed = CounterMetricFamily(name, _HELP[name], labels=labels)
        failed.add_metric(values, times.failed)
        yield failed
        name = "ferrymq_heartbeats_withheld_total"
        withheld = CounterMetricFamily(name, _HELP[name], labels=labels)
        withheld.add_metric(values, times.withheld)
        yield withheld


class NodeStateCollector:
    """Reads node and store state when Prometheus scrapes. Runs on the event loop."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics
        self.version = _version()

    def describe(self) -> Iterable[Metric]:
        return described(STATE_FAMILIES)

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        families: dict[str, GaugeMetricFamily] = {}

        def gauge(name: str, value: float, **labels: str) -> None:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    name, _HELP[name], labels=[*NODE_LABELS, *labels]
                )
            family.add_metric([*m.node_values, *labels.values()], value)

        gauge("ferrymq_node_info", 1, version=self.version)
        failed = 0
        for section in (self._storage, self._consumption, self._replication, self._routing):
            try:
                section(gauge)
            except Exception:  # one broken reader must not take the whole scrape down
                log.exception("metrics section %s failed", section.__name__)
                failed += 1
        gauge("ferrymq_metrics_collect_errors", failed)
        yield from families.values()

    def _storage(self, gauge) -> None:
        store = self.metrics.store
        write = store.write_offset
        flushed = store.flushed_offset
        dispatched = store.dispatched_offset
        gauge("rocketmq_brokeruntime_commitlog_minoffset", store.min_offset)
        gauge("rocketmq_brokeruntime_commitlog_maxoffset", write)
        gauge("ferrymq_commitlog_flushed_offset", flushed)
        gauge("ferrymq_commitlog_dispatched_offset", dispatched)
        gauge("ferrymq_commitlog_segments", store.segment_count)
        gauge("ferrymq_commitlog_damaged", 1 if store.damage.unrefilled else 0)
        gauge("ferrymq_commitlog_damaged_bytes", store.damage.cut_bytes)
        gauge("rocketmq_storage_dispatch_behind_bytes", max(0, write - dispatched))
        gauge("rocketmq_storage_flush_behind_bytes", max(0, write - flushed))
        try:
            total, used, free = store.disk_usage(store.config.data_dir)
        except OSError:
            total = used = free = 0
        if total > 0:
            gauge("rocketmq_brokeruntime_commitlog_disk_ratio", used / total)
            gauge("ferrymq_disk_free_bytes", free)
        gauge("ferrymq_disk_high_water_ratio", store.config.disk_high_water_ratio)

    def _consumption(self, gauge) -> None:
        m = self.metrics
        store = m.store
        topics = m.topics.topics
        groups = m.topics.groups
        # User topics, as Admin lists them (dead-letter topics exist per group, derived).
        gauge("rocketmq_topic_number", sum(1 for name in topics if not name.startswith("%")))
        gauge("rocketmq_consumer_group_number", len(groups))
        if m.replication_status().role != "master":
            # Producers and consumers use the master; a slave's copies of offsets, POP state
            # and members would count every group once per replica in the sums.
            return
        max_offsets: dict[str, list[int]] = {}
        for name, config in topics.items():
            queue_count = config.queue_count
            max_offsets[name] = [store.max_offset_in_queue(name, q) for q in range(queue_count)]
            gauge("rocketmq_producer_offset", sum(max_offsets[name]), topic=name)
        for pair in sorted(consuming_pairs(m.offsets, m.pop_state)):
            group, topic = pair
            if group not in groups or topic not in max_offsets:
                continue
            consumed_sum = 0
            for queue_id, broker_offset in enumerate(max_offsets[topic]):
                consumer_offset, in_flight = consumed_position(
                    m.offsets, m.pop_state, group, topic, queue_id
                )
                consumed_sum += consumer_offset
                q = str(queue_id)
                lag = max(0, broker_offset - consumer_offset)
                gauge("rocketmq_group_diff", lag, group=group, topic=topic, queue_id=q)
                gauge(
                    "rocketmq_consumer_inflight_messages",
                    in_flight,
                    group=group,
                    topic=topic,
                    queue_id=q,
                )
            gauge("rocketmq_consumer_offset", consumed_sum, group=group, topic=topic)
        for group in sorted(groups):
            dlq = dead_letter_topic_of(group)
            held = dead_lettered = 0
            for queue_id in store.queue_ids(dlq):
                high = store.max_offset_in_queue(dlq, queue_id)
                held += high - store.min_offset_in_queue(dlq, queue_id)
                dead_lettered += high
            gauge("ferrymq_dlq_messages", held, group=group)
            gauge("rocketmq_topic_dlq_offset", dead_lettered, group=group)
            gauge("rocketmq_consumer_connections", len(m.members.live(group)), group=group)

    def _replication(self, gauge) -> None:
        m = self.metrics
        status = m.replication_status()
        for role in ROLES:
            gauge("ferrymq_broker_role", 1 if status.role == role else 0, role=role)
        gauge("ferrymq_broker_epoch", status.epoch)
        gauge("ferrymq_insync_replicas", status.insync_replicas)
        gauge("ferrymq_insync_replicas_min", status.min_insync_replicas)
        gauge("ferrymq_broker_group_replicas", status.replicas)
        confirmed = status.confirmed_offset
        if confirmed is None:
            confirmed = m.store.confirmed_offset
        if confirmed is None:
            confirmed = m.store.write_offset
        gauge("ferrymq_commitlog_confirmed_offset", confirmed)
        for slave, lag in sorted(status.slave_lag_bytes.items()):
            gauge("rocketmq_broker_commitlog_diff", max(0, lag), slave=slave)

    def _routing(self, gauge) -> None:
        status = self.metrics.routing_status()
        if status is None:
            return
        gauge("ferrymq_raft_voter", 1 if status.voter else 0)
        gauge("ferrymq_raft_is_leader", 1 if status.is_leader else 0)
        gauge("ferrymq_raft_has_leader", 0 if status.leader is None else 1)
        gauge("ferrymq_raft_term", status.term)
        gauge("ferrymq_raft_commit_index", status.commit_index)


def consuming_pairs(offsets: ConsumerOffsets, pop_state: PopState) -> set[tuple[str, str]]:
    """(group, topic) pairs with a committed offset or a POP cursor: the groups that
    consume the topic on this node."""
    # ConsumerOffsets keeps its table private; this read-only pass is the one outside user.
    committed = offsets._offsets
    pairs = {(group, topic) for group, topic, _ in committed}
    pairs.update((group, topic) for group, topic, _ in pop_state.cursors)
    return pairs


def consumed_position(
    offsets: ConsumerOffsets, pop_state: PopState, group: str, topic: str, queue_id: int
) -> tuple[int, int]:
    """(consumer offset, in flight) of a queue, as Admin's GroupProgress computes them: a
    POP cursor, when there is one, is where everything below is consumed."""
    cursor = pop_state.cursor((group, topic, queue_id))
    if cursor is not None:
        return cursor.consumed_below, len(cursor.in_flight)
    committed = offsets.get(group, topic, queue_id)
    return (committed if committed is not None else 0), 0
