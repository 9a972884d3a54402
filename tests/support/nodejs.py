"""The official Node.js client, ``rocketmq-client-nodejs`` 1.0.8 from npm, for the tests that
run it (``official_nodejs.js``) in a ``node`` process of its own.

``nodejs_client()`` installs it once into ``.cache/`` at the top of the checkout
(gitignored) and reuses that install afterwards: an install is built in a directory of its
own, checked by loading the package with ``node``, and only then renamed into place, so a
run that died half-way leaves nothing that looks installed. When ``node``, ``npm`` or the
npm registry is missing the test fails with one line that says so: a machine that cannot
run the client must not pass by skipping it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PACKAGE = "rocketmq-client-nodejs"
VERSION = "1.0.8"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / f"{PACKAGE}-{VERSION}"
RUNNER = Path(__file__).parent / "official_nodejs.js"
INSTALL_TIMEOUT_S = 600


def _installed(where: Path) -> bool:
    manifest = where / "node_modules" / PACKAGE / "package.json"
    try:
        return (
            json.loads(manifest.read_text())["version"] == VERSION
            and (where / ".complete").exists()
        )
    except (OSError, ValueError, KeyError):
        return False


def _fail(reason: str) -> None:
    pytest.fail(f"cannot run the official Node.js client ({PACKAGE}@{VERSION}): {reason}", False)


def nodejs_client() -> Path:
    """The directory whose ``node_modules`` holds the client (installed on first use)."""
    if _installed(CACHE):
        return CACHE
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            _fail(f"`{tool}` is not on PATH")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / f".{PACKAGE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing it
        if _installed(CACHE):
            return CACHE
        building = CACHE.with_name(f"{CACHE.name}.partial-{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        (building / "package.json").write_text('{"private": true}\n')
        try:
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", f"{PACKAGE}@{VERSION}"],
                cwd=building,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            _fail(f"`npm install` took more than {INSTALL_TIMEOUT_S} s")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            _fail(f"`npm install` exited {done.returncode}: {last}")
        check = subprocess.run(
            ["node", "-e", f"require('{PACKAGE}')"],
            cwd=building,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["(no output)"])[-1]
            _fail(f"the installed package does not load: {last}")
        (building / ".complete").touch()
        shutil.rmtree(CACHE, ignore_errors=True)
        building.rename(CACHE)
    return CACHE


def start_nodejs_at(endpoint: str, home: Path, scenario: dict) -> subprocess.Popen:
    """Start one scenario against ``endpoint``; ``events_of`` waits for its end."""
    environment = dict(os.environ, HOME=str(home), ROCKETMQ_NODEJS_CLIENT=str(nodejs_client()))
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile("w+", dir=home) as spec:
        spec.write(json.dumps({"endpoint": endpoint, **scenario}))
        spec.seek(0)
        return subprocess.Popen(
            ["node", str(RUNNER)],
            stdin=spec,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )


def events_of(started: subprocess.Popen, home: Path, timeout_s: float = 90) -> list[dict]:
    """A started scenario's JSON lines, the last ``done``. The client logs to
    ``$HOME/logs/rocketmq``: a failure quotes the end of that log."""
    try:
        stdout, stderr = started.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        started.kill()
        stdout, stderr = started.communicate()
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    log = home / "logs" / "rocketmq" / "rocketmq_client_nodejs.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no client log)"
    assert events and events[-1]["event"] == "done", (events, stderr[-3000:], tail)
    return events


def run_nodejs_at(endpoint: str, home: Path, scenario: dict, timeout_s: float = 90) -> list[dict]:
    """Run one scenario against ``endpoint`` to its end; its JSON lines, the last ``done``."""
    return events_of(start_nodejs_at(endpoint, home, scenario), home, timeout_s)
