"""One node process for a benchmark: a temporary data directory, a port the OS picks, and
the address read from the node's ready line."""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_S = 60


def start_node(data_dir: str, config_toml: str | None = None) -> tuple[subprocess.Popen, str]:
    """The node's process and its client address; ``config_toml`` is written beside the
    data directory and passed as ``--config``."""
    command = [sys.executable, "-m", "node", "--data", data_dir, "--port", "0"]
    command += ["--remoting-port", "0"]
    if config_toml is not None:
        config = data_dir + ".toml"
        with open(config, "w", encoding="utf-8") as f:
            f.write(config_toml)
        command += ["--config", config]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if " ready on " in line:
            return process, line.rsplit(" ", 1)[1].strip()
    process.kill()
    raise RuntimeError("the node did not start")
