"""``python -m node``: run one broker node (same as ``ferrymq node``)."""

from __future__ import annotations

import sys

from node.run import main

if __name__ == "__main__":
    sys.exit(main())
