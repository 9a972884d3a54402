"""Epoch histories and where a slave's log stops agreeing with its master's."""

from __future__ import annotations

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ha.epochs import EpochEntry, EpochFileError, EpochHistory, truncation_point
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, message, stubs


def history(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


@pytest.mark.parametrize(
    ("local", "local_end", "master", "master_end", "point"),
    [
        # The same term: the shorter end.
        (history((1, 0)), 500, history((1, 0)), 800, 500),
        (history((1, 0)), 800, history((1, 0)), 500, 500),
        # The slave was master of a term nobody else has: cut at the shared term's end.
        (history((1, 0), (2, 300)), 900, history((1, 0), (3, 400)), 1000, 300),
        (history((1, 0), (2, 300)), 900, history((1, 0), (3, 200)), 1000, 200),
        # An empty log agrees with every master.
        (history(), 0, history((4, 0)), 700, 0),
        (history((1, 0)), 0, history((2, 0)), 0, 0),
        # The old master of a group whose new master was promoted before it had received
        # a record: nothing of the old log is the master's.
        (history((1, 0)), 300, history((2, 0)), 500, 0),
        # A log of newer terms, or a master whose history misses its start: not decidable.
        (history((5, 0)), 300, history((2, 0)), 500, None),
        (history((1, 0)), 300, history((2, 100)), 500, None),
        (history(), 300, history((2, 0)), 500, None),
    ],
)
def test_truncation_point(local, local_end, master, master_end, point):
    assert truncation_point(local, local_end, master, master_end) == point


def test_history_survives_reopen_and_rejects_damage(tmp_path):
    epochs = EpochHistory(str(tmp_path))
    epochs.append(1, 0)
    epochs.append(3, 200)
    epochs.append(4, 200)  # term 3 wrote nothing: replaced
    assert EpochHistory(str(tmp_path)).entries == history((1, 0), (4, 200))
    with pytest.raises(ValueError):
        epochs.append(2, 300)
    epochs.truncate_from(200)
    assert EpochHistory(str(tmp_path)).entries == history((1, 0))
    with open(tmp_path / "epochs", "a", encoding="ascii") as f:
        f.write("9 9\n")
    with pytest.raises(EpochFileError):
        EpochHistory(str(tmp_path))


def test_a_node_forgets_terms_its_log_no_longer_holds_when_it_starts(tmp_path):
    """After a power loss under ASYNC_FLUSH the epoch file (forced to disk at once) can
    name terms past the CommitLog's end (flushed later). Such a history once stopped a
    node from ever starting again (a promotion could not append its term)."""
    data = str(tmp_path / "node")
    node = start_node(data)
    channel, messaging, admin = stubs(node.address)
    try:
        create_topic(admin, "orders", 1)
        sent = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("orders", b"kept", "M1")]), timeout=10
        )
        assert sent.status.code == pb.OK
    finally:
        channel.close()
    assert node.sigterm() == 0
    epochs = EpochHistory(data)
    end = epochs.entries[-1].start_offset + 10_000_000  # far past the log's end
    epochs.append(epochs.last_epoch + 1, end)
    node = start_node(data, port=int(node.address.rpartition(":")[2]))
    channel, messaging, _ = stubs(node.address)
    try:
        again = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("orders", b"after", "M2")]), timeout=10
        )
        assert again.status.code == pb.OK, again.status
        assert all(e.start_offset < end for e in EpochHistory(data).entries)
    finally:
        channel.close()
        node.sigterm()
