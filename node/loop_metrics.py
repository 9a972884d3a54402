"""Counters and histograms for the request path, counted in plain Python numbers.

prometheus-client's ``Counter`` and ``Histogram`` take a lock on every increment (a
histogram observation takes two, after a Python loop over its buckets): about 10 µs per
send request for the four series it touches, a few per cent of a node's CPU per send.
Every request of a node is counted on its event loop, and ``/metrics`` is served on the
same loop (``node/metrics_http.py``), so nothing here is ever read or written from two
threads at once: the counts are plain ints and floats, and a scrape reads them at a
moment between two requests. The exposition is prometheus-client's own (a collector
yielding its metric families), with the same names, labels and buckets as before.

Thread-safety: one thread (the node's event loop) updates and collects.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    """``counts[i]``: observations in bucket ``i`` alone (the last one is +Inf); made
    cumulative when collected."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # ``le`` is inclusive: the first bound at or above the value.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class _LoopMetric:
    kind = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        label_names: Sequence[str],
        registry: CollectorRegistry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self._children: dict[tuple[str, ...], object] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str):
        key = tuple(str(value) for value in values)
        assert len(key) == len(self.label_names), f"{self.name} takes {self.label_names}"
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def _new_child(self):
        raise NotImplementedError

    def describe(self) -> list[Metric]:
        """The families' names, for the registry's duplicate check (no samples)."""
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError


class LoopCounter(_LoopMetric):
    """A counter family; ``name`` may end in ``_total`` (exposed with it either way)."""

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.label_names)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in self._children.items():
            family.add_metric(list(values), child.value)
        yield family


class LoopHistogram(_LoopMetric):
    def __init__(
        self,
        name: str,
        documentation: str,
        label_names: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None,
    ) -> None:
        bounds = tuple(float(bound) for bound in buckets if bound != float("inf"))
        assert list(bounds) == sorted(set(bounds)), "buckets must be increasing"
        self.bounds = bounds
        self._bucket_names = [floatToGoString(bound) for bound in bounds] + ["+Inf"]
        super().__init__(name, documentation, label_names, registry)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in self._children.items():
            cumulative, buckets = 0, []
            for name, count in zip(self._bucket_names, child.counts, strict=True):
                cumulative += count
                buckets.append((name, cumulative))
            family.add_metric(list(values), buckets, child.sum)
        yield family
