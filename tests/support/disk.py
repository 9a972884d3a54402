"""Disk space for the suite: how much it needs free to start (``pytest_sessionstart`` in
tests/conftest.py refuses less), and a real small tmpfs for tests of a full disk (the
``tmpfs_disk`` fixture)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The most a run has on disk at once is about 2.4 GB with make test's two workers (1.1 GB
# on one; sampled every 2 s through a whole run): node segments are reserved with
# fallocate, so they take their space at creation.
FREE_DISK_NEEDED = 3 << 30  # 3 GiB


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
