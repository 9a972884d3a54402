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
the transport its two-argument ``Handler``. A request another node of the cluster forwarded
(``node/remoting/forwarding.py``) has its proof checked and removed here, before the
client's signature is: its caller is the client at the address the proof names; one that
arrives after its client's deadline is refused here, unserved. A client's own send on a
node that is not its group's master is forwarded from here, once its credentials are
verified.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from ferrymq.codec.acl_signature import ACCESS_KEY, SIGNATURE
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode, ResponseCode
from node.authentication import Verification
from node.forward_proof import PEER_HEADER, PROOF_HEADER, Forwarded, ForwardProofs, ProofRefused
from node.remoting.dispatch import Handler
from node.remoting.signature import contents_to_verify
from node.rpc_status import AccessDenied
from node.services.caller import Caller, Door

# The fields a forwarded request carries besides the client's (a client cannot forge
# them: the proof is keyed with the cluster secret).
PROOF_FIELD = "ferryForwardProof"
PEER_FIELD = "ferryForwardedFor"

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


def unwrap(
    proofs: ForwardProofs, request: RemotingCommand
) -> tuple[RemotingCommand, Forwarded | None]:
    """``request`` without the forwarding fields, and who forwarded it for which client
    (None: the client's own request). ``ProofRefused`` for a proof that does not verify."""
    fields = request.ext_fields
    if PROOF_FIELD not in fields and PEER_FIELD not in fields:
        return request, None
    forwarded = proofs.verify(
        method_of(request.code),
        {PROOF_HEADER: fields.get(PROOF_FIELD, ""), PEER_HEADER: fields.get(PEER_FIELD, "")},
    )
    client_fields = {k: v for k, v in fields.items() if k not in (PROOF_FIELD, PEER_FIELD)}
    return replace(request, ext_fields=client_fields), forwarded


class Forwards(Protocol):
    """What the callers use of ``node/remoting/forwarding.RemotingForwarder``."""

    proofs: ForwardProofs

    def target(self, request: RemotingCommand) -> str | None: ...

    async def forward(
        self, request: RemotingCommand, address: str, peer: str
    ) -> RemotingCommand: ...

    def refuse_overdue(
        self, request: RemotingCommand, forwarded: Forwarded
    ) -> RemotingCommand | None: ...


class RemotingCallers:
    """The caller of each request: its verified user with authentication on (a
    ``Verification``), else none; its peer's address."""

    def __init__(
        self, verification: Verification | None, forwarder: Forwards | None = None
    ) -> None:
        self.verification = verification
        self.forwarder = forwarder

    def caller(
        self,
        request: RemotingCommand,
        connection,
        method: str,
        forwarded: Forwarded | None = None,
    ) -> Caller:
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
        if forwarded is not None:
            host, _, port = forwarded.peer.rpartition(":")
            return Caller(Door.REMOTING, method, user, host, int(port) if port.isdigit() else 0)
        if user is not None:
            return Caller(Door.REMOTING, method, user, connection.peer_host, connection.peer_port)
        # Without a user a connection's caller of a method never changes: made once.
        anonymous = connection.anonymous_callers
        caller = anonymous.get(method)
        if caller is None:
            caller = Caller(Door.REMOTING, method, None, connection.peer_host, connection.peer_port)
            anonymous[method] = caller
        return caller

    def lane_caller(self, request: RemotingCommand, connection, method: str) -> Caller | None:
        """The caller of a request a lane may take in the connection's callback; None for
        one only the handler (``adapt``) may take: forwarded by another node (its proof is
        the handler's to check), to be forwarded to the master, or without valid
        credentials (the handler says why)."""
        fields = request.ext_fields
        if PROOF_FIELD in fields or PEER_FIELD in fields:
            return None
        forwarder = self.forwarder
        if forwarder is not None and forwarder.target(request) is not None:
            return None
        try:
            return self.caller(request, connection, method)
        except AccessDenied:
            return None

    def adapt(self, code: int, handler: DoorHandler) -> Handler:
        method = method_of(code)

        async def handle(request: RemotingCommand, connection) -> RemotingCommand | None:
            forwarder = self.forwarder
            try:
                forwarded = None
                if forwarder is not None:
                    request, forwarded = unwrap(forwarder.proofs, request)
                caller = self.caller(request, connection, method, forwarded)
                if forwarder is not None:
                    if forwarded is not None:
                        refusal = forwarder.refuse_overdue(request, forwarded)
                        if refusal is not None:
                            return refusal
                    else:
                        master = forwarder.target(request)
                        if master is not None:
                            return await forwarder.forward(request, master, caller.address)
                return await handler(request, connection, caller)
            except AccessDenied as denied:
                return request.reply(ResponseCode.NO_PERMISSION, str(denied))
            except ProofRefused as refused:
                return request.reply(ResponseCode.NO_PERMISSION, f"UNAUTHENTICATED: {refused}")

        return handle

    def adapt_all(self, handlers: Iterable[tuple[int, DoorHandler]]) -> list[tuple[int, Handler]]:
        return [(code, self.adapt(code, handler)) for code, handler in handlers]
