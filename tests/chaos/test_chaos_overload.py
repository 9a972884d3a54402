"""The overload faults on real processes (``chaos.overload``, cgroup v1): a starved
process gets its quota of a core and no more, a slowed one's fsyncs take their throttle,
and ``clear`` gives every process back its host and removes what it made."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from chaos.overload import CGROUP_ROOT, Overloads, available
from ferrymq.launcher.processes import process_tree

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
SPIN = "import time\nwhile True: pass"
FSYNCS = """
import os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
sys.stdin.readline()  # moved into its cgroup by now
started = time.monotonic()
for _ in range(20):
    os.write(fd, b"x" * 4096)
    os.fsync(fd)
print(time.monotonic() - started, flush=True)
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cgroup_of(pid: int, controller: str) -> str:
    with open(f"/proc/{pid}/cgroup") as groups:
        for line in groups:
            _, controllers, path = line.strip().split(":", 2)
            if controller in controllers.split(","):
                return path
    return ""


def test_a_starved_process_gets_its_quota_and_clear_gives_it_back():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    overloads = Overloads()
    try:
        overloads.starve_cpu("spinner", spinner.pid, cores=0.2)
        assert cgroup_of(spinner.pid, "cpu").startswith(f"/fmq{overloads.suffix}")
        before, started = cpu_seconds(spinner.pid), time.monotonic()
        time.sleep(2.0)  # what is measured: the CPU it got in this time
        share = (cpu_seconds(spinner.pid) - before) / (time.monotonic() - started)
        assert share < 0.3, share
    finally:
        overloads.clear()
        made = [n for n in os.listdir(os.path.join(CGROUP_ROOT, "cpu")) if overloads.suffix in n]
        in_root = cgroup_of(spinner.pid, "cpu") == "/"
        spinner.kill()
        spinner.wait()
    assert in_root and made == []


def test_a_slowed_process_waits_for_its_fsyncs(tmp_path):
    def twenty_fsyncs(slow: bool) -> float:
        writer = subprocess.Popen(
            [sys.executable, "-c", FSYNCS, str(tmp_path / "f")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        overloads = Overloads()
        try:
            if slow:
                overloads.slow_disk("writer", writer.pid, str(tmp_path), 10, 1 << 20)
            out, _ = writer.communicate("go\n", timeout=60)
        finally:
            overloads.clear()
        return float(out)

    assert twenty_fsyncs(slow=True) > 1.0 > twenty_fsyncs(slow=False)


def test_a_busy_host_spins_until_cleared():
    overloads = Overloads()
    overloads.busy_host(2)
    spinners = list(overloads._spinners)
    assert all(s.poll() is None for s in spinners)
    overloads.clear()
    assert all(s.poll() is not None for s in spinners)


def test_a_starved_node_is_starved_with_its_children():
    """A node's routing host is its child: starving the node starves both, as a container
    at its limit would (moving only the node left its heartbeats unthrottled)."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {SPIN!r}])\n{SPIN}",
        ]
    )
    overloads = Overloads()
    try:
        deadline = time.monotonic() + 10
        while not (children := process_tree(parent.pid)[1:]):
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        child = children[0]
        overloads.starve_cpu("node", parent.pid, cores=0.2)
        assert cgroup_of(child, "cpu") == cgroup_of(parent.pid, "cpu") != "/"
    finally:
        overloads.clear()
        in_root = cgroup_of(child, "cpu") == "/"
        os.kill(child, 9)
        parent.kill()
        parent.wait()
    assert in_root
