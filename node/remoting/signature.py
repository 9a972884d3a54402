"""What a RocketMQ ACL 1.0 signature covers on the remoting port.

The signing itself is ``ferrymq.codec.acl_signature`` (the SDK signs with it too).

RocketMQ's broker recomputes over every ext field but ``Signature`` and
``_UNIQUE_KEY_QUERY``, while the Java client signs the latter too (unique-key queries
fail ACL on RocketMQ's own brokers); both forms are accepted here.
"""

from __future__ import annotations

from ferrymq.codec.acl_signature import signed_content
from ferrymq.codec.remoting import RemotingCommand

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def contents_to_verify(request: RemotingCommand) -> list[bytes]:
    """Every form a client may have signed ``request`` in."""
    fields = request.ext_fields
    forms = [signed_content(fields, request.body)]
    if UNIQUE_KEY_QUERY in fields:
        forms.append(signed_content(fields, request.body, (UNIQUE_KEY_QUERY,)))
    return forms
