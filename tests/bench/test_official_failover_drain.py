"""The official-client load's drain (``bench.official_failover.Drain``): a loaded run once
counted a message lost that had been answered after the consumer decided it was done (the
last send, still in flight when the load was told to stop)."""

from __future__ import annotations

import threading

from bench.official_failover import Drain


def test_the_consumer_drains_only_after_the_last_send_is_answered():
    stop, answer = threading.Event(), threading.Event()
    acked = {"m-1"}

    def produce() -> None:
        answer.wait(10)
        acked.add("m-2")  # the last send, answered after the stop

    producing = threading.Thread(target=produce)
    producing.start()
    drain = Drain(stop, producing, acked, idle_s=60)
    received = {"m-1"}
    stop.set()
    assert not drain.done(received)  # m-2 may still be answered
    answer.set()
    producing.join()
    assert not drain.done(received)  # answered, not received yet
    received.add("m-2")
    assert drain.done(received)
