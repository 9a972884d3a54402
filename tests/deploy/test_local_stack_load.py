"""The dashboards' load (``deploy.local_stack.Load``) lives through a node that does not
answer: the metrics tests kill nodes under it, and a subscribe that met a dead node ended
its thread with an unhandled exception (a warning in the tests, no more load after it)."""

from __future__ import annotations

import socket

from deploy.local_stack import Load
from ferrymq.launcher.polling import until


def test_the_load_keeps_going_when_its_first_subscribe_meets_no_node():
    with socket.socket() as nobody:
        nobody.bind(("127.0.0.1", 0))  # held and never listening: every connection refused
        host, port = nobody.getsockname()
        load = Load(f"{host}:{port}", pause_s=0.01).start()
        try:
            thread = load._thread
            assert thread is not None
            until(lambda: len(load.errors) >= 3 or not thread.is_alive(), 30, "failed rounds")
            assert thread.is_alive(), "the load's thread ended"
        finally:
            load.stop()
