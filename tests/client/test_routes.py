"""Which node a send goes to while its master is unreachable (``Endpoints.reachable``):
another access point for ``UNREACHABLE_S`` after a transport failure, then the master
again; never a node that failed too; never elsewhere for a request no node forwards."""

from __future__ import annotations

import contextlib
import socket
import threading

from ferrymq.client import Admin, FerryError, Producer, routes
from ferrymq.client.routes import UNREACHABLE_S, Endpoints
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb


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


def test_a_node_whose_route_query_failed_is_asked_last_until_it_is_tried_again(module_node):
    """Every node answers routes: one that did not (cut off from this client) is not asked
    first again while avoided. Asking it first cost the chaos runs' clients cut off from
    the master the next send's whole timeout (writes back after 5.5 s, not 2.5 s)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes connections; nothing ever answers
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(silent.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    dead = f"127.0.0.1:{silent.getsockname()[1]}"
    endpoints = Endpoints(f"{dead},{module_node.address}", timeout_s=0.5)
    try:
        with Admin(module_node.address) as admin:
            admin.create_topic("asked-last", 1)
        assert endpoints.route_candidates() == [dead, module_node.address]
        assert endpoints.route("asked-last").queues  # the silent node first, then the node
        tried = len(accepted)
        assert tried >= 1
        assert endpoints.route_candidates() == [module_node.address, dead]
        assert endpoints.route("asked-last", refresh=True).queues
        assert len(accepted) == tried  # not asked again
    finally:
        stop.set()
        acceptor.join()
        for connection in accepted:
            connection.close()
        silent.close()
        endpoints.close()


def test_a_node_that_refused_as_no_master_is_asked_routes_last_but_still_sent_to():
    """A master cut off from routing, fenced, still names itself in its routes: a client
    whose access point it was kept asking it and wrote nowhere until the partition healed.
    Its refusal (HA_NOT_AVAILABLE) sends route queries elsewhere first; sends may still go
    to it (a new master refuses so too until its lease is renewed)."""
    producer = Producer("a:1,b:2,c:3", timeout_s=1)
    try:
        refusal = FerryError(pb.HA_NOT_AVAILABLE, "HA_NOT_AVAILABLE", "not the master now")
        producer.failed("a:1", refusal)
        assert producer.endpoints.route_candidates() == ["b:2", "c:3", "a:1"]
        assert producer.reachable("a:1") == "a:1"
        producer.failed("b:2", FerryError(pb.BAD_REQUEST, "BAD_REQUEST", "a bad message"))
        assert producer.endpoints.route_candidates() == ["b:2", "c:3", "a:1"]
    finally:
        producer.close()
