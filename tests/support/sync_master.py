"""A SYNC master over a real store, in-process: ``ReplicationMaster`` on a hand-driven clock,
wired to the store's appends as ``ha.role`` wires it. Its slaves are links opened on it,
acknowledging with ``record_ack`` as ``_read_acks`` does for a frame off the wire."""

from __future__ import annotations

from ha.epochs import EpochHistory
from ha.master import ReplicationMaster
from store.message_store import MessageStore
from tests.support.manual_clock import ManualClock


def master_of(store: MessageStore, clock: ManualClock, *, sync: bool = True, min_insync: int = 2):
    epochs = EpochHistory(store.config.data_dir)
    epochs.append(1, 0)
    master = ReplicationMaster(
        store,
        epochs,
        "m",
        "group-1",
        "secret",
        sync=sync,
        min_insync_replicas=min_insync,
        is_member=lambda node_id: True,
        clock=lambda: clock.now,
        call_later=clock.call_later,
    )
    store.add_append_listener(master.on_appended)  # as ``ha.role`` wires it
    store.set_log_writer(master.log_writer())
    return master
