"""A client's credentials and TLS settings: what it signs its calls with and how it
reaches a node's client port.

Calls are signed as the official RocketMQ 5 clients sign them (``authorization:
MQv2-HMAC-SHA1 ...`` over ``x-mq-date-time``, in UTC), so one user works for both. Without
arguments the settings come from the environment, so every tool built on the SDK (the CLI,
chaos, bench, the Spark data source) reaches a secured cluster unchanged:

- ``FERRYMQ_ACCESS_KEY`` / ``FERRYMQ_SECRET_KEY``: sign every call;
- ``FERRYMQ_TLS_CA``: speak TLS and trust this PEM CA bundle (``system`` for the system
  roots);
- ``FERRYMQ_TLS_CERT`` / ``FERRYMQ_TLS_KEY``: present this client certificate (mutual TLS).

The remoting port is reached with the same settings: its requests carry RocketMQ's ACL
1.0 signature (``remoting_fields``) and its TLS verifies the node as gRPC's does
(``ssl_context``: the same CA, the host name checked, the same client certificate).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import time
from dataclasses import dataclass, field

import grpc

from ferrymq.codec.acl_signature import sign_request

DATE_FORMAT = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class ClientSecurity:
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls_ca: str = ""  # a PEM file, or "system" for the system roots; "" is plaintext
    tls_cert: str = ""
    tls_key: str = ""

    @classmethod
    def from_environment(cls) -> ClientSecurity:
        env = os.environ
        return cls(
            access_key=env.get("FERRYMQ_ACCESS_KEY", ""),
            secret_key=env.get("FERRYMQ_SECRET_KEY", ""),
            tls_ca=env.get("FERRYMQ_TLS_CA", ""),
            tls_cert=env.get("FERRYMQ_TLS_CERT", ""),
            tls_key=env.get("FERRYMQ_TLS_KEY", ""),
        )

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca or self.tls_cert)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path or path == "system":
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.tls_ca),
            private_key=read(self.tls_key),
            certificate_chain=read(self.tls_cert),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of a remoting connection (None: plaintext): verifies the node
        against ``tls_ca`` (the system roots for ``system``) and its host name, as gRPC's
        channel does, and presents the client certificate when one is set."""
        if not self.tls:
            return None
        ca = None if not self.tls_ca or self.tls_ca == "system" else self.tls_ca
        context = ssl.create_default_context(cafile=ca)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key or None)
        return context

    def remoting_fields(self, fields: dict[str, str] | None, body: bytes) -> dict[str, str]:
        """A remoting request's ext fields, signed when the client has credentials."""
        if not self.access_key:
            return fields or {}
        return sign_request(fields or {}, body, self.access_key, self.secret_key)

    def channel(self, address: str, options: list) -> grpc.Channel:
        if self.tls:
            return grpc.secure_channel(address, self.channel_credentials(), options=options)
        return grpc.insecure_channel(address, options=options)

    def aio_channel(self, address: str, options: list) -> grpc.aio.Channel:
        if self.tls:
            return grpc.aio.secure_channel(address, self.channel_credentials(), options=options)
        return grpc.aio.insecure_channel(address, options=options)


class Signer:
    """Metadata for one call: the client's fixed headers plus, with credentials, the
    signature of the current second (computed once per second, not once per call)."""

    def __init__(self, security: ClientSecurity, fixed: tuple[tuple[str, str], ...]) -> None:
        self.security = security
        self.fixed = fixed
        self._second = -1
        self._metadata = fixed

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if not self.security.access_key:
            return self.fixed
        second = int(time.time())
        if second != self._second:
            date_time = time.strftime(DATE_FORMAT, time.gmtime(second))
            signature = hmac.new(
                self.security.secret_key.encode(), date_time.encode(), hashlib.sha1
            ).hexdigest()
            authorization = (
                f"MQv2-HMAC-SHA1 Credential={self.security.access_key}, "
                f"SignedHeaders=x-mq-date-time, Signature={signature}"
            )
            self._metadata = (
                *self.fixed,
                ("x-mq-date-time", date_time),
                ("authorization", authorization),
            )
            self._second = second
        return self._metadata
