"""``python -m ferrymq.cli``: the ``ferrymq`` command."""

from __future__ import annotations

import sys

from ferrymq.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
