"""The console's node configuration view (the Cluster page's *Configuration* of a node,
RocketMQ Dashboard's broker config): ``GET /api/nodes/<node_id>/config``.

The node settings service decides who may read it and what is shown
(``node/services/node_settings.py``: admins, nothing secret). This node's is read here;
another node's at that node's Admin door (NodeConfig) as the console's user
(``node/services/peer_admin.py``), whose service decides on the same user, so its refusal
is the answer. An unknown node is a 404. Kept apart from ``api.py``, which adds this
route to its own.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.services.caller import Caller
from node.services.node_settings import NodeSetting, NodeSettings, NodeSettingsService
from node.services.peer_admin import PeerAdmin

NAME = "([^/]+)"
READ_TIMEOUT_S = 5.0


def settings_json(found: NodeSettings) -> dict:
    return {
        "node_id": found.node_id,
        "broker_group": found.broker_group,
        "settings": [
            {"section": s.section, "name": s.name, "value": s.value, "redacted": s.redacted}
            for s in found.settings
        ],
        "broker_properties": [
            {"name": name, "value": value} for name, value in found.broker_properties
        ],
    }


def settings_of(answer: api.NodeConfigResponse) -> NodeSettings:
    """Another node's NodeConfig answer as the service's record."""
    return NodeSettings(
        answer.node_id,
        answer.broker_group,
        tuple(NodeSetting(s.section, s.name, s.value, s.redacted) for s in answer.settings),
        tuple((p.name, p.value) for p in answer.broker_properties),
    )


class NodeConfigEndpoint:
    def __init__(self, node_settings: NodeSettingsService, peers: PeerAdmin) -> None:
        """``peers``: the node's calls to another node's Admin door as a user."""
        self.node_settings = node_settings
        self.peers = peers

    def routes(self) -> list[tuple[str, str, Callable]]:
        """(method, pattern after ``/api/``, handler)."""
        return [("GET", f"nodes/{NAME}/config", self.node_config)]

    async def node_config(self, caller: Caller, call) -> dict:
        member = self.node_settings.member(caller, call.params[0])
        if member is None:
            return settings_json(self.node_settings.settings(caller))
        asked = api.NodeConfigRequest(node_id=member.node_id)
        answer = await self.peers.call(caller, member, "NodeConfig", asked, READ_TIMEOUT_S)
        return settings_json(settings_of(answer))
