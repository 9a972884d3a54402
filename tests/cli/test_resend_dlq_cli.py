"""``ferrymq group resend-dlq``'s own logic, without a node: its selection options, and the
calls it repeats for what one call's byte bound left (``not_yet``), adding up the counts."""

from __future__ import annotations

import contextlib
import json

import pytest

from ferrymq.cli import main as cli
from ferrymq.client.admin import DeadLetterResend


class Answers:
    """An Admin whose resends answer from a list, keeping what it was asked."""

    def __init__(self, answers: list[DeadLetterResend]) -> None:
        self.answers = answers
        self.asked: list[tuple] = []

    def resend_dead_letters(self, group, offsets=(), from_offset=-1, to_offset=-1, broker_group=""):
        self.asked.append((group, tuple(offsets), from_offset, to_offset, broker_group))
        return self.answers.pop(0)


def test_the_rest_past_one_calls_bound_is_asked_again_and_the_counts_add_up(monkeypatch, capsys):
    admin = Answers(
        [
            DeadLetterResend("group-1", (0, 1), (), (2, 3)),
            DeadLetterResend("group-1", (2,), (), (3,)),
            DeadLetterResend("group-1", (), (3,), ()),
        ]
    )
    monkeypatch.setattr(cli, "admin_of", lambda args: contextlib.nullcontext(admin))
    assert cli.main(["group", "resend-dlq", "G", "--from", "0", "--to", "3", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {
        "broker_group": "group-1",
        "resent": [0, 1, 2],
        "already_resent": [3],
        "not_yet": [],
    }
    assert admin.asked == [
        ("G", (), 0, 3, ""),
        ("G", (2, 3), -1, -1, "group-1"),
        ("G", (3,), -1, -1, "group-1"),
    ]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--offsets", "1,x"], "--offsets '1,x': offsets separated by commas"),
        (["--offsets", "1", "--to", "3"], "--to goes with --from, not with --offsets"),
        (["--from", "1"], "--from needs --to (the last offset to resend)"),
    ],
)
def test_a_selection_that_is_not_one_is_refused_before_any_call(argv, error, monkeypatch, capsys):
    admin = Answers([])
    monkeypatch.setattr(cli, "admin_of", lambda args: contextlib.nullcontext(admin))
    assert cli.main(["group", "resend-dlq", "G", *argv]) != 0
    assert error in capsys.readouterr().err
    assert admin.asked == []
