"""Recorded releases (``releases.toml``) built from git history, each in a virtualenv of its
own, so that a node of that release can run beside this checkout's (the rolling upgrade
drill, ``chaos/upgrade_drill.py``).

A release is the tree of its commit (``git archive``), installed editable into its own
``.venv`` (which compiles its C extensions in place) under the user's cache; a finished
build is kept and found again by its commit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ferrymq.launcher.cluster import NodeRuntime

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ferrymq-releases"
BUILT = ".built"  # written last: a directory without it is an interrupted build


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    date: str


class ReleaseError(RuntimeError):
    """A release is not recorded, or its build failed (the message says which step)."""


def recorded() -> list[Release]:
    """Every release of ``releases.toml``, oldest first."""
    releases = tomllib.loads((ROOT / "releases.toml").read_text())["release"]
    return [Release(r["version"], r["commit"], r["date"]) for r in releases]


def release(version: str) -> Release:
    for each in recorded():
        if each.version == version:
            return each
    raise ReleaseError(f"release {version} is not in releases.toml")


def _run(argv: list[str], step: str, cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"{step} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def build(version: str, cache: Path = CACHE) -> NodeRuntime:
    """The runtime of ``version``: its tree and virtualenv, built on first use."""
    chosen = release(version)
    home = cache / f"{chosen.version}-{chosen.commit[:12]}"
    if not (home / BUILT).exists():
        shutil.rmtree(home, ignore_errors=True)
        source = home / "src"
        source.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", chosen.commit],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise ReleaseError(f"git archive {chosen.commit} failed: {archive.stderr[-500:]!r}")
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
        _run([sys.executable, "-m", "venv", str(home / ".venv")], "venv")
        python = str(home / ".venv" / "bin" / "python")
        _run([python, "-m", "pip", "install", "--quiet", "-e", str(source)], "pip install")
        (home / BUILT).write_text(chosen.commit)
    return NodeRuntime(str(home / ".venv" / "bin" / "python"), str(home / "src"))
