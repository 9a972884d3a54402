"""The chaos suite's network: namespaces per node, cuts between them and off the clients,
and a heal that restores every link (real namespaces; needs root and iproute2)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from chaos.network import NodeNetwork, available

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
PORT = 7000
LISTEN = (
    "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2])));"
    "s.listen(); print('up', flush=True)\nwhile True: s.accept()[0].close()"
)
CONNECT = (
    "import socket, sys\ntry: socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)"
    "\nexcept OSError: sys.exit(1)"
)


def reaches(network: NodeNetwork, source: int | None, target: int) -> bool:
    """Whether a TCP connection from node ``source`` (None: the host) to ``target``'s
    listener opens within 1 s."""
    command = [sys.executable, "-c", CONNECT, network.address(target), str(PORT)]
    if source is not None:
        command = ["ip", "netns", "exec", network.namespace(source), *command]
    return subprocess.run(command, timeout=10).returncode == 0


@pytest.fixture
def network():
    created = NodeNetwork(3).create()
    listeners = []
    try:
        for i in range(3):
            inside = ["ip", "netns", "exec", created.namespace(i)]
            listener = subprocess.Popen(
                [*inside, sys.executable, "-c", LISTEN, created.address(i), str(PORT)],
                stdout=subprocess.PIPE,
                text=True,
            )
            listeners.append(listener)
            assert listener.stdout.readline().strip() == "up"
        yield created
    finally:
        for listener in listeners:
            listener.kill()
            listener.wait()
        created.destroy()


def test_isolating_a_node_cuts_it_from_its_peers_only_until_healed(network):
    assert all(reaches(network, a, b) for a in range(3) for b in range(3) if a != b)
    network.isolate(0)
    assert not reaches(network, 0, 1) and not reaches(network, 1, 0)
    assert not reaches(network, 2, 0)
    assert reaches(network, 1, 2) and reaches(network, 2, 1)  # the majority still talks
    assert reaches(network, None, 0)  # clients still reach the isolated node
    network.heal()
    assert reaches(network, 0, 1) and reaches(network, 2, 0)


def test_cutting_the_clients_off_a_node_leaves_its_peers_connected(network):
    network.cut_clients(1)
    assert not reaches(network, None, 1)
    assert reaches(network, None, 0) and reaches(network, 0, 1)
    network.heal()
    assert reaches(network, None, 1)


def test_destroy_removes_every_namespace_and_the_bridge():
    network = NodeNetwork(2).create()
    names = [network.namespace(i) for i in range(2)]
    network.destroy()
    deadline = time.monotonic() + 10
    while True:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
        if not any(n in listed for n in names) and network.bridge not in links:
            break
        assert time.monotonic() < deadline, (listed, links)
        time.sleep(0.05)
