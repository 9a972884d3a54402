"""RPC-path metrics: a wrapper around every served method, counting once per request.

Every served method is timed by ``method`` and gRPC ``code``. Four methods also count
traffic, after the node answered (so only topics and groups that exist become labels):

- ``SendMessage``: latency by RocketMQ status (``ferrymq_send_latency_seconds``), and on
  success messages and bytes in by topic (the request's serialized size);
- ``PullMessage`` and ``ReceiveMessage`` (server streams): messages and body bytes out by
  topic and group, summed over the stream and added once at its end;
- ``Data.Fetch``: records and record bytes out by topic and group.

Bidirectional streams (Telemetry) live as long as a client; they are passed through
untimed. Cost on the send path: one wrapper call, one ``perf_counter`` pair, one histogram
observation and two counter increments per request (plain numbers, no locks:
``node/loop_metrics.py``), plus the request's ``ByteSize()`` (C code; ~0.3 µs per message
of a batch).

Thread-safety: the wrapped handlers run on the node's event loop, where ``/metrics`` is
served too: the series are ``node.loop_metrics``'s lock-free ones.
"""

from __future__ import annotations

import asyncio
import inspect
from time import perf_counter

import grpc
from prometheus_client import CollectorRegistry

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
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
FETCH = "/ferrymq.data.v1.Data/Fetch"
SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
PRODUCE = "/ferrymq.data.v1.Data/Produce"
PULL = "/apache.rocketmq.v2.MessagingService/PullMessage"
RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
_CODE_NAMES = {value: name for name, value in pb.Code.items()}


class RpcMetrics:
    """Counters and histograms of the RPC path, registered in the node's registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        node_labels: tuple[str, ...],
        node_values: tuple[str, ...],
    ) -> None:
        self.node_values = node_values
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
            "Messages stored by SendMessage and Data.Produce",
            [*node_labels, "topic"],
            registry=registry,
        )
        self.bytes_in = LoopCounter(
            "rocketmq_throughput_in_total",
            "Bytes of the send requests stored (SendMessage serialized, Produce records)",
            [*node_labels, "topic"],
            registry=registry,
        )
        self.messages_out = LoopCounter(
            "rocketmq_messages_out_total",
            "Messages delivered by PullMessage, ReceiveMessage and Data.Fetch",
            [*node_labels, "topic", "group"],
            registry=registry,
        )
        self.bytes_out = LoopCounter(
            "rocketmq_throughput_out_total",
            "Bytes delivered: message bodies (pull, receive) or whole records (Data.Fetch)",
            [*node_labels, "topic", "group"],
            registry=registry,
        )
        self._children: dict[tuple, object] = {}
        self.wrap_method = MethodMetrics(self).wrap

    def _child(self, metric, *labels: str):
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*self.node_values, *labels)
        return child

    def sent(self, request, response, elapsed_s: float) -> None:
        code = response.status.code
        self._child(self.send_latency, _CODE_NAMES.get(code, "UNKNOWN")).observe(elapsed_s)
        if code == OK_CODE and request.messages:
            messages = request.messages
            topic = messages[0].topic.name
            self._child(self.messages_in, topic).inc(len(messages))
            # The serialized size, computed in C: a Python pass over 128 bodies costs more.
            self._child(self.bytes_in, topic).inc(request.ByteSize())

    def produced(self, request, response, elapsed_s: float) -> None:
        """Data.Produce: the SDK's send path; per-record codes, stored ones counted."""
        code = response.code
        self._child(self.send_latency, _CODE_NAMES.get(code, "UNKNOWN")).observe(elapsed_s)
        stored = sum(1 for offset in response.offsets if offset >= 0)
        if stored:
            self._child(self.messages_in, request.topic).inc(stored)
            self._child(self.bytes_in, request.topic).inc(
                len(request.records) * stored // max(request.count, 1)
            )

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        if count:
            self._child(self.messages_out, topic, group).inc(count)
            self._child(self.bytes_out, topic, group).inc(size)


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
                self._unary(short, method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(short, method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client and bidirectional streams: long-lived, not timed

    def _unary(self, short: str, method: str, behavior):
        metrics = self.metrics
        ok_latency = metrics._child(metrics.rpc_latency, short, "OK")
        is_send = method == SEND
        is_produce = method == PRODUCE
        is_fetch = method == FETCH

        async def timed(request, context):
            start = perf_counter()
            try:
                response = await behavior(request, context)
            except BaseException as error:
                metrics._child(metrics.rpc_latency, short, _grpc_code(context, error)).observe(
                    perf_counter() - start
                )
                raise
            elapsed = perf_counter() - start
            ok_latency.observe(elapsed)
            if is_send:
                metrics.sent(request, response, elapsed)
            elif is_produce:
                metrics.produced(request, response, elapsed)
            elif is_fetch and response.code == OK_CODE:
                metrics.delivered(
                    request.topic, request.group, response.count, len(response.records)
                )
            return response

        return timed

    def _unary_stream(self, short: str, method: str, behavior):
        metrics = self.metrics
        counts_messages = method in (PULL, RECEIVE)

        async def timed(request, context):
            start = perf_counter()
            code = "OK"
            count = size = 0
            try:
                async for response in behavior(request, context):
                    if counts_messages and response.HasField("message"):
                        count += 1
                        size += len(response.message.body)
                    yield response
            except BaseException as error:
                code = _grpc_code(context, error)
                raise
            finally:
                metrics._child(metrics.rpc_latency, short, code).observe(perf_counter() - start)
                if count:
                    metrics.delivered(
                        request.message_queue.topic.name, request.group.name, count, size
                    )

        return timed


def _grpc_code(context, error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "CANCELLED"
    code = context.code() if context is not None else None
    if isinstance(code, grpc.StatusCode) and code is not grpc.StatusCode.OK:
        return code.name
    return "UNKNOWN"
