"""What replication reports about this node's broker group, read by the metrics at
scrape time (``node/metrics.py``).

An immutable record, built on the node's event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplicationStatus:
    """``slave_lag_bytes`` is filled on the master only: per slave node id, the master's
    CommitLog max offset minus the offset the slave acknowledged (RocketMQ's
    ``rocketmq_broker_commitlog_diff``). ``confirmed_offset`` is the CommitLog offset that
    the in-sync set holds (None: everything written, as on a standalone node).
    """

    role: str = "master"
    epoch: int = 0
    insync_replicas: int = 1
    min_insync_replicas: int = 1
    replicas: int = 1
    confirmed_offset: int | None = None
    slave_lag_bytes: Mapping[str, int] = field(default_factory=dict)
