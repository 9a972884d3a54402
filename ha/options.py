"""What an operator chooses about a broker group's replication (``[replication]`` in
``node.toml``, parsed by ``node/config.py``): how a put is acknowledged and when a slave
leaves the in-sync set.

Immutable records, read by any thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ReplicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"


@dataclass(frozen=True)
class ReplicationOptions:
    mode: ReplicationMode = ReplicationMode.SYNC
    min_insync_replicas: int = 2
    ack_timeout_ms: int = 3000
    max_lag_ms: int = 15_000
    max_lag_bytes: int = 256 << 20
    # A SYNC master whose in-sync replicas lack what it had this long ago refuses new
    # writes with SYSTEM_BUSY (nothing written) until they catch up: a master never takes
    # more than its slaves confirm (ha/master.py, EndTimeline).
    max_backlog_ms: int = 1000
    unclean_election: bool = False
