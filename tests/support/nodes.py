"""Real node processes for tests: a port the OS picks, a real data directory, and store
files small enough for a suite that starts hundreds of nodes. Starting and stopping is
``ferrymq.launcher.node_process`` (the benchmarks' too); this adds the tests' store sizes.
The fixtures built on it (``node``, ``nodes``, ``module_nodes``) are in tests/conftest.py."""

from __future__ import annotations

from ferrymq.launcher.node_process import NodeProcess, start_node_process

__all__ = ["TEST_STORE", "NodeProcess", "start_node"]

TEST_STORE = """
[store]
commitlog_segment_bytes = 8388608
consume_queue_entries_per_file = 10000
index_slot_count = 10007
index_entry_count = 40000
"""


def start_node(data_dir: str, extra_toml: str = "", **options) -> NodeProcess:
    """A node on ``data_dir`` with the tests' store sizes and ``extra_toml`` after them;
    ``options`` as ``start_node_process`` takes them (``port``: a restart passes the port
    it had; ``log_path``: by default ``<data_dir>.log``; ``holds``; ``timeout_s``)."""
    return start_node_process(data_dir, TEST_STORE + extra_toml, **options)
