"""The node's budget of request bytes held while handled (node/request_budget.py): a
node-wide total that refuses, per-owner counts that say when to stop reading an owner."""

from __future__ import annotations

import pytest

from node.request_budget import RequestBudget


def test_the_node_total_refuses_what_would_pass_it_and_holds_nothing_then():
    budget = RequestBudget(max_bytes=100, max_bytes_per_owner=1000)
    assert budget.acquire("a", 60) and budget.acquire("b", 40)
    assert budget.total == 100
    assert not budget.acquire("a", 1)  # would pass 100
    assert (budget.total, budget.held("a"), budget.held("b")) == (100, 60, 40)
    budget.release("b", 40)
    assert budget.acquire("a", 40) and budget.held("a") == 100


def test_an_owner_is_over_past_its_limit_and_relieved_at_half_of_it():
    budget = RequestBudget(max_bytes=1000, max_bytes_per_owner=100)
    assert budget.acquire("a", 100) and not budget.over("a")  # at the limit, not past it
    assert budget.acquire("a", 1) and budget.over("a") and not budget.relieved("a")
    assert not budget.over("b")  # owners are counted apart
    budget.release("a", 51)
    assert not budget.relieved("a")  # 50 held: the low mark, not below it
    budget.release("a", 1)
    assert budget.relieved("a") and budget.held("a") == 49


def test_released_owners_are_forgotten():
    budget = RequestBudget(max_bytes=1000, max_bytes_per_owner=100)
    for owner in range(50):
        budget.acquire(owner, 10)
        budget.release(owner, 10)
    assert budget.total == 0 and budget.owners == 0


def test_limits_are_positive():
    with pytest.raises(ValueError, match="positive"):
        RequestBudget(max_bytes=0, max_bytes_per_owner=1)
