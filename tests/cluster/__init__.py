"""Across layers: clusters of real node processes (routing, replication and failover,
internal links)."""
