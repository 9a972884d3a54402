"""The caller of a 4.x request (``RemotingCallers.caller``): its connection's peer, its
user with authentication on, the forwarding node's client when forwarded. Without
credentials a connection's caller of a method is made once and reused; a user's never is."""

from __future__ import annotations

from types import SimpleNamespace

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode
from node.forward_proof import Forwarded
from node.remoting.authentication import RemotingCallers
from node.services.caller import Door


def connection(host: str, port: int) -> SimpleNamespace:
    return SimpleNamespace(peer_host=host, peer_port=port, anonymous_callers={})


REQUEST = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 7, ext_fields={"b": "T"})


def test_an_anonymous_caller_is_its_connections_peer_and_is_reused_per_method():
    callers = RemotingCallers(None)
    first, second = connection("10.0.0.1", 4001), connection("10.0.0.2", 4002)
    send = callers.caller(REQUEST, first, "remoting:SEND_MESSAGE_V2")
    assert (send.door, send.method, send.user) == (Door.REMOTING, "remoting:SEND_MESSAGE_V2", None)
    assert send.address == "10.0.0.1:4001"
    assert callers.caller(REQUEST, first, "remoting:SEND_MESSAGE_V2") is send
    pull = callers.caller(REQUEST, first, "remoting:PULL_MESSAGE")
    assert pull.method == "remoting:PULL_MESSAGE" and pull.address == send.address
    other = callers.caller(REQUEST, second, "remoting:SEND_MESSAGE_V2")
    assert other.address == "10.0.0.2:4002" and other is not send


def test_a_users_caller_and_a_forwarded_caller_are_never_the_connections_cached_one():
    users = iter(["alice", "bob"])
    verification = SimpleNamespace(of_signature=lambda *args: next(users))
    callers = RemotingCallers(verification)  # type: ignore[arg-type]
    peer = connection("10.0.0.1", 4001)
    alice = callers.caller(REQUEST, peer, "remoting:SEND_MESSAGE_V2")
    bob = callers.caller(REQUEST, peer, "remoting:SEND_MESSAGE_V2")
    assert (alice.user, bob.user) == ("alice", "bob")
    assert peer.anonymous_callers == {}

    forwarded = Forwarded(node_id="node-2", peer="10.9.9.9:5005", made_at_s=0.0)
    relayed = RemotingCallers(None).caller(REQUEST, peer, "remoting:SEND_MESSAGE_V2", forwarded)
    assert relayed.address == "10.9.9.9:5005"
    assert peer.anonymous_callers == {}
