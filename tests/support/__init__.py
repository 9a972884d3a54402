"""What the tests share, by job; test modules import these, never each other.

- ``nodes``: real node processes (``start_node``, the tests' store sizes)
- ``rpc``: raw gRPC calls against a node (``stubs``, ``create_topic``, ``message``, ``pull``,
  ``create_group``, ``receive``, ``ack``)
- ``cluster``: clusters of node processes started by ``ferrymq.launcher.cluster``
  (``SMALL_STORE``, ``kill``, ``restart``, ``stop_all``, ``master_of``, ...)
- ``stores``: small store configurations, the consistency audit of a store's files, and
  reading or damaging a stopped node's CommitLog
- ``timers``: the timer service in-process with an injected clock
- ``metrics``: scraping a node's /metrics; ``prometheus``: the repo's alert rules and
  dashboards, and a real Prometheus
- ``official_client``: the official RocketMQ client in a process of its own
- ``tls_certs``: a throwaway PKI; ``proto_strategies``: Hypothesis strategies for protobuf
  messages; ``disk``: free-space needs and a real small tmpfs

Programs the tests run in processes of their own: ``official_client_runner.py``,
``store_crash_writer.py``, ``planted_bug_node.py`` (``python -m tests.support.planted_bug_node``).
Fixtures shared by many modules are in tests/conftest.py.
"""

import os

# The checkout: the working directory of the processes the tests start.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
