"""Which node a send goes to while its master is unreachable (``Endpoints.reachable``):
another access point for ``UNREACHABLE_S`` after a transport failure, then the master
again; never a node that failed too; never elsewhere for a request no node forwards."""

from __future__ import annotations

from ferrymq.client import routes
from ferrymq.client.routes import UNREACHABLE_S, Endpoints


def test_an_unreachable_node_is_avoided_for_a_while_then_tried_again(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(routes.time, "monotonic", lambda: now[0])
    endpoints = Endpoints("a:1,b:2,c:3", timeout_s=1)
    assert endpoints.reachable("a:1") == "a:1"
    endpoints.mark_unreachable("a:1")
    assert endpoints.reachable("a:1") == "b:2"
    assert endpoints.reachable("a:1", forwardable=False) == "a:1"
    endpoints.mark_unreachable("b:2")
    assert endpoints.reachable("a:1") == "c:3"
    endpoints.mark_unreachable("c:3")
    assert endpoints.reachable("a:1") == "a:1"  # nobody better: the master itself
    now[0] += UNREACHABLE_S
    assert endpoints.reachable("a:1") == "a:1"
