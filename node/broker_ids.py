"""How RocketMQ names a broker group's nodes: every group is a broker of one cluster,
``CLUSTER_NAME``; its master is brokerId 0 and its in-sync slaves that are alive 1..n (by
node id), each at its remoting address. The NameServer role (``node/remoting/name_server.py``)
answers routes with it and the node settings service (``node/services/node_settings.py``)
says a node's own ``brokerId`` with it, so both say the same.

Pure functions of a routing state: the caller holds the state's lock (``RoutingReplica.read``).
"""

from __future__ import annotations

from routing.state import RoutingState

CLUSTER_NAME = "DefaultCluster"  # RocketMQ's default, what mqadmin's -c usually names
MASTER_ID = 0


def broker_addresses(state: RoutingState, broker_group: str) -> dict[str, str]:
    """brokerId → remoting address: the master as 0, the alive in-sync slaves as 1..n in
    node-id order. Members without a remoting address (registered by an older node) are
    left out; a group without a master has only slaves (consumers can still read)."""
    group = state.broker_groups.get(broker_group)
    if group is None:
        return {}
    addresses: dict[str, str] = {}
    master = state.members.get(group.master) if group.master else None
    if master is not None and master.remoting_address:
        addresses[str(MASTER_ID)] = master.remoting_address
    slaves = sorted(
        member
        for member in group.in_sync
        if member != group.master
        and (found := state.members.get(member)) is not None
        and found.alive
        and found.remoting_address
    )
    for broker_id, node_id in enumerate(slaves, start=1):
        addresses[str(broker_id)] = state.members[node_id].remoting_address
    return addresses
