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
    unclean_election: bool = False
