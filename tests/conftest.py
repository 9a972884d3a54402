"""Shared pytest fixtures. Keep this file small; add fixtures by appending."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

# The most a run has on disk at once is about 1.1 GB (sampled every 2 s through a whole
# run): node segments are reserved with fallocate, so they take their space at creation.
FREE_DISK_NEEDED = 3 << 29  # 1.5 GiB


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to start on a nearly full disk, with one line that says so, instead of
    hundreds of tests failing on "no space to reserve" from the nodes they start."""
    where = session.config.option.basetemp or tempfile.gettempdir()
    while not os.path.isdir(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free
    if free < FREE_DISK_NEEDED:
        pytest.exit(
            f"the tests need {FREE_DISK_NEEDED / 2**30:.1f} GiB free where they write "
            f"({where}); it has {free / 2**30:.2f} GiB",
            returncode=1,
        )


@dataclass
class SmallDisk:
    """A real tmpfs mounted for one test, so ENOSPC comes from the kernel, not a mock."""

    path: Path

    def resize(self, kib: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={kib}k", str(self.path)], check=True)

    def fill(self, name: str = "filler") -> Path:
        """Write a file until the file system refuses a single byte more; delete it to give
        the space back."""
        filler = self.path / name
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in (64 * 1024, 4096, 1):
                while True:
                    try:
                        os.write(fd, b"\xff" * chunk)
                    except OSError:
                        break
        finally:
            os.close(fd)
        return filler

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize


@pytest.fixture
def tmpfs_disk(tmp_path):
    """Factory: ``tmpfs_disk(kib)`` mounts a tmpfs of ``kib`` KiB; unmounted in teardown."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(kib: int) -> SmallDisk:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], check=True
        )
        mounted.append(path)
        return SmallDisk(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="session")
def spark():
    """One local Spark for every Spark test module: starting a JVM costs seconds."""
    from ferrymq.spark.session import build_session

    return build_session("local[2]", "ferrymq-tests")
