"""Who asks: the one description of a caller that every door builds and every service reads.

A door authenticates (gRPC: the RocketMQ 5 signature headers; remoting: the ACL 1.0
signature of each request) and hands the service a ``Caller``; the service decides what
that caller may do (``node/services/permissions.py``). With authentication off ``user`` is
None and every permission holds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from routing.acl import User


class Door(enum.Enum):
    """Which door a request came through (refusals are logged with it)."""

    MESSAGING = "grpc"  # RocketMQ 5: apache.rocketmq.v2.MessagingService
    FERRY = "ferrymq"  # ferrymq's Admin and Data services on the gRPC port
    REMOTING = "remoting"  # RocketMQ 4.x remoting, and the SDK's private codes there
    CONSOLE = "console"  # the web console's JSON API (node/console/)


@dataclass(frozen=True, slots=True)
class Caller:
    door: Door
    method: str  # the door's name for the call: "SendMessage", "remoting:SEND_MESSAGE_V2"
    user: User | None  # the verified user; None with authentication off
    host: str = ""  # the peer's address without its port ("" when unknown)
    port: int = 0

    @property
    def address(self) -> str:
        """``host:port`` of the peer (BORNHOST of what it sends)."""
        return f"{self.host}:{self.port}"

    @property
    def identity(self) -> str:
        """Who owns the client ids this caller registers: its access key with
        authentication on, else its host, which a reconnecting client keeps (its port
        changes) and another host cannot take."""
        if self.user is not None:
            return "access key " + self.user.access_key
        return "address " + self.host
