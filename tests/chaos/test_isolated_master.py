"""A master cut off from its peers while its clients still reach it, and it is their first
access point: it fences itself and the others elect a new master, but it still names itself
in the routes it serves. The SDK asks routes elsewhere once it refused as no master
(``Endpoints.mark_stale``), so its writes come back with the election, not with the heal.
Real namespaces and blackhole routes (``chaos.network``; root and iproute2)."""

from __future__ import annotations

import time

import pytest

from chaos.network import NodeNetwork, available
from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.launcher.cluster import cluster_down, cluster_up
from ferrymq.launcher.polling import until
from tests.support.cluster import SMALL_STORE, master_of

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
ISOLATED_S = 12.0  # far longer than an election (~3 s): writes must come back within it


def test_writes_come_back_before_the_heal_when_the_isolated_master_is_the_access_point(
    tmp_path,
):
    network = NodeNetwork(3).create()
    directory = str(tmp_path / "cluster")
    try:
        settings = {"store": SMALL_STORE["store"], "replication": {"mode": "SYNC"}}
        plan = cluster_up(
            directory, nodes=3, auto_ports=True, settings=settings, placements=network.placements
        )
        master = master_of(plan)
        with Admin(master.grpc) as admin:
            admin.create_topic("isolated", 2)
        others = [n.grpc for n in plan.nodes if n.id != master.id]
        with Producer(",".join([master.grpc, *others]), max_attempts=1, timeout_s=2) as producer:
            until(lambda: sends(producer, 1), 20, "a first write")
            network.isolate(plan.nodes.index(master))
            cut_at = time.monotonic()
            back_after = None
            while time.monotonic() - cut_at < ISOLATED_S:
                if sends(producer, 1):
                    back_after = time.monotonic() - cut_at
                    break
                time.sleep(0.05)  # a refused writer does not spin (the chaos workload's)
            network.heal()
        assert back_after is not None, "no write came back while the master was isolated"
        print(f"writes back {back_after:.2f} s after the master's isolation")
    finally:
        network.heal()
        cluster_down(directory)
        network.destroy()


def sends(producer: Producer, count: int) -> bool:
    """Whether ``count`` sends were acknowledged; a refused or failed one forgets the
    route (as the chaos workload's writers do)."""
    try:
        for n in range(count):
            producer.send(Message("isolated", b"%d" % n))
        return True
    except FerryError:
        producer.endpoints.forget("isolated")
        return False
