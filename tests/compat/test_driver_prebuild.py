"""``make test`` builds the official clients' drivers beside its tests
(``--prebuild-drivers``, tests/conftest.py; ``python -m tests.support.clients prebuild``):
a build that cannot be done is reported and the others go on, and a session that ends
while a build runs leaves no build process behind. Fake toolchains on an otherwise empty
PATH stand in for Java, Maven, Go and Node.js, in a cache of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ferrymq.launcher.polling import until
from tests.support.clients import PREBUILD_ORDER, ROOT

# A plugin for the pytest session below: its end waits until the fake mvn runs, so that
# the session ends while a build is under way.
WAIT_FOR_BUILD = """
import os, pytest
from ferrymq.launcher.polling import until

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    until(lambda: os.path.exists(os.environ["FAKE_MVN_PID"]), 60, "the fake mvn to run")
"""


def environment(tmp_path: Path, tools: dict[str, str]) -> dict[str, str]:
    """An environment whose PATH holds only ``tools`` (name: shell script body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {
        **os.environ,
        "PATH": str(bin_dir),
        "FERRYMQ_CLIENTS_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }


def test_prebuild_reports_each_driver_it_cannot_build_and_goes_on(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.clients", "prebuild"],
        cwd=ROOT,
        env=environment(tmp_path, {}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == list(PREBUILD_ORDER)
    assert all("official client unavailable" in line for line in lines), lines
    assert "java not found on PATH" in lines[0]
    assert "go not found on PATH" in lines[PREBUILD_ORDER.index("go-grpc")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_session_that_ends_mid_build_leaves_no_build_running(tmp_path):
    pid_file = tmp_path / "mvn.pid"
    env = environment(
        tmp_path,
        {
            "java": "exit 0",
            "javac": "exit 0",
            # Its pid lands whole (a rename), then it "builds" until it is killed.
            "mvn": f"echo $$ > {pid_file}.part\n/bin/mv {pid_file}.part {pid_file}\n"
            "exec /bin/sleep 600",
        },
    )
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "wait_for_build.py").write_text(WAIT_FOR_BUILD)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{plugin_dir}"
    env["FAKE_MVN_PID"] = str(pid_file)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "wait_for_build",
            "--prebuild-drivers",
            "--collect-only",  # the session alone: it starts and ends, running no test
            "tests/compat/test_driver_prebuild.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    mvn = int(pid_file.read_text())
    until(lambda: not _alive(mvn), 10, "the fake mvn to be killed with the session")
    assert (tmp_path / "cache" / "prebuild.log").exists()
