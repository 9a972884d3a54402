"""Installing Debian packages for tests, demos and benchmarks (Prometheus, the peers of
``bench.peers``), the one way every caller does it:

- non-interactive, and the packages' system services never started: every server here is
  a child process with its own config, data directory and port;
- one install at a time across processes: two at once (``make test``'s workers) would meet
  on dpkg's lock, which apt-get does not wait for. The second waits on ``INSTALL_LOCK``,
  then finds what it needed installed (``present``) and installs nothing.

Standard library only: ``bench.peers`` runs it before the project's virtualenv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

INSTALL_LOCK = "/var/lock/ferrymq-apt-install.lock"
POLICY_RC_D = "/usr/sbin/policy-rc.d"  # Debian asks it before starting a package's service
INSTALL_TIMEOUT_S = 900


def install(
    packages: list[str],
    present: Callable[[], bool] = lambda: False,
    output: IO[str] | int = sys.stderr,
) -> str:
    """``apt-get install`` ``packages`` unless ``present()`` is true once no other install
    runs; "" or why it failed. apt-get's own output goes to ``output``."""
    if not packages:
        return ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"not root with apt-get: cannot install {' '.join(packages)}"
    with open(INSTALL_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if present():
            return ""
        with _services_not_started():
            return _apt_get_install(packages, output)


def _apt_get_install(packages: list[str], output: IO[str] | int) -> str:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def run(argv: list[str]) -> bool:
        if output is sys.stderr:
            print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
        try:
            done = subprocess.run(
                argv, stdout=output, stderr=output, env=env, timeout=INSTALL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    install_argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    # The package lists may be missing (a fresh image) or stale: on a failure, update
    # them and install again.
    if run(install_argv) or (run(["apt-get", "update", "-q"]) and run(install_argv)):
        return ""
    return f"apt-get install {' '.join(packages)} failed"


@contextmanager
def _services_not_started() -> Iterator[None]:
    """A ``policy-rc.d`` that refuses every service start, for the block's duration (left
    alone when the host already has one)."""
    planted = not os.path.exists(POLICY_RC_D)
    if planted:
        with open(POLICY_RC_D, "w", encoding="ascii") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(POLICY_RC_D, 0o755)
    try:
        yield
    finally:
        if planted:
            os.remove(POLICY_RC_D)
