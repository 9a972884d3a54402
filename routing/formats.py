"""The routing formats: how the Raft log's commands and the snapshots are written.

- ``PICKLED`` (1): pysyncobj pickles the command dataclasses and the ``RoutingState``
  (every release up to 0.1.0 writes only this).
- ``PROTOBUF`` (2): ``routing/encoding.py``, the schema ``proto/ferrymq/routing.proto``.

A node reads every format up to ``NEWEST_FORMAT``, so it follows any log. It *writes* the
format the routing state names (``RoutingState.routing_format``), which starts at
``PICKLED`` and moves on only through a ``SetRoutingFormat`` command, refused until every
registered node reads the new format: during a rolling upgrade the older nodes can still
follow the log, and a downgrade is possible until the operator finalizes the upgrade.
While a node of an older release may follow it (``RoutingState.awaits_finalize``),
commands are also written as that release wrote them (no request id), and nothing it
cannot read is created. A cluster whose nodes all read the newest format from the start
is moved on by its controller at once (``routing/controller.py``).
"""

PICKLED = 1
PROTOBUF = 2
NEWEST_FORMAT = PROTOBUF

# The message types a node of 0.1.0 knows: a topic of another type, pickled into the log,
# would stop its Raft thread, so none is created while such a node may follow the log.
PICKLED_MESSAGE_TYPES = frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION"})
