"""Getting from a fresh clone and a system Python to a run: the project's ``.venv`` with
the ``bench`` extra, and the peers' Debian packages. Standard library only, since it runs
before any of that exists. Its output goes to stderr: with ``--json`` stdout is the JSON.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
# The peers' clients, the chart, and what a ferrymq node imports.
NEEDED_MODULES = (
    "nats",
    "redis",
    "pika",
    "confluent_kafka",
    "rocketmq",
    "matplotlib",
    "grpc",
    "pysyncobj",
    "crc32c",
)
BOOTSTRAPPED = "FERRYMQ_BENCH_PEERS_BOOTSTRAPPED"
POLICY_RC_D = "/usr/sbin/policy-rc.d"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def missing_modules() -> list[str]:
    return [name for name in NEEDED_MODULES if importlib.util.find_spec(name) is None]


def _run(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run a set-up command with its output on stderr; its exit status."""
    say(f"$ {' '.join(argv)}")
    return subprocess.run(argv, stdout=sys.stderr, stderr=sys.stderr, env=env).returncode


def venv_ready() -> bool:
    """Whether ``.venv`` already imports every needed module (then nothing to install)."""
    probe = f"import {', '.join(NEEDED_MODULES)}"
    return subprocess.run([VENV_PYTHON, "-c", probe], capture_output=True).returncode == 0


def ensure_environment(argv: list[str]) -> None:
    """Return if this interpreter has every module the run needs; otherwise create or
    update ``.venv`` (``pip install -e '.[bench]'``, as the Makefile does) and re-execute
    ``python -m bench.peers`` there. Never returns in that case."""
    missing = missing_modules()
    if not missing:
        return
    if os.environ.get(BOOTSTRAPPED):
        raise SystemExit(f"bench.peers: still missing {missing} after installing into .venv")
    say(f"bench.peers: {', '.join(missing)} not importable here; using .venv")
    if not os.path.exists(VENV_PYTHON):
        if _run([sys.executable, "-m", "venv", os.path.join(REPO, ".venv")]) != 0:
            # Debian's python3 needs python3-venv for ensurepip.
            install_debian_packages(["python3-venv"])
            if _run([sys.executable, "-m", "venv", os.path.join(REPO, ".venv")]) != 0:
                raise SystemExit("bench.peers: could not create .venv")
        _run([VENV_PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    install = [VENV_PYTHON, "-m", "pip", "install", "--quiet", "-e", f"{REPO}[bench]"]
    if not venv_ready() and _run(install) != 0:
        raise SystemExit("bench.peers: pip install -e '.[bench]' failed")
    os.chdir(REPO)
    env = {**os.environ, BOOTSTRAPPED: "1"}
    os.execve(VENV_PYTHON, [VENV_PYTHON, "-m", "bench.peers", *argv], env)


def install_debian_packages(packages: list[str]) -> str:
    """``apt-get install`` (non-interactive, services not started); "" or why it failed."""
    if not packages:
        return ""
    if os.geteuid() != 0:
        return f"not root: cannot apt-get install {' '.join(packages)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Keep the packages' system services from starting: the benchmark runs its own.
    planted = not os.path.exists(POLICY_RC_D)
    if planted:
        with open(POLICY_RC_D, "w", encoding="ascii") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(POLICY_RC_D, 0o755)
    try:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
        if _run(install, env) == 0:
            return ""
        _run(["apt-get", "update", "-q"], env)
        if _run(install, env) == 0:
            return ""
        return f"apt-get install {' '.join(packages)} failed"
    finally:
        if planted:
            os.remove(POLICY_RC_D)


def ensure_debian_packages(binaries: dict[str, str]) -> dict[str, str]:
    """``{package: binary path}`` → ``{package: why it is unavailable}`` for those whose
    binary is still missing after installing what was missing."""
    missing = [package for package, binary in binaries.items() if not os.path.exists(binary)]
    if not missing:
        return {}
    say(f"bench.peers: installing {' '.join(missing)}")
    error = install_debian_packages(missing)
    return {
        package: error or f"{binaries[package]} not found after apt-get install {package}"
        for package in missing
        if not os.path.exists(binaries[package])
    }
