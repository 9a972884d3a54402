"""The SDK's message ids (``ferrymq.client.messages.new_message_id``): the text of its
sequence number as its specification writes it, and unique across threads."""

from __future__ import annotations

import itertools
import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.client import messages
from ferrymq.client.messages import message_id_in_python, new_message_id


@given(st.integers(0, (1 << 64) - 600), st.integers(1, 600))
def test_each_id_is_its_sequence_numbers_text(first, count):
    """Runs that cross a 256 boundary (where the cached head changes) included."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(messages, "_sequence", itertools.count(first))
        patch.setattr(messages, "_head", (-1, ""))
        made = [new_message_id() for _ in range(count)]
    assert made == [message_id_in_python(first + i) for i in range(count)]
    assert all(len(text) == 34 and text == text.upper() for text in made)


def test_ids_made_by_many_threads_at_once_are_all_different():
    made: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(made))

    def make(into: list[str]) -> None:
        start.wait()
        into.extend(new_message_id() for _ in range(20_000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switches between any two bytecodes of the cache's update
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    every = [text for into in made for text in into]
    assert len(set(every)) == len(every) == 160_000
