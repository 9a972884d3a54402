"""Remoting-port metrics: every request answered on the remoting port, timed by its
request code and response code, and the port's open connections.

Named in the style of the gRPC ones (``rocketmq_rpc_latency_seconds{method, code}``):

- ``rocketmq_remoting_latency_seconds{request_code, response_code}``: time from a frame
  read to its answer made (a long poll included); its ``_count`` is the requests answered
  by request and response code. Answers the transport makes itself (an unknown code, too
  many requests in flight, a malformed header) count with 0 s;
- ``ferrymq_remoting_connections``: connections open now (read at scrape time).

Labels stay bounded: a request code is the name of a code the node serves (an unserved
one is ``UNKNOWN``: a client choosing numbers makes no labels), a response code is
RocketMQ's name when it has one, else its number (handlers answer only RocketMQ's codes);
a oneway request that gets no answer counts as ``NONE``.

Thread-safety: observed and served on the node's event loop (``node/loop_metrics.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry, Gauge

from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.loop_metrics import LoopHistogram
from node.metrics_rpc import RPC_BUCKETS_S

UNKNOWN_CODE = "UNKNOWN"
NO_ANSWER = "NONE"


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def _response_name(code: int | None) -> str:
    if code is None:
        return NO_ANSWER
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class RemotingMetrics:
    """What the remoting port reports; ``observe`` is called once per request."""

    def __init__(
        self,
        registry: CollectorRegistry,
        node_labels: tuple[str, ...],
        node_values: tuple[str, ...],
    ) -> None:
        self.node_values = node_values
        self.latency = LoopHistogram(
            "rocketmq_remoting_latency_seconds",
            "Time to answer a remoting request, by request and response code",
            [*node_labels, "request_code", "response_code"],
            buckets=RPC_BUCKETS_S,
            registry=registry,
        )
        self.connections = Gauge(
            "ferrymq_remoting_connections",
            "Connections open on the remoting port",
            node_labels,
            registry=registry,
        )
        self._open: Callable[[], int] = lambda: 0
        self.connections.labels(*node_values).set_function(lambda: self._open())
        self._served: Collection[int] = ()
        self._children: dict[tuple[int, int | None], object] = {}

    def watch(self, served_codes: Collection[int], open_connections: Callable[[], int]) -> None:
        """The codes the port serves (the only request labels) and its connection count."""
        self._served = frozenset(served_codes)
        self._open = open_connections
        self._children.clear()

    def observe(self, request_code: int, response_code: int | None, elapsed_s: float) -> None:
        code = request_code if request_code in self._served else -1
        key = (code, response_code)
        child = self._children.get(key)
        if child is None:
            name = _request_name(code) if code >= 0 else UNKNOWN_CODE
            child = self.latency.labels(*self.node_values, name, _response_name(response_code))
            self._children[key] = child
        child.observe(elapsed_s)
