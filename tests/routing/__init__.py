"""Raft-replicated routing (``routing/``): the state machine and the controller, in-
process."""
