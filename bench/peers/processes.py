"""One registry for every process the peer benchmark starts, so that none outlives it.

Each process is started in a session (process group) of its own and with a marker in its
environment. Teardown sends SIGTERM to every group, waits, SIGKILLs what is left, and then
sweeps ``/proc`` for any process still carrying the marker: servers that daemonize (epmd,
say) leave their group but not their environment. Data directories made through the
registry are removed last. Teardown blocks SIGINT/SIGTERM while it runs and never raises.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

MARKER = "FERRYMQ_BENCH_PEERS_RUN"
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@dataclass
class Started:
    """One process group the registry owns."""

    name: str
    pid: int  # also the process group id (each starts a session of its own)
    process: subprocess.Popen | None  # None for processes started elsewhere (adopted)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a process, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[2])


def live_members(pgid: int) -> list[int]:
    """Processes of a group that are not zombies (a zombie left to an init that does not
    reap still counts as a group member for ``killpg``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def marked_processes(token: str) -> list[int]:
    """Live processes (not this one) whose environment carries ``MARKER=token``."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environment = f.read().split(b"\0")
        except OSError:
            continue
        stat = _proc_stat(int(entry))
        if needle in environment and stat is not None and stat[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


KILL_WAIT_S = 10.0  # for killed processes to vanish


class ProcessRegistry:
    """Processes and directories to remove, whatever happens: use as a context manager."""

    def __init__(self, label: str = "peers", grace_s: float = 10.0) -> None:
        self.label = label
        self.grace_s = grace_s
        self.token = secrets.token_hex(8)
        self.started: list[Started] = []
        self.directories: list[str] = []
        self._previous_marker: str | None = None

    # ---- what the registry owns ----------------------------------------------------
    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment plus the marker (and ``extra``)."""
        return {**os.environ, MARKER: self.token, **(extra or {})}

    def make_dir(self, prefix: str) -> str:
        """A fresh temporary directory, removed at teardown."""
        directory = tempfile.mkdtemp(prefix=f"ferrymq-bench-{prefix}-")
        self.directories.append(directory)
        return directory

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        log_path: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> subprocess.Popen:
        """Start ``argv`` in a process group of its own, output to ``log_path``."""
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self.environment(env),
                start_new_session=True,
            )
        self.started.append(Started(name, process.pid, process))
        return process

    def adopt(self, name: str, pid: int) -> None:
        """A process started elsewhere in a session of its own (a ferrymq node)."""
        self.started.append(Started(name, pid, None))

    # ---- teardown --------------------------------------------------------------------
    def stop_all(self) -> None:
        """SIGTERM every group, SIGKILL after ``grace_s``, sweep the marker, remove the
        directories. Never raises; Ctrl-C and SIGTERM wait until it is done."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self._signal_groups(signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._signal_groups(signal.SIGKILL)
            for pid in marked_processes(self.token):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for started in self.started:
                if started.process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        started.process.wait(timeout=5)
            # SIGKILL is delivered, not awaited: gone means gone when this returns.
            deadline = time.monotonic() + KILL_WAIT_S
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.started.clear()
            for directory in self.directories:
                shutil.rmtree(directory, ignore_errors=True)
            self.directories.clear()
        except Exception as error:  # teardown must go on to the caller's cleanup
            print(f"teardown of {self.label}: {error!r}", file=sys.stderr, flush=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _signal_groups(self, signum: int) -> None:
        for started in reversed(self.started):
            if started.process is not None:
                started.process.poll()  # reap our own child if it has exited
            if live_members(started.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(started.pid, signum)

    def _alive(self) -> bool:
        for started in self.started:
            if started.process is not None:
                started.process.poll()
        return any(live_members(s.pid) for s in self.started) or bool(marked_processes(self.token))

    def __enter__(self) -> ProcessRegistry:
        self._previous_marker = os.environ.get(MARKER)
        # Children started by other code (ferrymq's cluster_up) inherit the marker too.
        os.environ[MARKER] = self.token
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop_all()
        finally:
            if self._previous_marker is None:
                os.environ.pop(MARKER, None)
            else:
                os.environ[MARKER] = self._previous_marker
