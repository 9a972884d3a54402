"""Running the official rocketmq-python-client in a process of its own (see
``official_client_runner.py``): the scenario goes in as JSON, its events come back as JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).parent / "official_client_runner.py"


def run_official_at(
    endpoint: str,
    home: Path,
    scenario: dict,
    timeout_s: float = 90,
    env: dict[str, str] | None = None,
) -> list[dict]:
    """Run one scenario against ``endpoint`` to its end; its JSON lines, the last ``done``.
    ``env`` adds environment variables (e.g. ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``)."""
    environment = dict(os.environ, HOME=str(home), **(env or {}))
    completed = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps({"endpoint": endpoint, **scenario}),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=environment,
    )
    events = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    log = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no client log)"
    assert events and events[-1]["event"] == "done", (events, completed.stderr[-3000:], tail)
    return events
