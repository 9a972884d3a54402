"""One node process, started and stopped from code: the tests', the benchmarks' and the
monitoring stack's (``deploy/local_stack.py``). Unlike a cluster node (``cluster.py``:
detached, on planned ports, found again through ``cluster.json``), it is a child of the
caller, on a port the OS picks unless one is given, and its addresses come from the lines
it prints when ready (``node/server.py``: ``... metrics on HOST:PORT`` or ``off``,
``... console on HOST:PORT`` when enabled, ``... remoting on HOST:PORT``, then ``... ready
on HOST:PORT``)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from node.port_holds import hold_port_when_free, start_with_holds

START_TIMEOUT_S = 30.0
METRICS_PORT_SET = re.compile(r"^\s*metrics\s*=", re.MULTILINE)  # [ports] metrics = N
# Where ``python -m node`` (and a module in the checkout, such as a test's planted bug)
# is found: the directory holding the packages.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class NodeProcess:
    process: subprocess.Popen
    address: str  # host:port of the client port
    data_dir: str
    metrics: str = ""  # host:port of /metrics, "" when it is off
    log_path: str = ""  # where its stderr goes
    remoting: str = ""  # host:port of the RocketMQ remoting port
    console: str = ""  # host:port of the web console, "" when it is off

    def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def sigterm(self) -> int:
        """A clean stop; its exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; nothing if it has exited already."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start_node_process(
    data_dir: str,
    config_toml: str | None = None,
    *,
    port: int = 0,
    timeout_s: float = START_TIMEOUT_S,
    log_path: str | None = None,
    holds: Sequence[socket.socket] = (),
    module: str = "node",
) -> NodeProcess:
    """``python -m <module>`` (the node's entry point) on ``data_dir``, returned once it is
    ready. ``config_toml`` is written beside the data directory (``<data_dir>.toml``) and
    passed as ``--config``. ``port``: the client port (0: one the OS picks; a restart passes
    the one it had), held until the node binds it (``node/port_holds.py``), as are
    ``holds``, the ports ``config_toml`` names. The node's stderr is appended to
    ``log_path``, by default ``<data_dir>.log``; a start that fails quotes its end."""
    holds = list(holds)
    if port:
        holds.append(hold_port_when_free("127.0.0.1", port))
    os.makedirs(data_dir, exist_ok=True)
    beside = os.path.normpath(data_dir)  # <data_dir>.toml, <data_dir>.log
    command = [sys.executable, "-m", module, "--data", data_dir, "--port", str(port)]
    if "remoting" not in (config_toml or ""):  # the default, 10911, would be every node's
        command += ["--remoting-port", "0"]
    if not METRICS_PORT_SET.search(config_toml or ""):  # as would 5557, /metrics's default
        command += ["--metrics-port", "0"]
    if config_toml is not None:
        config = beside + ".toml"
        with open(config, "w", encoding="utf-8") as f:
            f.write(config_toml)
        command += ["--config", config]
    log_path = log_path or beside + ".log"
    with open(log_path, "a", encoding="utf-8") as stderr:  # the child has its own copy
        process = start_with_holds(
            command, holds, cwd=PACKAGE_ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    deadline = time.monotonic() + timeout_s
    metrics = remoting = console = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if " metrics on " in line:
            metrics = line.rsplit(" ", 1)[1].strip().removeprefix("off")
        if " remoting on " in line:
            remoting = line.rsplit(" ", 1)[1].strip()
        if " console on " in line:
            console = line.rsplit(" ", 1)[1].strip()
        if " ready on " in line:
            address = line.rsplit(" ", 1)[1].strip()
            # Read the rest of its output, so that it never blocks on a full pipe.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return NodeProcess(process, address, data_dir, metrics, log_path, remoting, console)
    process.kill()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        log_end = f.read()[-3000:]
    raise RuntimeError(
        f"node in {data_dir} did not start (exit {process.wait()}); its log ends:\n{log_end}"
    )
