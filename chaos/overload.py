"""Overload faults: a node starved of CPU, a host kept busy, a slow disk.

None of them stops or cuts a node: a master under them is alive, and deposing it is a
spurious failover (``spurious_failovers``), which the checker counts as a violation.

- CPU starvation: the node's processes (its own and its routing host) moved into a cgroup
  (v1 ``cpu`` controller) whose quota is a fraction of one core (``cpu.cfs_quota_us``):
  every thread of them stops once the quota of a 100 ms period is spent, as in a
  container at its limit.
- A busy host: processes spinning on every core beside the cluster, at the nodes'
  priority.
- A slow disk: the node's processes moved into a cgroup (v1 ``blkio``) whose writes and reads to the
  data directory's device are throttled (``blkio.throttle.*_iops_device`` and
  ``_bps_device``). Under cgroup v1 the throttle applies to I/O a task submits itself:
  its fsyncs (and reads), not the kernel's background writeback, which is what a flush
  waits for.

Needs root and a cgroup v1 hierarchy with those controllers (``available`` says why not).
Names carry a random suffix; ``Overloads.clear`` moves every process back and removes
every cgroup it made, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field

from ferrymq.launcher.processes import process_tree

CGROUP_ROOT = "/sys/fs/cgroup"
PERIOD_US = 100_000


def available() -> str | None:
    """None when the overload faults can run here, else why not."""
    if os.geteuid() != 0:
        return "overload faults need root (cgroups)"
    for controller, needed in (
        ("cpu", "cpu.cfs_quota_us"),
        ("blkio", "blkio.throttle.write_iops_device"),
    ):
        if not os.path.exists(os.path.join(CGROUP_ROOT, controller, needed)):
            return f"overload faults need the cgroup v1 {controller} controller ({needed})"
    return None


def device_of(path: str) -> str:
    """``major:minor`` of the block device holding ``path``."""
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass
class Overloads:
    """The overloads of one run, applied and cleared by the nemesis's thread."""

    suffix: str = field(default_factory=lambda: secrets.token_hex(2))
    _groups: list[str] = field(default_factory=list)  # cgroup directories made
    _moved: list[tuple[str, int]] = field(default_factory=list)  # (controller, pid)
    _spinners: list[subprocess.Popen] = field(default_factory=list)

    def _group(self, controller: str, name: str) -> str:
        path = os.path.join(CGROUP_ROOT, controller, f"fmq{self.suffix}-{name}")
        os.makedirs(path, exist_ok=True)
        if path not in self._groups:
            self._groups.append(path)
        return path

    def _move(self, controller: str, group: str, pid: int) -> None:
        """``pid`` and its descendants: a cgroup takes one process at a time, and a node's
        routing host is its child (a container would hold both)."""
        for each in process_tree(pid):
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                _write(os.path.join(group, "cgroup.procs"), str(each))
                self._moved.append((controller, each))

    def starve_cpu(self, name: str, pid: int, cores: float) -> None:
        """Process ``pid`` and its children get at most ``cores`` of a core (0.25: 25 ms
        every 100 ms)."""
        group = self._group("cpu", name)
        _write(os.path.join(group, "cpu.cfs_period_us"), str(PERIOD_US))
        _write(os.path.join(group, "cpu.cfs_quota_us"), str(max(1000, int(PERIOD_US * cores))))
        self._move("cpu", group, pid)

    def slow_disk(self, name: str, pid: int, data_dir: str, iops: int, bytes_per_s: int) -> None:
        """The reads and writes of process ``pid`` and its children to ``data_dir``'s
        device: at most ``iops`` operations and ``bytes_per_s`` bytes a second each way."""
        group = self._group("blkio", name)
        device = device_of(data_dir)
        for kind, limit in (("iops", iops), ("bps", bytes_per_s)):
            for way in ("read", "write"):
                _write(
                    os.path.join(group, f"blkio.throttle.{way}_{kind}_device"), f"{device} {limit}"
                )
        self._move("blkio", group, pid)

    def busy_host(self, processes: int) -> None:
        """``processes`` spinning on the CPU until ``clear``."""
        for _ in range(processes):
            spinner = [sys.executable, "-c", "while True: pass"]
            # A session each: in one they would share a scheduling group (autogroups).
            self._spinners.append(subprocess.Popen(spinner, start_new_session=True))

    def clear(self) -> None:
        """Every process back in its controller's root group, the spinners gone, the
        cgroups removed. A process that exited meanwhile is skipped."""
        for spinner in self._spinners:
            spinner.kill()
            spinner.wait()
        self._spinners.clear()
        for controller, pid in self._moved:
            with contextlib.suppress(OSError):  # ESRCH: it is gone (a kill fault)
                _write(os.path.join(CGROUP_ROOT, controller, "cgroup.procs"), str(pid))
        self._moved.clear()
        for group in self._groups:
            with contextlib.suppress(OSError):
                os.rmdir(group)
        self._groups.clear()
