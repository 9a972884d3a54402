"""The runtime table's own counts (``node/broker_stats.py``): rates over RocketMQ's three
windows, the daily marks at local midnight, and the sends held open."""

from __future__ import annotations

import datetime

import pytest

from node.broker_stats import BrokerStats, InFlight, tps_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.day = datetime.date(2026, 11, 28)

    def __call__(self) -> float:
        return self.now


def test_rates_are_counted_over_ten_seconds_a_minute_and_ten_minutes():
    clock = Clock()
    stats = BrokerStats(clock, lambda: clock.day)
    for second in range(600):
        clock.now += 1
        # 1 message a second for the first 540 s, then 10 a second.
        stats.stored("t", 1 if second < 540 else 10, 100)
        stats.delivered("g", 2)
        stats.sample()
    puts, gots = stats.rates()
    assert puts == pytest.approx((10.0, 10.0, (540 + 600) / 600))
    assert gots == pytest.approx((2.0, 2.0, 2.0))
    assert tps_text(puts) == "10.00 10.00 1.90"


def test_a_node_up_for_less_than_a_window_rates_since_it_started():
    clock = Clock()
    stats = BrokerStats(clock, lambda: clock.day)
    clock.now += 4
    stats.stored("t", 20, 0)
    assert stats.rates()[0] == pytest.approx((5.0, 5.0, 5.0))
    assert BrokerStats(clock).rates() == ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))


def test_each_local_midnight_keeps_the_counts_as_this_morning_and_yesterday_morning():
    clock = Clock()
    stats = BrokerStats(clock, lambda: clock.day)
    stats.stored("t", 7, 70)
    stats.delivered("g", 3)
    stats.sample()
    assert stats.daily.put_today_morning == 0  # started today: nothing before it
    clock.day += datetime.timedelta(days=1)
    stats.sample()
    stats.stored("t", 5, 50)
    clock.day += datetime.timedelta(days=1)
    stats.sample()
    daily = stats.daily
    assert (daily.put_yesterday_morning, daily.put_today_morning) == (7, 12)
    assert (daily.got_yesterday_morning, daily.got_today_morning) == (3, 3)


def test_in_flight_counts_open_requests_and_the_oldest_ones_wait():
    clock = Clock()
    open_sends = InFlight(clock)
    assert (open_sends.size, open_sends.oldest_wait_ms()) == (0, 0)
    first = open_sends.enter()
    clock.now += 0.25
    second = open_sends.enter()
    clock.now += 0.5
    assert (open_sends.size, open_sends.oldest_wait_ms()) == (2, 750)
    open_sends.leave(first)
    assert (open_sends.size, open_sends.oldest_wait_ms()) == (1, 500)
    open_sends.leave(second)
    open_sends.leave(second)  # twice: no harm
    assert open_sends.size == 0


def test_per_topic_and_per_group_rates_cover_the_last_minute():
    clock = Clock()
    stats = BrokerStats(clock, lambda: clock.day)
    for _ in range(120):
        clock.now += 1
        stats.stored("busy", 6, 0)
        stats.stored("quiet", 1 if clock.now < 1060 else 0, 0)
        stats.delivered("readers", 3)
        stats.sample()
    assert stats.topics_put.rate("busy") == pytest.approx(6.0, rel=0.02)
    assert stats.topics_put.rate("quiet") == 0.0  # nothing in the last minute
    assert stats.groups_got.rate("readers") == pytest.approx(3.0, rel=0.02)
    assert stats.groups_got.rate("nobody") == 0.0
