"""The routing formats: how the Raft log's commands and the snapshots are written.

- ``PICKLED`` (1): pysyncobj pickles the command dataclasses and the ``RoutingState``
  (every release up to 0.1.0 writes only this).
- ``PROTOBUF`` (2): ``routing/encoding.py``, the schema ``proto/ferrymq/routing.proto``.

A node reads every format up to ``NEWEST_FORMAT``, so it follows any log. It *writes* the
format the routing state names (``RoutingState.routing_format``), which starts at
``PICKLED`` and moves on only through a ``SetRoutingFormat`` command, refused until every
registered node reads the new format: during a rolling upgrade the older nodes can still
follow the log, and a downgrade is possible until the operator finalizes the upgrade.
"""

PICKLED = 1
PROTOBUF = 2
NEWEST_FORMAT = PROTOBUF
