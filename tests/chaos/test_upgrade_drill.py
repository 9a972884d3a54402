"""The upgrade drill's own reader (``chaos.upgrade_drill``): when it may say it has read
everything. CI's run of the drill reported the last acknowledged messages lost when its
reader ended on a poll that had begun before the writer stopped."""

from __future__ import annotations

import threading

from chaos.upgrade_drill import TOPIC, Load
from ferrymq.client import ReceivedMessage


def received(body: str, queue_id: int) -> ReceivedMessage:
    return ReceivedMessage(
        topic=TOPIC,
        queue_id=queue_id,
        queue_offset=0,
        message_id=body,
        body=body.encode(),
        tag=None,
        keys=[],
        properties={},
        message_group=None,
        born_timestamp_ms=0,
        store_timestamp_ms=0,
    )


def test_a_poll_begun_before_the_writer_stopped_does_not_end_the_read():
    """The first poll waits on an empty queue while the writer's last message lands on
    another and the writer stops: it finds nothing. Only a poll begun after the stop may
    end the read, and the next one finds the last message."""
    load = Load("unused")
    writer_stopped = threading.Event()
    answers = [[], [received("m-00000007", 1)], []]

    def poll(wait_s: float) -> list[ReceivedMessage]:
        answer = answers.pop(0)
        writer_stopped.set()  # during the first poll's wait
        return answer

    load.read_until_drained(poll, writer_stopped)

    assert load.read == {"m-00000007": 1}
    assert answers == []  # ended by the poll begun after the stop, not before
