"""A node process whose lite-expiry clock the test moves: ``python -m
tests.support.skewed_clock_node --data DIR ...`` is ``python -m node --data DIR ...`` with
``node.lite_expiry.wall_ms`` ahead by the milliseconds written in ``<DIR>.skew-ms`` (none
or unreadable: 0), read at every check. Store times stay real, so a test makes messages
minutes old without waiting minutes (``tests/node/test_lite_expiry_node.py``).

The node's own code has no such path: this module patches it in its own process only.
"""

from __future__ import annotations

import os
import sys
import time

from node import lite_expiry
from node.run import main


def skew_file(data_dir: str) -> str:
    return os.path.normpath(data_dir) + ".skew-ms"


def plant(path: str) -> None:
    def skewed_ms() -> int:
        try:
            with open(path, encoding="utf-8") as f:
                skew = int(f.read().strip() or 0)
        except (OSError, ValueError):
            skew = 0
        return time.time_ns() // 1_000_000 + skew

    lite_expiry.wall_ms = skewed_ms


if __name__ == "__main__":
    plant(skew_file(sys.argv[sys.argv.index("--data") + 1]))
    sys.exit(main())
