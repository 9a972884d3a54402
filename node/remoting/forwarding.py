"""Sends on the remoting port of a node that is not its group's master, forwarded to the
master: a 4.x client whose route still names a deposed master (routes are refreshed every
30 s) goes on at once instead of being told "this node is a slave" until then (a
benchmark's client got 63,155 such answers after one failover), and the SDK reaches the
master through any node.

What is forwarded: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and FERRY_PRODUCE,
but no transaction half (``broker_send.is_transaction_half``: the master would ask the
forwarding node, not the producer, to check it): those, and everything else, are served
here as before. The request goes to
the master's remoting port as it came (the client's fields, its ACL signature and body),
with two fields of the cluster's own, the proof that a node of this cluster forwarded it
and the client's address (``node/forward_proof.py``, the gRPC door's proof under the
method ``remoting:<code>``). The master (``node/remoting/authentication.py``) verifies and
removes them before it checks the client's signature, takes the request as the client's
(its address is the messages' born host), and never forwards it again: a request that
meets a master that is no longer one is answered as a slave answers. The master's answer
goes back to the client with the client's opaque.

A forwarded send has its client's time budget (``client_budget_s``): the timeout the SDK
names in its request, else ``DEFAULT_CLIENT_TIMEOUT_S`` (a 4.x producer's default
``sendMsgTimeout``; its requests do not carry it), at most ``FORWARD_TIMEOUT_S``. A master
that cannot be reached, or does not answer within the budget, is reported to the client
in the answer (SERVICE_NOT_AVAILABLE: the client retries after a route refresh;
SYSTEM_ERROR when the master may have stored it). A master that receives a forwarded send
after its budget has run out, counted from the proof's time, refuses it unstored
(SYSTEM_BUSY ``[TIMEOUT_CLEAN_QUEUE]``, as Apache RocketMQ's broker answers a send that
waited past its queue's limit): its client has given up and may have sent its next
messages since, which the late one must not follow (``ForwardProofs.overdue``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import (
    CLIENT_TIMEOUT_FIELD,
    FerryRequestCode,
    RequestCode,
    ResponseCode,
)
from node.forward_proof import PROOF_HEADER, Forwarded, ForwardProofs
from node.remoting.authentication import PEER_FIELD, PROOF_FIELD, method_of
from node.remoting.broker_send import is_transaction_half
from node.remoting.forward_channel import ForwardChannel

FORWARDED_CODES = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        FerryRequestCode.FERRY_PRODUCE,
    }
)
FORWARD_TIMEOUT_S = 10.0  # the longest budget a forwarded send is given
DEFAULT_CLIENT_TIMEOUT_S = 3.0  # DefaultMQProducer's sendMsgTimeout


def client_budget_s(request: RemotingCommand) -> float:
    """How long the client of a forwarded send waits for its answer."""
    named = request.ext_fields.get(CLIENT_TIMEOUT_FIELD, "")
    if named.isdigit() and int(named) > 0:
        return min(int(named) / 1000, FORWARD_TIMEOUT_S)
    return DEFAULT_CLIENT_TIMEOUT_S


class RemotingForwarder:
    def __init__(
        self,
        proofs: ForwardProofs,
        is_master: Callable[[], bool],
        master_address: Callable[[], str | None],
    ) -> None:
        """``master_address()``: the remoting address of this node's group's master as
        routing names it (None while there is none, or when it is this node)."""
        self.proofs = proofs
        self.is_master = is_master
        self.master_address = master_address
        self._channels: dict[str, ForwardChannel] = {}

    def target(self, request: RemotingCommand) -> str | None:
        """Where ``request`` (a client's own) goes instead of being served here, or None."""
        if request.code not in FORWARDED_CODES or not self.proofs.can_forward:
            return None
        if self.is_master():
            return None
        if request.code != FerryRequestCode.FERRY_PRODUCE and is_transaction_half(request):
            return None
        return self.master_address()

    async def forward(self, request: RemotingCommand, address: str, peer: str) -> RemotingCommand:
        """The master's answer to ``request``, made for the client at ``peer``."""
        proof = dict(self.proofs.headers(method_of(request.code), peer))
        fields = {**request.ext_fields, PEER_FIELD: peer, PROOF_FIELD: proof[PROOF_HEADER]}
        channel = self._channels.get(address)
        if channel is None:
            for old in self._channels.values():  # the master moved: old links go
                old.close()
            self._channels = {address: (channel := ForwardChannel(address))}
        budget_s = client_budget_s(request)
        try:
            answer = await channel.call(replace(request, ext_fields=fields), budget_s)
        except ConnectionError as error:
            return request.reply(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"this node is a slave; forwarding to its master failed ({error}): query the "
                "route again",
            )
        except TimeoutError:
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"forwarded to the master at {address}, which did not answer within "
                f"{budget_s:g} s: it may have stored the message",
            )
        return replace(answer, opaque=request.opaque)

    def refuse_overdue(
        self, request: RemotingCommand, forwarded: Forwarded
    ) -> RemotingCommand | None:
        """The master's refusal of a forwarded send that comes after its client's
        deadline; None for one in time."""
        budget_s = client_budget_s(request)
        late_s = self.proofs.overdue(forwarded, budget_s)
        if late_s is None:
            return None
        return request.reply(
            ResponseCode.SYSTEM_BUSY,
            f"[TIMEOUT_CLEAN_QUEUE]not stored: this send, forwarded by {forwarded.node_id}, "
            f"arrived {late_s:.2f} s past its client's timeout of {budget_s:g} s",
        )

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels = {}
