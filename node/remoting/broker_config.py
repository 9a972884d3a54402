"""GET_BROKER_CONFIG (26), ``mqadmin getBrokerConfig``: the node's effective settings as the
RocketMQ broker properties of the same meaning (``brokerName``, ``brokerId``,
``listenPort``, ``flushDiskType``, ``brokerRole``, ...), in Java's properties text.

Only settings with a RocketMQ name are listed; ferrymq's others are in the effective
``<data>/node.toml``. Nothing secret is in it: the cluster secret, the admin secret key,
the metrics bearer token and the TLS key's path are never listed (docs/security.md), and
with ``[security] auth`` on the request itself needs admin rights (the admin and route
services decide). A setting is read as the node runs now: ``brokerId`` and
``brokerRole`` follow elections.

Thread-safety: the handler runs on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ha.options import ReplicationMode
from node.config import NodeConfig
from node.remoting.authentication import DoorHandler
from node.remoting.name_server import CLUSTER_NAME, broker_addresses
from node.services.caller import Caller
from node.services.registry import Services

SPECIAL = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "=": "\\=", ":": "\\:"}
SPECIAL |= {"#": "\\#", "!": "\\!"}


def escaped(text: str) -> str:
    """``text`` as ``java.util.Properties.load`` reads it back (no line breaks inside)."""
    out = "".join(SPECIAL.get(c, c) if c.isascii() else f"\\u{ord(c):04x}" for c in text)
    return "\\" + out if out.startswith(" ") else out


def properties_text(properties: dict[str, str]) -> bytes:
    return "".join(f"{escaped(k)}={escaped(v)}\n" for k, v in sorted(properties.items())).encode()


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
        "mappedFileSizeConsumeQueue": str(store.consume_queue_entries_per_file * 20),
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


class BrokerConfigHandlers:
    def __init__(self, config: NodeConfig, services: Services) -> None:
        self.config = config
        self.services = services

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.GET_BROKER_CONFIG, self.broker_config)]

    async def broker_config(self, request: RemotingCommand, connection, caller: Caller):
        admin = self.services.admin

        def where(state) -> tuple[int, int]:
            """(brokerId as routes state it, -1 while out of them; the remoting port)."""
            member = state.members.get(admin.node_id)
            address = member.remoting_address if member is not None else ""
            ids = {a: int(i) for i, a in broker_addresses(state, admin.broker_group).items()}
            port = address.rpartition(":")[2]
            return ids.get(address, -1), int(port) if port.isdigit() else 0

        master = admin.runtime(caller).is_master
        broker_id, port = self.services.routes.read_all(caller, where)
        properties = broker_properties(
            self.config, master=master, broker_id=broker_id, listen_port=port
        )
        version = json.dumps({"counter": 0, "timestamp": 0}, separators=(",", ":"))
        return request.reply(
            ResponseCode.SUCCESS, ext_fields={"version": version}, body=properties_text(properties)
        )
