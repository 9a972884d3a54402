"""Getting from a fresh clone and a system Python to a run: the project's ``.venv`` with
the ``bench`` extra, and the peers' Debian packages. Standard library only, since it runs
before any of that exists. Its output goes to stderr: with ``--json`` stdout is the JSON.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from deploy import debian_packages

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
            debian_packages.install(["python3-venv"])
            if _run([sys.executable, "-m", "venv", os.path.join(REPO, ".venv")]) != 0:
                raise SystemExit("bench.peers: could not create .venv")
        _run([VENV_PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    install = [VENV_PYTHON, "-m", "pip", "install", "--quiet", "-e", f"{REPO}[bench]"]
    if not venv_ready() and _run(install) != 0:
        raise SystemExit("bench.peers: pip install -e '.[bench]' failed")
    os.chdir(REPO)
    env = {**os.environ, BOOTSTRAPPED: "1"}
    os.execve(VENV_PYTHON, [VENV_PYTHON, "-m", "bench.peers", *argv], env)


def ensure_debian_packages(binaries: dict[str, str]) -> dict[str, str]:
    """``{package: binary path}`` → ``{package: why it is unavailable}`` for those whose
    binary is still missing after installing what was missing."""
    missing = [package for package, binary in binaries.items() if not os.path.exists(binary)]
    if not missing:
        return {}
    say(f"bench.peers: installing {' '.join(missing)}")
    error = debian_packages.install(
        missing, lambda: all(os.path.exists(binaries[p]) for p in missing)
    )
    return {
        package: error or f"{binaries[package]} not found after apt-get install {package}"
        for package in missing
        if not os.path.exists(binaries[package])
    }
