"""Traffic metrics of every door, and the gRPC methods' latency.

The services report their traffic here, whichever door it came by (``TrafficMetrics``),
after the node decided (so only topics and groups that exist become labels):

- a send or produce: its latency by RocketMQ status (``ferrymq_send_latency_seconds``), and
  on success messages and body bytes in by topic (``rocketmq_messages_in_total``,
  ``rocketmq_throughput_in_total``);
- a pull, fetch or receive: messages and bytes out by topic and group (body bytes of
  decoded messages, whole records where records go out as stored).

``MethodMetrics`` wraps each gRPC method once, at registration, and times it by ``method``
and gRPC ``code`` (the remoting port's requests are timed by ``node/metrics_remoting.py``).
Bidirectional streams (Telemetry) live as long as a client; they are passed through
untimed. Cost on the send path: one wrapper call, one ``perf_counter`` pair, one histogram
observation and two counter increments per request (plain numbers, no locks:
``node/loop_metrics.py``).

Thread-safety: the series are ``node.loop_metrics``'s lock-free ones, observed and served
on the node's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
from time import perf_counter
from typing import Protocol

import grpc
from prometheus_client import CollectorRegistry

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.broker_stats import BrokerStats, InFlight
from node.loop_metrics import LoopCounter, LoopHistogram

RPC_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
SEND_BUCKETS_S = RPC_BUCKETS_S[:12]
OK_CODE = pb.OK
_CODE_NAMES = {value: name for name, value in pb.Code.items()}


class TrafficMetrics(Protocol):
    """What the services report of the traffic they serve, whichever door it came by;
    ``sends_open``: the sends taken and not answered yet."""

    sends_open: InFlight

    def stored(self, topic: str, count: int, size: int) -> None: ...

    def send_answered(self, code: int, elapsed_s: float) -> None: ...

    def delivered(self, topic: str, group: str, count: int, size: int) -> None: ...

    def produce_lane(self, taken: bool) -> None: ...

    def fetch_lane(self, taken: bool) -> None: ...


class NoTrafficMetrics:
    """For a service run without a node's registry (unit tests)."""

    def __init__(self) -> None:
        self.sends_open = InFlight()

    def stored(self, topic: str, count: int, size: int) -> None:
        return None

    def send_answered(self, code: int, elapsed_s: float) -> None:
        return None

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        return None

    def produce_lane(self, taken: bool) -> None:
        return None

    def fetch_lane(self, taken: bool) -> None:
        return None


class RpcMetrics:
    """Counters and histograms of the RPC path, registered in the node's registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        node_labels: tuple[str, ...],
        node_values: tuple[str, ...],
        stats: BrokerStats | None = None,
    ) -> None:
        self.node_values = node_values
        # RocketMQ's runtime table (mqadmin clusterList, brokerStatus) counts the same.
        self.stats = stats or BrokerStats()
        self.sends_open = self.stats.sends
        self.rpc_latency = LoopHistogram(
            "rocketmq_rpc_latency_seconds",
            "Time to answer an RPC (streams: until their last message)",
            [*node_labels, "method", "code"],
            buckets=RPC_BUCKETS_S,
            registry=registry,
        )
        self.send_latency = LoopHistogram(
            "ferrymq_send_latency_seconds",
            "Time to answer SendMessage or Data.Produce, by the RocketMQ status code",
            [*node_labels, "status"],
            buckets=SEND_BUCKETS_S,
            registry=registry,
        )
        self.messages_in = LoopCounter(
            "rocketmq_messages_in_total",
            "Messages stored by sends of every door (gRPC, Data.Produce, 4.x remoting)",
            [*node_labels, "topic"],
            registry=registry,
        )
        self.bytes_in = LoopCounter(
            "rocketmq_throughput_in_total",
            "Bytes stored by sends: message bodies (Produce: its records)",
            [*node_labels, "topic"],
            registry=registry,
        )
        self.messages_out = LoopCounter(
            "rocketmq_messages_out_total",
            "Messages delivered by pulls, fetches and receives of every door",
            [*node_labels, "topic", "group"],
            registry=registry,
        )
        self.bytes_out = LoopCounter(
            "rocketmq_throughput_out_total",
            "Bytes delivered: message bodies, or whole records where they go out as stored",
            [*node_labels, "topic", "group"],
            registry=registry,
        )
        self._children: dict[tuple, object] = {}
        self.wrap_method = MethodMetrics(self).wrap
        self._produce_lane = self._lane_outcomes("produce", registry, node_labels)
        self._fetch_lane = self._lane_outcomes("fetch", registry, node_labels)

    def _lane_outcomes(self, kind: str, registry, node_labels: tuple[str, ...]) -> dict:
        """``ferrymq_<kind>_lane_total``'s series for taken (True) and declined (False),
        made now: both are exported from the start."""
        metric = LoopCounter(
            f"ferrymq_{kind}_lane_total",
            f"FERRY_{kind.upper()} requests the {kind} lane took, or declined to the handler",
            [*node_labels, "outcome"],
            registry=registry,
        )
        return {True: self._child(metric, "taken"), False: self._child(metric, "declined")}

    def _child(self, metric, *labels: str):
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*self.node_values, *labels)
        return child

    def stored(self, topic: str, count: int, size: int) -> None:
        """``count`` messages of ``size`` body bytes stored in ``topic``, by any door."""
        self._child(self.messages_in, topic).inc(count)
        self._child(self.bytes_in, topic).inc(size)
        self.stats.stored(topic, count, size)

    def send_answered(self, code: int, elapsed_s: float) -> None:
        """A send of any door answered with ``code`` (apache.rocketmq.v2.Code)."""
        self._child(self.send_latency, _CODE_NAMES.get(code, "UNKNOWN")).observe(elapsed_s)

    def produce_lane(self, taken: bool) -> None:
        """A FERRY_PRODUCE offered to the produce lane, taken or declined."""
        self._produce_lane[taken].inc()

    def fetch_lane(self, taken: bool) -> None:
        """A FERRY_FETCH offered to the fetch lane, taken or declined."""
        self._fetch_lane[taken].inc()

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        if count:
            self._child(self.messages_out, topic, group).inc(count)
            self._child(self.bytes_out, topic, group).inc(size)
            self.stats.delivered(group, count, topic)


class MethodMetrics:
    """Wraps each served method once, when it is registered (``node/method_wrapping.py``),
    with timing and counting. An unknown method is answered UNIMPLEMENTED by grpc and
    makes no label."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self.metrics = metrics

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        short = method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None and inspect.iscoroutinefunction(handler.unary_unary):
            return grpc.unary_unary_rpc_method_handler(
                self._unary(short, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(short, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client and bidirectional streams: long-lived, not timed

    def _unary(self, short: str, behavior):
        metrics = self.metrics
        ok_latency = metrics._child(metrics.rpc_latency, short, "OK")

        async def timed(request, context):
            start = perf_counter()
            try:
                response = await behavior(request, context)
            except BaseException as error:
                metrics._child(metrics.rpc_latency, short, _grpc_code(context, error)).observe(
                    perf_counter() - start
                )
                raise
            ok_latency.observe(perf_counter() - start)
            return response

        return timed

    def _unary_stream(self, short: str, behavior):
        metrics = self.metrics

        async def timed(request, context):
            start = perf_counter()
            code = "OK"
            try:
                async for response in behavior(request, context):
                    yield response
            except BaseException as error:
                code = _grpc_code(context, error)
                raise
            finally:
                metrics._child(metrics.rpc_latency, short, code).observe(perf_counter() - start)

        return timed


def _grpc_code(context, error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "CANCELLED"
    code = context.code() if context is not None else None
    if isinstance(code, grpc.StatusCode) and code is not grpc.StatusCode.OK:
        return code.name
    return "UNKNOWN"
