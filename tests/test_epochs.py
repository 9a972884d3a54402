"""Epoch histories and where a slave's log stops agreeing with its master's."""

from __future__ import annotations

import pytest

from ha.epochs import EpochEntry, EpochFileError, EpochHistory, truncation_point


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
