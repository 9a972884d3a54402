"""A replication link over a cut network ends within ``DEAD_LINK_S``
(``ferrymq.codec.dead_peer``): the kernel gives up on a peer whose TCP stopped answering,
idle or sending; without it the same link stays open, waiting for the silence timeouts (a
partitioned master or slave cost writes ~5 s in the chaos runs). And the bulk sender, which
allows a slow peer ``SLOW_PEER_S``, still tells a cut path (``unanswered_s``) from a closed
window in that time. Real namespaces and a blackhole route (``chaos.network``; root and
iproute2)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

import pytest

from chaos.network import NodeNetwork, available
from ferrymq.codec.dead_peer import DEAD_LINK_S, unanswered_s

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
PORT = 7100
HOLD = (
    "import socket, sys, threading\ns = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2])))"
    "\ns.listen(); print('up', flush=True); held = []"
    "\ndef drain(c):\n    while c.recv(65536): pass"
    "\nwhile True:\n    c = s.accept()[0]; held.append(c)"
    "\n    threading.Thread(target=drain, args=(c,), daemon=True).start()"
)
# Links to the holder, detects dead peers or not, then idles or sends 1 KiB every 100 ms
# and prints how long after "cut" the link failed ("alive" if it did not within 6 s).
LINK = """
import asyncio, sys, time
from ferrymq.codec.dead_peer import detect_dead_peer
async def use(reader, writer, sending):
    try:
        while True:
            if sending == "yes":
                writer.write(b"x" * 1024)
                await writer.drain()
                await asyncio.sleep(0.1)
            elif not await reader.read(1):
                return
    except OSError:  # ETIMEDOUT (a TimeoutError too), EPIPE, ECONNRESET
        return
async def main(host, port, detect, sending):
    reader, writer = await asyncio.open_connection(host, int(port))
    if detect == "yes":
        detect_dead_peer(writer.get_extra_info("socket"))
    print("linked", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    cut = time.monotonic()
    done, _ = await asyncio.wait({asyncio.ensure_future(use(reader, writer, sending))}, timeout=6)
    print(round(time.monotonic() - cut, 2) if done else "alive", flush=True)
    sys.stdout.flush()
    import os; os._exit(0)
asyncio.run(main(*sys.argv[1:]))
"""


# Links to the holder, waits for "cut" with nothing in flight, then sends 1 KiB every
# 100 ms (a master's heartbeats and records) and prints how long after "cut"
# ``unanswered_s`` reached ``DEAD_LINK_S`` ("never" if not within ``DEAD_LINK_S + 2``).
UNSENDABLE = """
import socket, sys, time
from ferrymq.codec.dead_peer import DEAD_LINK_S, unanswered_s
link = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
link.send(b"x" * 1024)
print("linked", flush=True)
sys.stdin.readline()
cut = time.monotonic()
while time.monotonic() - cut < DEAD_LINK_S + 2:
    if unanswered_s(link) >= DEAD_LINK_S:
        print(round(time.monotonic() - cut, 2), flush=True)
        break
    link.send(b"x" * 1024)
    time.sleep(0.1)
else:
    print("never", flush=True)
"""


@pytest.fixture
def network():
    created = NodeNetwork(2).create()
    holder = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            created.namespace(0),
            sys.executable,
            "-c",
            HOLD,
            created.address(0),
            str(PORT),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "up"
        yield created
    finally:
        holder.kill()
        holder.wait()
        created.destroy()


def after_cut(network: NodeNetwork, program: str, *args: str) -> str:
    """Run ``program`` in node 1's namespace, linked to the holder in node 0's; once it
    says "linked", cut the two nodes apart both ways and return its next line."""
    link = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            network.namespace(1),
            sys.executable,
            "-c",
            program,
            network.address(0),
            str(PORT),
            *args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert link.stdout.readline().strip() == "linked"
        network.isolate(0)
        link.stdin.write("cut\n")
        link.stdin.flush()
        return link.stdout.readline().strip()
    finally:
        link.kill()
        link.wait()
        network.heal()


@pytest.mark.parametrize("sending", [False, True], ids=["idle", "sending"])
def test_a_link_over_a_cut_network_ends_within_the_dead_link_time(network, sending):
    sends = "yes" if sending else "no"
    assert float(after_cut(network, LINK, "yes", sends)) < DEAD_LINK_S + 2
    assert after_cut(network, LINK, "no", sends) == "alive"


def test_a_sender_whose_own_host_drops_its_packets_sees_the_path_cut(network):
    """A partition's blackhole route on the sender's side drops its bytes before they
    leave: nothing is unacknowledged or resent (a slave partitioned from an idle-between-
    frames master kept its link ~5 s in the chaos runs), yet the path is reported cut."""
    reported = after_cut(network, UNSENDABLE)
    assert reported != "never", "unanswered_s stayed below DEAD_LINK_S"
    assert float(reported) < DEAD_LINK_S + 1


def test_the_kernel_tells_a_cut_path_from_a_closed_window_within_the_dead_link_time(network):
    cut = socket.create_connection((network.address(0), PORT), timeout=5)
    try:
        cut.send(b"x" * 1024)
        network.cut_clients(0)
        deadline = time.monotonic() + DEAD_LINK_S + 2
        while unanswered_s(cut) < DEAD_LINK_S:
            assert time.monotonic() < deadline, "a cut path was never reported unanswered"
            cut.send(b"x" * 1024)  # a master's heartbeats and records
            time.sleep(0.1)
    finally:
        cut.close()
        network.heal()

    # A peer that stops reading (a starved slave): its window closes, every probe is
    # answered, and the path is never reported cut, however long the window stays closed.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind(("127.0.0.1", 0))
    server.listen()
    slow = socket.create_connection(server.getsockname())
    accepted = server.accept()[0]
    slow.setblocking(False)
    try:
        observed_until = time.monotonic() + 2 * DEAD_LINK_S
        while time.monotonic() < observed_until:
            with contextlib.suppress(BlockingIOError):  # the window closed: nothing goes out
                slow.send(b"x" * 65536)
            assert unanswered_s(slow) == 0.0
            time.sleep(0.05)
    finally:
        for sock in (slow, accepted, server):
            sock.close()
