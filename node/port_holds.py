"""Ports held from the moment they are chosen until a node's listeners have bound them.

A port found free and let go can be taken before its listener binds it: by an outgoing
connection (the kernel gives those ports from the same range as port-0 binds) or by
another process binding port 0. The node would then fail to start, or, for pysyncobj's
Raft listener, retry its bind forever. A *hold* closes that window: a socket bound to the
port with SO_REUSEADDR and never listening. While it is open, no outgoing connection and
no port-0 bind gets the port, and a plain bind fails; yet a listener that sets
SO_REUSEADDR (gRPC's, asyncio's servers, pysyncobj's: every listener of a node) binds and
listens there.

A launcher hands its holds to the node process it starts: the sockets are passed as
inherited descriptors, named in ``FERRYMQ_HELD_PORT_FDS``, and the node keeps them until
it stops (``adopt_inherited``), so the port is never free between the plan and the bind.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import time
from collections.abc import Sequence

HELD_FDS_ENV = "FERRYMQ_HELD_PORT_FDS"
RELEASE_WAIT_S = 5.0  # how long a restart waits for a killed node to let go of its ports


def hold_port(host: str, port: int = 0) -> socket.socket:
    """A hold on ``port`` of ``host`` (0: a free port the OS picks; the socket's
    ``getsockname()`` says which). Raises ``OSError`` (EADDRINUSE) when another socket
    listens there or holds it without SO_REUSEADDR."""
    held = socket.socket()
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind((host, port))
    except BaseException:
        held.close()
        raise
    return held


def hold_port_when_free(
    host: str, port: int, wait_s: float = RELEASE_WAIT_S, poll_s: float = 0.05
) -> socket.socket:
    """``hold_port`` on a given port, retried every ``poll_s`` for up to ``wait_s`` while
    it is in use: a node just killed may not have released its listeners yet."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return hold_port(host, port)
        except OSError as error:
            if error.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
        time.sleep(poll_s)


def hold_free_ports(host: str, count: int) -> list[socket.socket]:
    """Holds on ``count`` distinct free ports: while one is held the OS hands out no
    other port-0 bind on it, so the ports cannot repeat."""
    holds: list[socket.socket] = []
    try:
        for _ in range(count):
            holds.append(hold_port(host))
    except BaseException:
        for held in holds:
            held.close()
        raise
    return holds


def port_of(held: socket.socket) -> int:
    return held.getsockname()[1]


def start_with_holds(
    command: list[str], holds: Sequence[socket.socket], **popen: object
) -> subprocess.Popen:
    """``subprocess.Popen(command, **popen)`` with ``holds`` handed to the child (inherited
    descriptors, named in its environment), then closed here: the child has its copies."""
    environment = dict(popen.pop("env", None) or os.environ)
    environment[HELD_FDS_ENV] = ",".join(str(held.fileno()) for held in holds)
    try:
        return subprocess.Popen(
            command, pass_fds=[held.fileno() for held in holds], env=environment, **popen
        )
    finally:
        for held in holds:
            held.close()


def adopt_inherited() -> list[socket.socket]:
    """The holds this process's launcher passed it (none when started by hand). The
    variable is removed so that no child of this process looks for them."""
    named = os.environ.pop(HELD_FDS_ENV, "")
    holds = []
    for fd in filter(None, named.split(",")):
        try:
            holds.append(socket.socket(fileno=int(fd)))
        except OSError:  # not open here (a launcher's mistake): nothing to keep
            continue
    return holds
