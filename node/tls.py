"""TLS for the client port, from the PEM files named in ``[security]``.

The server presents ``tls_cert``/``tls_key``; with ``tls_client_ca`` it also requires
every client to present a certificate that CA signed (mutual TLS). When a node calls
another node's client port (a forwarded failover), it trusts ``tls_ca`` (default:
``tls_client_ca``, else its own certificate, which fits one self-signed cluster
certificate) and presents its own certificate, so mutual TLS holds between nodes too.
The remoting port (``node/remoting/``) speaks TLS with the same certificate and key, and
the same client-certificate rule.
"""

from __future__ import annotations

import ssl

import grpc

from node.config import SecurityOptions


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def server_credentials(security: SecurityOptions) -> grpc.ServerCredentials:
    client_ca = _read(security.tls_client_ca) if security.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(_read(security.tls_key), _read(security.tls_cert))],
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


def remoting_ssl_context(security: SecurityOptions) -> ssl.SSLContext:
    """The remoting listener's TLS: the gRPC port's certificate, key and client CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(security.tls_cert, security.tls_key)
    if security.tls_client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(security.tls_client_ca)
    return context
