"""A node process that never answers: it takes its config and waits to be stopped, as a
node stuck before its listeners would. ``python -m tests.support.silent_node --config ...``
stands in for ``python -m node --config ...`` (``ferrymq.launcher.cluster.NODE_MODULE``) in
``tests/cli/test_wait_ready.py``: a cluster that never becomes ready."""

from __future__ import annotations

import signal

if __name__ == "__main__":
    signal.pause()  # until a signal ends it (SIGTERM's default action)
