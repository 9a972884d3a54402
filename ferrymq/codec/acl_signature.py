"""RocketMQ ACL 1.0 signatures of remoting requests: what the SDK signs and the node
verifies, in one place.

A 4.x client (``AclClientRPCHook``; the Go client and ali-ons sign alike) puts its
``AccessKey`` (and an optional ``SecurityToken``) among the request's ext fields beside the
header's own fields, sorts them by name (Java's ``TreeMap``: by UTF-16 code units),
concatenates the values only, as UTF-8, appends the body, and sends
base64(HMAC-SHA1(secret key, that)) as the ``Signature`` ext field.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def _java_order(name: str) -> bytes:
    """``String.compareTo``'s order: by UTF-16 code units."""
    return name.encode("utf-16-be", "surrogatepass")


def sign_content(secret_key: str, content: bytes) -> str:
    """base64 of HMAC-SHA1(secret key, content)."""
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signed_content(fields: dict[str, str], body: bytes, skip: tuple[str, ...] = ()) -> bytes:
    """The bytes signed: the values of ``fields`` sorted by name (``Signature`` and
    ``skip`` left out), then the body."""
    names = sorted(fields, key=_java_order)
    values = "".join(fields[name] for name in names if name != SIGNATURE and name not in skip)
    return values.encode() + body


def sign_request(fields: dict[str, str], body: bytes, access_key: str, secret_key: str) -> dict:
    """``fields`` with ``AccessKey`` and ``Signature`` added, as a 4.x client signs them."""
    signed = {**fields, ACCESS_KEY: access_key}
    signed[SIGNATURE] = sign_content(secret_key, signed_content(signed, body))
    return signed
