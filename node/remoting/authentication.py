"""Who calls, on the remoting port: each request's RocketMQ ACL 1.0 signature is verified
(``node/authentication.py``, the gRPC port's users and secrets) and the request handed to
its handler with its ``Caller``; what that caller may do is the services' decision
(``node/services/permissions.py``), made on the request they then execute.

A request without valid credentials, and any request a service refuses for the ACL, is
answered NO_PERMISSION (16) with the reason as the remark (``UNAUTHENTICATED: ...`` for bad
credentials, ``FORBIDDEN: ...`` for a missing permission: the SDK tells them apart), so a
refused request changes nothing. RocketMQ's own broker raises an ``AclException`` from its
RPC hook, which the 4.x remoting sources read answer through their generic catch
(SYSTEM_ERROR with the exception's text); ferrymq answers 16, RocketMQ's code for a
refused permission, which the 4.x producers also treat as "try another broker" and then
raise with the remark.

The door's handlers take the caller as a third argument (``DoorHandler``); ``adapt`` gives
the transport its two-argument ``Handler``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ferrymq.codec.acl_signature import ACCESS_KEY, SIGNATURE
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode, ResponseCode
from node.authentication import Verification
from node.remoting.dispatch import Handler
from node.remoting.signature import contents_to_verify
from node.rpc_status import AccessDenied
from node.services.caller import Caller, Door

# (request, its connection, who asked) -> response or None.
DoorHandler = Callable[[RemotingCommand, Any, Caller], Awaitable[RemotingCommand | None]]
METHOD_PREFIX = "remoting:"  # a remoting request's method: remoting:<code name>


def method_of(code: int) -> str:
    for codes in (RequestCode, FerryRequestCode):
        try:
            return METHOD_PREFIX + codes(code).name
        except ValueError:
            continue
    return f"{METHOD_PREFIX}{code}"


class RemotingCallers:
    """The caller of each request: its verified user with authentication on (a
    ``Verification``), else none; its peer's address."""

    def __init__(self, verification: Verification | None) -> None:
        self.verification = verification

    def caller(self, request: RemotingCommand, connection, method: str) -> Caller:
        """``AccessDenied`` for a request without valid credentials."""
        user = None
        if self.verification is not None:
            fields = request.ext_fields
            user = self.verification.of_signature(
                method,
                fields.get(ACCESS_KEY, ""),
                fields.get(SIGNATURE, ""),
                contents_to_verify(request),
            )
        return Caller(Door.REMOTING, method, user, connection.peer_host, connection.peer_port)

    def adapt(self, code: int, handler: DoorHandler) -> Handler:
        method = method_of(code)

        async def handle(request: RemotingCommand, connection) -> RemotingCommand | None:
            try:
                return await handler(request, connection, self.caller(request, connection, method))
            except AccessDenied as denied:
                return request.reply(ResponseCode.NO_PERMISSION, str(denied))

        return handle

    def adapt_all(self, handlers: Iterable[tuple[int, DoorHandler]]) -> list[tuple[int, Handler]]:
        return [(code, self.adapt(code, handler)) for code, handler in handlers]
