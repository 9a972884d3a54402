"""The suite refuses a nearly full disk with one clear line (conftest.pytest_sessionstart)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT
from tests.support.disk import FREE_DISK_NEEDED


def run_suite_in(basetemp: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("--basetemp", basetemp, "tests/architecture/test_suite_disk_check.py::test_nothing"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nothing():
    """What the inner runs collect: it passes wherever the check lets the run start."""


def test_a_nearly_full_disk_stops_the_run_before_any_test(tmpfs_disk):
    small = tmpfs_disk(64 * 1024)
    done = run_suite_in(str(small.path / "basetemp"))
    assert done.returncode == 1, done.stdout[-2000:]
    assert f"the tests need {FREE_DISK_NEEDED / 2**30:.1f} GiB free" in done.stdout
    assert "it has 0.06 GiB" in done.stdout
    assert "passed" not in done.stdout


def test_enough_disk_lets_the_run_start(tmpfs_disk):
    roomy = tmpfs_disk(FREE_DISK_NEEDED // 1024 + 1024)  # tmpfs takes no memory until used
    done = run_suite_in(str(roomy.path / "basetemp"))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 passed" in done.stdout
