"""``python -m node``: run one broker node (same as ``ferrymq node``)."""

from __future__ import annotations

import sys

from ferrymq.cli import main

if __name__ == "__main__":
    sys.exit(main(["node", *sys.argv[1:]]))
