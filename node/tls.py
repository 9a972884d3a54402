"""TLS for the client ports, from the PEM files named in ``[security]``, or without them
from a certificate the node made (``node/client_port.py``: ``certificate_files``).

``[security] client_tls`` says what the client ports speak (``ClientTls``): TLS and
plaintext on each (``optional``, the default without a certificate), TLS only
(``required``, the default with one), or plaintext only (``off``).

The server presents ``tls_cert``/``tls_key``; with ``tls_client_ca`` it also requires
every client that speaks TLS to present a certificate that CA signed (mutual TLS). When a node calls
another node's client port (a forwarded failover), it trusts ``tls_ca`` (default:
``tls_client_ca``, else its own certificate, which fits one self-signed cluster
certificate) and presents its own certificate, so mutual TLS holds between nodes too.
The remoting port (``node/remoting/``) speaks TLS with the same certificate and key, and
the same client-certificate rule.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import grpc

from node.client_port import certificate_files
from node.config import NodeConfig, SecurityOptions


@dataclass(frozen=True)
class ClientTls:
    """What the client ports speak, and with which certificate (paths; empty when off)."""

    mode: str  # "optional", "required" or "off"
    cert: str = ""
    key: str = ""
    client_ca: str = ""

    @property
    def plaintext(self) -> bool:
        return self.mode != "required"


def client_tls(config: NodeConfig) -> ClientTls:
    """The client ports' TLS: the configured certificate, else the node's own."""
    security = config.security
    mode = security.client_tls_mode
    if mode == "off":
        return ClientTls(mode)
    if security.tls:
        cert, key = security.tls_cert, security.tls_key
    else:
        cert, key = certificate_files(config.data_dir, config.id, config.host)
    return ClientTls(mode, cert, key, security.tls_client_ca)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def server_credentials(tls: ClientTls) -> grpc.ServerCredentials:
    client_ca = _read(tls.client_ca) if tls.client_ca else None
    return grpc.ssl_server_credentials(
        [(_read(tls.key), _read(tls.cert))],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def peer_channel_credentials(security: SecurityOptions) -> grpc.ChannelCredentials:
    trusted = security.tls_ca or security.tls_client_ca or security.tls_cert
    return grpc.ssl_channel_credentials(
        root_certificates=_read(trusted),
        private_key=_read(security.tls_key),
        certificate_chain=_read(security.tls_cert),
    )


def remoting_ssl_context(tls: ClientTls) -> ssl.SSLContext:
    """The remoting listener's TLS: the gRPC port's certificate, key and client CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(tls.client_ca)
    return context


def grpc_relay_ssl_context(tls: ClientTls) -> ssl.SSLContext:
    """The gRPC port's TLS where the relay ends it (``optional``): HTTP/2 negotiated by
    ALPN, which gRPC clients require."""
    context = remoting_ssl_context(tls)
    context.set_alpn_protocols(["h2"])
    return context
