"""Replication between a master and its slaves (``ha/``): the link, the role, SYNC
acknowledgements, epochs, rollback files."""
