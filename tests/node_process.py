"""Start and stop real node processes for tests: port 0, a real data directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from node.port_holds import hold_port_when_free, start_with_holds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_STORE = """
[store]
commitlog_segment_bytes = 8388608
consume_queue_entries_per_file = 10000
index_slot_count = 10007
index_entry_count = 40000
"""


@dataclass
class NodeProcess:
    process: subprocess.Popen
    address: str
    data_dir: str
    metrics: str = ""  # host:port of /metrics, "" when it is off
    remoting: str = ""  # host:port of the RocketMQ 4.x remoting port

    def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def sigterm(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


def start_node(
    data_dir: str,
    extra_toml: str = "",
    timeout_s: float = 30,
    port: int = 0,
    log_path: str | None = None,
    holds: Sequence[socket.socket] = (),
) -> NodeProcess:
    """A node on ``port`` (0: one the OS picks; a restart passes the port it had). Its
    log (stderr) is appended to ``log_path``, by default ``<data_dir>.log`` beside the
    data directory; a start that fails quotes its end. ``holds``: holds on the ports
    ``extra_toml`` names (``node/port_holds.py``), handed to the node and closed here;
    ``port``, when given, is held the same way."""
    holds = list(holds)
    if port:
        holds.append(hold_port_when_free("127.0.0.1", port))
    os.makedirs(data_dir, exist_ok=True)
    config = os.path.join(data_dir, "..", os.path.basename(data_dir) + ".toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(TEST_STORE + extra_toml)
    command = [sys.executable, "-m", "node", "--config", config, "--data", data_dir]
    command += ["--port", str(port)]
    if "remoting" not in extra_toml:  # the default, 10911, would be every test node's
        command += ["--remoting-port", "0"]
    log_path = log_path or os.path.normpath(data_dir) + ".log"
    with open(log_path, "a", encoding="utf-8") as stderr:  # the child has its own copy
        process = start_with_holds(
            command, holds, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    deadline = time.monotonic() + timeout_s
    metrics = remoting = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if " metrics on " in line:
            metrics = line.rsplit(" ", 1)[1].strip().removeprefix("off")
        if " remoting on " in line:
            remoting = line.rsplit(" ", 1)[1].strip()
        if " ready on " in line:
            address = line.rsplit(" ", 1)[1].strip()
            return NodeProcess(process, address, data_dir, metrics, remoting)
    process.kill()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        log_end = f.read()[-3000:]
    raise RuntimeError(
        f"node in {data_dir} did not start (exit {process.wait()}); its log ends:\n{log_end}"
    )
