"""A node's configuration as it runs, for every door that shows it: the Admin door's
NodeConfig (the SDK's ``Admin.node_config``, ``ferrymq cluster config``), the console's
node configuration view, and RocketMQ 4.x's GET_BROKER_CONFIG (``mqadmin getBrokerConfig``).

What is shown: (a) every option of ``node.toml`` by section, with the value the node runs
with (``node/config.py`` ``effective_settings``, what ``<data>/node.toml`` is written
from), and (b) the same settings under RocketMQ's broker property names
(``brokerName``, ``brokerId``, ``listenPort``, ``flushDiskType``, ``brokerRole``, ...),
read as the node runs now: ``brokerId`` and ``brokerRole`` follow elections.

Nothing secret is shown: ``SECRET_SETTINGS`` is the one list of options whose value never
leaves the node (the cluster secret, the bootstrap admin's secret key, the metrics bearer
token, the path of the TLS private key); each is shown only as set or not. Users' secret
keys are in routing, not in the configuration, and are never part of it.

Who may: admin rights when ``[security] auth`` is on (``Permissions.require_admin``), as
RocketMQ's broker asks for getBrokerConfig: the configuration names addresses, paths and
limits an attacker would like to know. Another node's configuration is read at that node
(``member``: the door hands the call to its Admin door as the caller's user, who that
node's service decides on again).

Thread-safety: owned by the node's event loop; routing is read under its lock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ha.options import ReplicationMode
from node.broker_ids import CLUSTER_NAME, broker_addresses
from node.config import NodeConfig, effective_settings
from node.services.admin import NOT_FOUND, AdminRefused
from node.services.caller import Caller
from node.services.permissions import Permissions
from routing.metadata import Member
from routing.replica import RoutingReplica
from routing.state import RoutingState

# (section, option) of every secret of node.toml: shown as set or not, never its value.
SECRET_SETTINGS = frozenset(
    {
        ("cluster", "secret"),  # encrypts Raft, authenticates node links, seals users' keys
        ("security", "admin_secret_key"),  # the bootstrap admin's secret key
        ("metrics", "bearer_token"),  # a Prometheus scrape's credential
        ("security", "tls_key"),  # where the client port's private key is read from
    }
)
SET_NOT_SHOWN = "(set, not shown)"
CONSUME_QUEUE_ENTRY_BYTES = 20  # RocketMQ's mappedFileSizeConsumeQueue is in bytes


@dataclass(frozen=True, slots=True)
class NodeSetting:
    """One option of ``node.toml``: its value as text (a list's items joined by ", "), or,
    for a secret (``redacted``), ``SET_NOT_SHOWN`` when set and "" when not."""

    section: str
    name: str
    value: str
    redacted: bool = False


@dataclass(frozen=True, slots=True)
class NodeSettings:
    node_id: str
    broker_group: str
    settings: tuple[NodeSetting, ...]  # by section in node.toml's order, then by name
    broker_properties: tuple[tuple[str, str], ...]  # RocketMQ's names, sorted


def setting_text(value: Any) -> str:
    """A value as an operator writes it in ``node.toml``, without TOML's quotes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple | list):
        return ", ".join(setting_text(item) for item in value)
    return str(value)


def shown_settings(config: NodeConfig) -> tuple[NodeSetting, ...]:
    """Every option of ``config``, each secret of ``SECRET_SETTINGS`` redacted."""
    shown = []
    for section, options in effective_settings(config).items():
        for name, value in options.items():
            if (section, name) in SECRET_SETTINGS:
                shown.append(NodeSetting(section, name, SET_NOT_SHOWN if value else "", True))
            else:
                shown.append(NodeSetting(section, name, setting_text(value)))
    return tuple(shown)


def broker_properties(
    config: NodeConfig, *, master: bool, broker_id: int, listen_port: int
) -> dict[str, str]:
    """The node's settings under RocketMQ's broker names (none of them secret)."""
    store = config.store_config()
    sync = config.replication.mode == ReplicationMode.SYNC
    role = ("SYNC_MASTER" if sync else "ASYNC_MASTER") if master else "SLAVE"
    flag = {True: "true", False: "false"}
    return {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": config.group,
        "brokerId": str(broker_id),
        "brokerIP1": config.host,
        "listenPort": str(listen_port),
        "brokerRole": role,
        "flushDiskType": store.flush_mode.value,
        "flushIntervalCommitLog": str(store.flush_interval_ms),
        "syncFlushTimeout": str(store.sync_flush_timeout_ms),
        "mappedFileSizeCommitLog": str(store.commitlog_segment_bytes),
        "mappedFileSizeConsumeQueue": str(
            store.consume_queue_entries_per_file * CONSUME_QUEUE_ENTRY_BYTES
        ),
        "maxMessageSize": str(store.max_message_body_bytes),
        "fileReservedTime": str(store.retention_ms // 3_600_000),
        "diskMaxUsedSpaceRatio": str(round(store.disk_high_water_ratio * 100)),
        "storePathRootDir": config.data_dir,
        "brokerPermission": "6",
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": flag[config.messages.auto_create_groups],
        "enablePropertyFilter": "true",
        "aclEnable": flag[config.security.auth],
        "messageDelayLevel": config.messages.delay_levels,
        "timerMaxDelaySec": str(config.messages.max_delay_ms // 1000),
        "transactionCheckInterval": str(config.messages.transaction_check_interval_ms),
        "transactionCheckMax": str(config.messages.transaction_max_checks),
    }


class NodeSettingsService:
    def __init__(
        self,
        config: NodeConfig,
        routing: RoutingReplica,
        permissions: Permissions,
        is_master: Callable[[], bool],
    ) -> None:
        """``is_master``: whether this node's store takes writes now (``brokerRole``)."""
        self.config = config
        self.routing = routing
        self.permissions = permissions
        self.is_master = is_master

    def settings(self, caller: Caller) -> NodeSettings:
        """This node's configuration, both ways, nothing secret (admins only)."""
        properties = self.broker_properties(caller)
        return NodeSettings(
            self.config.id,
            self.config.group,
            shown_settings(self.config),
            tuple(sorted(properties.items())),
        )

    def broker_properties(self, caller: Caller) -> dict[str, str]:
        """This node's settings under RocketMQ's names, as it runs now (admins only)."""
        self.permissions.require_admin(caller)
        broker_id, port = self.routing.read(self._where)
        return broker_properties(
            self.config, master=self.is_master(), broker_id=broker_id, listen_port=port
        )

    def _where(self, state: RoutingState) -> tuple[int, int]:
        """(brokerId as routes state it, -1 while out of them; the remoting port)."""
        member = state.members.get(self.config.id)
        address = member.remoting_address if member is not None else ""
        ids = {a: int(i) for i, a in broker_addresses(state, self.config.group).items()}
        port = address.rpartition(":")[2]
        return ids.get(address, -1), int(port) if port.isdigit() else 0

    def member(self, caller: Caller, node_id: str) -> Member | None:
        """Where ``node_id``'s configuration is read: None for this node ("" names it),
        else the member to ask; ``AdminRefused(NOT_FOUND)`` for a node routing does not
        know. Admins only, so that nobody else learns even which nodes exist this way."""
        self.permissions.require_admin(caller)
        if not node_id or node_id == self.config.id:
            return None
        member = self.routing.read(lambda state: state.members.get(node_id))
        if member is None:
            raise AdminRefused(NOT_FOUND, f"UNKNOWN_NODE: no node {node_id} in the cluster")
        return member
