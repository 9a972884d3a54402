"""Ports held from the moment they are chosen until a node's listeners bind them
(``node/port_holds.py``): nothing else can take them in between, every listener of a
node still binds them, a launcher hands them to the node it starts, and a node restarted
on a port somebody else took fails at once, naming the port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace

import pytest

from ferrymq.launcher.cluster import (
    ClusterError,
    cluster_down,
    is_running,
    kill_node,
    load_plan,
    node_ports,
    plan_cluster,
    save_plan,
    start_node,
    wait_ready,
)
from node.port_holds import (
    HELD_FDS_ENV,
    adopt_inherited,
    hold_free_ports,
    hold_port,
    hold_port_when_free,
    port_of,
    start_with_holds,
)
from tests.support.cluster import SMALL_STORE


def taken(port: int) -> bool:
    """Whether a plain bind (no SO_REUSEADDR, as any other program's) fails on ``port``."""
    with socket.socket() as other:
        try:
            other.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def test_a_held_port_refuses_other_binds_but_not_a_reuseaddr_listener():
    held = hold_port("127.0.0.1")
    port = port_of(held)
    assert taken(port)
    held.close()
    assert not taken(port)  # let go, it is anybody's
    held = hold_port("127.0.0.1", port)
    try:
        assert taken(port)
        # Every listener of a node sets SO_REUSEADDR (gRPC's, asyncio's, pysyncobj's):
        # it binds and serves on the held port.
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(1)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                accepted, _ = listener.accept()
                accepted.close()
    finally:
        held.close()


def test_a_hold_guards_only_its_own_address():
    """Why a port a node binds on another host is held on that host (as the security
    tests' one-voter clusters on 127.0.0.2 do): a hold on 127.0.0.1 leaves 127.0.0.2's
    port to any other listener, which then keeps the node's own listener out."""
    (held,) = hold_free_ports("127.0.0.1", 1)
    try:
        with socket.socket() as other:  # anybody else's listener, on the other address
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            other.bind(("127.0.0.2", port_of(held)))
            other.listen(1)
    finally:
        held.close()
    (held,) = hold_free_ports("127.0.0.2", 1)
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.2", port_of(held)))
    finally:
        held.close()


def test_held_ports_are_distinct_and_a_listening_port_cannot_be_held():
    holds = hold_free_ports("127.0.0.1", 8)
    try:
        ports = [port_of(held) for held in holds]
        assert len(set(ports)) == 8 and all(taken(port) for port in ports)
    finally:
        for held in holds:
            held.close()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with pytest.raises(OSError):
            hold_port("127.0.0.1", listener.getsockname()[1])


def test_a_child_adopts_the_holds_it_was_handed_and_keeps_them_from_its_children():
    holds = hold_free_ports("127.0.0.1", 2)
    ports = [port_of(held) for held in holds]
    child = (
        "import json, os\n"
        "from node.port_holds import HELD_FDS_ENV, adopt_inherited\n"
        "holds = adopt_inherited()\n"
        "print(json.dumps([[h.getsockname()[1] for h in holds], HELD_FDS_ENV in os.environ]))\n"
    )
    process = start_with_holds(
        [sys.executable, "-c", child], holds, stdout=subprocess.PIPE, text=True
    )
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert json.loads(stdout) == [ports, False]
    assert HELD_FDS_ENV not in os.environ and adopt_inherited() == []


def test_a_planned_nodes_ports_are_never_free_until_it_has_bound_them(tmp_path):
    plan = plan_cluster(str(tmp_path), 1, auto_ports=True, settings=SMALL_STORE)
    node = plan.nodes[0]
    ports = [
        int(getattr(node, name).rpartition(":")[2]) for name in ("grpc", "metrics", "ha", "raft")
    ]
    try:
        assert all(taken(port) for port in ports)  # held since they were chosen
        started = start_node(plan, node)
        plan = replace(plan, nodes=(started,))
        save_plan(plan)
        # The node process is still starting (importing, opening its store): its ports
        # are held by the copies it inherited, then bound by its listeners.
        assert all(taken(port) for port in ports)
        wait_ready(plan, 60)
        assert all(taken(port) for port in ports)
    finally:
        if load_plan(str(tmp_path)) is not None:
            cluster_down(str(tmp_path))


def test_a_restart_on_a_port_another_process_took_fails_at_once_naming_it(tmp_path):
    plan = plan_cluster(str(tmp_path), 1, auto_ports=True, settings=SMALL_STORE)
    started = start_node(plan, plan.nodes[0])
    plan = replace(plan, nodes=(started,))
    save_plan(plan)
    try:
        wait_ready(plan, 60)
    finally:
        os.kill(started.pid, signal.SIGKILL)
    host, _, port = started.grpc.rpartition(":")
    # The killed node's threads let go of its listeners a moment after it dies.
    with hold_port_when_free(host, int(port), 10) as squatter:
        squatter.listen(1)  # another program's server, on the node's port
        with pytest.raises(ClusterError, match=rf"grpc port {host}:{port} is in use"):
            start_node(plan, started, port_wait_s=0.3)
    # Let go, the port is the node's again.
    restarted = start_node(plan, started)
    plan = replace(plan, nodes=(restarted,))
    save_plan(plan)
    try:
        wait_ready(plan, 60)
    finally:
        cluster_down(str(tmp_path))


def test_a_killed_node_s_ports_stay_held_until_its_restart(tmp_path):
    """From a node's kill -9 to its restart its ports were free, and any outgoing
    connection on the host could take one as its local port: a test run's drill restart failed,
    "metrics port ... in use by another process". ``kill_node`` holds them at once."""
    plan = plan_cluster(str(tmp_path), 1, auto_ports=True, settings=SMALL_STORE)
    started = start_node(plan, plan.nodes[0])
    plan = replace(plan, nodes=(started,))
    save_plan(plan)
    ports = [port for _, _, port in node_ports(started)]
    try:
        wait_ready(plan, 60)
        kill_node(plan, started)
        assert not is_running(started, plan)
        assert all(taken(port) for port in ports)  # held by this launcher, not free
        assert sorted(plan.holds) == sorted(ports)
        restarted = start_node(plan, started)  # takes the holds
        assert plan.holds == {}
        plan = replace(plan, nodes=(restarted,))
        save_plan(plan)
        wait_ready(plan, 60)
    finally:
        cluster_down(str(tmp_path))


def test_a_killed_node_s_port_taken_before_its_hold_fails_naming_the_node_and_port(tmp_path):
    """Between the kill and the hold another program may take a port (milliseconds):
    ``kill_node`` says which node's which port, as a restart on a taken port does,
    not a bare OSError."""
    plan = plan_cluster(str(tmp_path), 1, auto_ports=True, settings=SMALL_STORE)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    node = replace(plan.nodes[0], pid=stand_in.pid)  # killed in the node's place
    host, _, port = node.grpc.rpartition(":")
    plan.holds.pop(int(port)).close()
    try:
        with socket.socket() as squatter:
            squatter.bind((host, int(port)))
            squatter.listen(1)  # another program's server, on the node's port
            with pytest.raises(ClusterError, match=rf"{node.id} was killed, but its grpc port "):
                kill_node(plan, node, wait_s=0.1)
        assert stand_in.wait(10) == -signal.SIGKILL
    finally:
        stand_in.kill()
        stand_in.wait()
        for held in plan.holds.values():
            held.close()
