"""bench.sdk_load_driver, the SDK's side of bench.saturation: its histograms read as the
Java drivers' (``LoadSteps``) do, and a pacing loop behind its clock still lets the sends
it made go out (at 80,000 msgs/s none did until the step's last send was made)."""

from __future__ import annotations

import asyncio
import itertools

from bench import sdk_load_driver as driver


def test_the_buckets_are_the_java_drivers_50_us_to_120_s_5_percent_apart():
    bounds = driver.BOUNDS_US
    assert bounds[0] == 50 and bounds[-1] <= 120_000_000 < bounds[-1] * 1.05 + 1
    assert all(later > earlier for earlier, later in itertools.pairwise(bounds))
    assert driver.bucket_of(50) == 0 and driver.bucket_of(51) == 1
    assert driver.bucket_of(10**12) == len(bounds)  # past the last bound: the overflow


def test_a_histogram_gives_each_quantiles_bucket_bound_and_the_largest():
    counts = [0] * driver.BUCKETS
    counts[driver.bucket_of(1_000)] = 98  # 98 sends of 1 ms, two of 2 s
    counts[driver.bucket_of(2_000_000)] = 2
    figures = driver.histogram_json(counts, 2_000_000)
    assert 1.0 <= figures["p50"] < 1.05 and figures["p99"] >= 2000.0 and figures["max"] == 2000.0
    assert driver.histogram_json([0] * driver.BUCKETS, 0) == {"p50": 0.0, "p99": 0.0, "max": 0.0}


def test_a_step_behind_its_clock_lets_its_first_sends_go_before_its_last_is_made():
    queued_when_answered: list[int] = []

    class Producer:
        queued = 0

        async def enqueue_async(self, message):
            """Queued at once; answered by the loop's next turn, if it gets one."""
            self.queued += 1
            receipt = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(
                lambda: (queued_when_answered.append(self.queued), receipt.set_result(None))
            )
            return receipt

    count = 20 * driver.YIELD_EVERY
    # A rate no loop keeps up with: every send is due before the one before it is made.
    step, sent, _ = asyncio.run(driver.run_step(Producer(), "T", b"x", 1e12, count / 1e12))

    assert sent == count and step.acked == count and not step.errors
    # The first answer came while a few of the step's sends were made, not all of them.
    assert queued_when_answered[0] <= driver.YIELD_EVERY + 1


def test_every_arrival_counts_in_exactly_one_step_s_event():
    arrivals = driver.Arrivals(2)
    now_ms = driver.time.time_ns() // 1_000_000
    for _ in range(3):
        arrivals.record(now_ms)
    assert arrivals.end_step(0) == (3, 3)  # step 0's arrivals, and all so far
    arrivals.record(now_ms)  # after step 0's event: step 1's, not step 0's
    arrivals.record(now_ms)
    assert arrivals.end_step(1) == (2, 5)
    arrivals.record(now_ms)  # after the last step: in neither event, in the backlog's count
    assert arrivals.per_step[:] == [3, 2, 1] and arrivals.received.value == 6
    assert arrivals.of_step(0)["max"] >= 0 and sum(arrivals.end_to_end[:]) == 6
