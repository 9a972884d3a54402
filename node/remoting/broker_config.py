"""GET_BROKER_CONFIG (26), ``mqadmin getBrokerConfig``: the node's effective settings as the
RocketMQ broker properties of the same meaning (``brokerName``, ``brokerId``,
``listenPort``, ``flushDiskType``, ``brokerRole``, ...), in Java's properties text.

The node settings service decides everything (``node/services/node_settings.py``): which
settings have a RocketMQ name and their values as the node runs now, that nothing secret
is listed, and who may ask (admin rights with ``[security] auth`` on). This door only
writes them as ``java.util.Properties.load`` reads them back.

Thread-safety: the handler runs on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.remoting.authentication import DoorHandler
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


class BrokerConfigHandlers:
    def __init__(self, services: Services) -> None:
        self.services = services

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.GET_BROKER_CONFIG, self.broker_config)]

    async def broker_config(self, request: RemotingCommand, connection, caller: Caller):
        properties = self.services.node_settings.broker_properties(caller)
        version = json.dumps({"counter": 0, "timestamp": 0}, separators=(",", ":"))
        return request.reply(
            ResponseCode.SUCCESS, ext_fields={"version": version}, body=properties_text(properties)
        )
