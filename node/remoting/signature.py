"""What a RocketMQ ACL 1.0 signature covers on the remoting port.

A 4.x client (``AclClientRPCHook``; the Go client and ali-ons sign alike) puts its
``AccessKey`` (and an optional ``SecurityToken``) among the request's ext fields beside the
header's own fields, sorts them by name (Java's ``TreeMap``: UTF-16 order, by UTF-16 code
units), concatenates the values only, as UTF-8, appends
the body, and sends base64(HMAC-SHA1(secret key, that)) as the ``Signature`` ext field.

RocketMQ's broker recomputes over every ext field but ``Signature`` and
``_UNIQUE_KEY_QUERY``, while the Java client signs the latter too (unique-key queries
fail ACL on RocketMQ's own brokers); both forms are accepted here.
"""

from __future__ import annotations

from ferrymq.codec.remoting import RemotingCommand
from node.authentication import sign_content

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def _java_order(name: str) -> bytes:
    """``String.compareTo``'s order: by UTF-16 code units."""
    return name.encode("utf-16-be", "surrogatepass")


def signed_content(fields: dict[str, str], body: bytes, skip: tuple[str, ...] = ()) -> bytes:
    """The bytes signed: the values of ``fields`` sorted by name (``Signature`` and
    ``skip`` left out), then the body."""
    names = sorted(fields, key=_java_order)
    values = "".join(fields[name] for name in names if name != SIGNATURE and name not in skip)
    return values.encode() + body


def contents_to_verify(request: RemotingCommand) -> list[bytes]:
    """Every form a client may have signed ``request`` in."""
    fields = request.ext_fields
    forms = [signed_content(fields, request.body)]
    if UNIQUE_KEY_QUERY in fields:
        forms.append(signed_content(fields, request.body, (UNIQUE_KEY_QUERY,)))
    return forms


def sign_request(fields: dict[str, str], body: bytes, access_key: str, secret_key: str) -> dict:
    """``fields`` with ``AccessKey`` and ``Signature`` added, as a 4.x client signs them
    (for tests and tools)."""
    signed = {**fields, ACCESS_KEY: access_key}
    signed[SIGNATURE] = sign_content(secret_key, signed_content(signed, body))
    return signed
