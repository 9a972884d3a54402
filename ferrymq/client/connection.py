"""One gRPC connection to a node, shared by a client's calls, with the metadata the node
uses to tell clients apart (``x-mq-client-id``, as the official clients send)."""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from ferrymq.client.errors import TRANSPORT, FerryError
from ferrymq.client.security import ClientSecurity, Signer
from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2_grpc, data_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:8081"
DEFAULT_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 64 << 20
_client_numbers = itertools.count(1)

T = TypeVar("T")


def new_client_id() -> str:
    """host@pid@n@time: unique per client object, readable in ``group members``."""
    return f"{socket.gethostname()}@{os.getpid()}@{next(_client_numbers)}@{time.time_ns():x}"


class Connection:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client_id: str | None = None,
        security: ClientSecurity | None = None,
    ):
        """``security``: credentials and TLS (default: from the environment)."""
        self.address = address
        self.timeout_s = timeout_s
        self.client_id = client_id or new_client_id()
        self.security = security or ClientSecurity.from_environment()
        self.signer = Signer(
            self.security,
            (("x-mq-client-id", self.client_id), ("x-mq-language", "PYTHON"), PINNED_QUEUE),
        )
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        self.channel = self.security.channel(address, options)
        self.messaging = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self.data = data_pb2_grpc.DataStub(self.channel)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The headers of a call made now (signed, with credentials)."""
        return self.signer.metadata()

    def call(self, method: Callable[..., T], request, timeout_s: float | None = None) -> T:
        """A unary call; transport failures become ``FerryError(TRANSPORT)``."""
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self.metadata)
        except grpc.RpcError as error:
            raise transport_error(error) from None

    def close(self) -> None:
        self.channel.close()


def transport_error(error: grpc.RpcError) -> FerryError:
    code = error.code() if hasattr(error, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = error.details() if hasattr(error, "details") else str(error)
    return FerryError(TRANSPORT, name, details or name)
