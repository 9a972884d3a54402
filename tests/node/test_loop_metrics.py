"""``node/loop_metrics.py`` against its specification, prometheus-client's own
``Counter`` and ``Histogram``: the same observations give the same exposition (names,
labels, buckets, counts, sums), apart from the ``_created`` series those add."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from node.loop_metrics import LoopCounter, LoopHistogram
from node.metrics_rpc import RPC_BUCKETS_S

LABELS = ("node", "method", "code")


def exposition(registry: CollectorRegistry) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_the_same_observations_give_prometheus_client_s_exposition():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    our_histogram = LoopHistogram("x_latency_seconds", "help", LABELS, RPC_BUCKETS_S, ours)
    their_histogram = Histogram(
        "x_latency_seconds", "help", LABELS, buckets=RPC_BUCKETS_S, registry=theirs
    )
    our_counter = LoopCounter("x_messages_total", "help", LABELS, ours)
    their_counter = Counter("x_messages_total", "help", LABELS, registry=theirs)
    draw = random.Random(7)
    # Every bound exactly (``le`` is inclusive), around each, zero and past the last.
    values = [0.0, *RPC_BUCKETS_S, *(b * 1.0001 for b in RPC_BUCKETS_S), 100.0]
    values += [draw.uniform(0, 70) ** 3 / 70**2 for _ in range(2000)]
    for value in values:
        labels = ("n1", draw.choice(["Send", "Pull"]), draw.choice(["OK", "NOT_FOUND"]))
        our_histogram.labels(*labels).observe(value)
        their_histogram.labels(*labels).observe(value)
        amount = draw.choice([1, 3, 128])
        our_counter.labels(*labels).inc(amount)
        their_counter.labels(*labels).inc(amount)
    assert exposition(ours) == exposition(theirs)


def test_a_second_family_of_the_same_name_is_refused():
    """The registry's duplicate check sees the families before any sample exists."""
    registry = CollectorRegistry()
    LoopCounter("y_total", "help", ("a",), registry)
    try:
        LoopHistogram("y", "help", ("a",), (1.0,), registry)
    except ValueError as error:
        assert "Duplicated timeseries" in str(error)
    else:
        raise AssertionError("a second family named y was registered")
