"""The proof that a call on the client port was forwarded by a node of this cluster.

A node that is not the master a MessagingService request belongs to hands the call to the
master (``node/grpc/forwarding.py``) with the client's metadata unchanged, so the master checks the
client's own signature and ACLs, plus two headers:

- ``x-ferrymq-forwarded-for``: the client's peer address as the forwarding node saw it
  (``ipv4:10.0.0.5:41000``);
- ``x-ferrymq-forward-proof``: ``v1 <forwarding node id> <wall-clock ms> <mac>``, where
  the MAC is HMAC-SHA256, under a key derived from the cluster secret (HKDF-SHA256, label
  ``HKDF_LABEL``, as ``ha/link_auth`` and ``node/handle_key`` derive theirs), of a
  transcript of length-prefixed fields: a label, the method, the node id, the time and
  the client's peer address. A proof made for one method, node, moment or client does not
  pass for another.

The master accepts a proof that verifies and is at most ``WINDOW_S`` away from its own
clock; it then takes the call as the client's, from the address the proof names (the
peer that owns client ids when authentication is off), and never forwards it again. A
proof that does not verify, is malformed or stale is refused (``ProofRefused``, answered
UNAUTHENTICATED and logged at most once per ``LOG_EVERY_S`` and reason). Without a proof,
a forwarded-for header means nothing: the call is the connection's.

A forwarded call whose client has given up is refused before it is served
(``ForwardProofs.overdue``): a send held up on a cut path between two nodes, delivered when
the path heals, would otherwise be stored after the sends its client made since (the
chaos suite found one stored 3.6 s past its client's deadline, behind 176 later sends of
the same writer). The call's time budget (the client's timeout as the forwarding node
knew it) runs from the proof's time, less ``DEADLINE_MARGIN_S`` for the nodes' clocks
being apart; so the bound holds while their clocks are within that margin.

What a proof grants is small: being taken for the client address it names, for that
method, for ``WINDOW_S``. It grants no user's rights: the client's own signature is
checked as on a direct call. A node without a cluster secret has no key: it forwards
nothing and refuses every proof.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from node.secret_box import derive_key

log = logging.getLogger("ferrymq.forwarding")
HKDF_LABEL = b"ferrymq forwarded calls v1"
TRANSCRIPT_LABEL = b"ferrymq forwarded call 1"
VERSION = "v1"
PROOF_HEADER = "x-ferrymq-forward-proof"
PEER_HEADER = "x-ferrymq-forwarded-for"
HEADERS = frozenset({PROOF_HEADER, PEER_HEADER})
# How far a proof's time may be from the verifier's clock: the nodes' clocks apart, plus
# the time a call takes to arrive. A forwarded call is made the moment it is sent.
WINDOW_S = 30.0
# How much earlier than its client's deadline a late forwarded call is refused: room for
# the nodes' clocks being apart and for the call's own work before it is stored.
DEADLINE_MARGIN_S = 0.25
MAX_PEER_CHARS = 256
LOG_EVERY_S = 10.0
_FIELD_LENGTH = struct.Struct(">H")


class ProofRefused(Exception):
    """A call carries a proof header this node does not accept; ``reason`` is one of
    ``MALFORMED``, ``NO_SECRET``, ``FORGED``, ``STALE``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"forward proof refused ({reason}): {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Forwarded:
    """A verified forwarded call: who forwarded it, the client's peer address, and when
    (the forwarding node's wall clock, seconds)."""

    node_id: str
    peer: str
    made_at_s: float


def _transcript(method: str, node_id: str, time_ms: int, peer: str) -> bytes:
    parts = [TRANSCRIPT_LABEL]
    for text in (method, node_id, str(time_ms), peer):
        raw = text.encode()
        if len(raw) > 0xFFFF:
            raise ValueError(f"a forward-proof field of {len(raw)} bytes is over 65535")
        parts += [_FIELD_LENGTH.pack(len(raw)), raw]
    return b"".join(parts)


class ForwardProofs:
    """Makes and checks proofs under the key of one cluster secret ("" = no key: every
    proof is refused and ``headers`` must not be called)."""

    def __init__(
        self, cluster_secret: str, node_id: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.node_id = node_id
        self.clock = clock
        self._keyed = (
            hmac.new(derive_key(cluster_secret, HKDF_LABEL), digestmod=hashlib.sha256)
            if cluster_secret
            else None
        )
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (logged at, left out)

    @property
    def can_forward(self) -> bool:
        return self._keyed is not None

    def _mac(self, method: str, node_id: str, time_ms: int, peer: str) -> str:
        assert self._keyed is not None
        keyed = self._keyed.copy()
        keyed.update(_transcript(method, node_id, time_ms, peer))
        return keyed.hexdigest()

    def headers(self, method: str, peer: str) -> tuple[tuple[str, str], ...]:
        """The two headers of a call this node forwards now for a client at ``peer``."""
        time_ms = int(self.clock() * 1000)
        mac = self._mac(method, self.node_id, time_ms, peer)
        return (
            (PEER_HEADER, peer),
            (PROOF_HEADER, f"{VERSION} {self.node_id} {time_ms} {mac}"),
        )

    def verify(self, method: str, metadata: Mapping[str, str]) -> Forwarded | None:
        """None when the call carries no proof (a client's own call); the forwarding
        node and the client's peer when it carries a valid one; ``ProofRefused`` (logged)
        otherwise."""
        proof = metadata.get(PROOF_HEADER)
        if proof is None:
            return None
        try:
            return self._verify(method, proof, metadata.get(PEER_HEADER, ""))
        except ProofRefused as refused:
            self._log(refused)
            raise

    def _verify(self, method: str, proof: str, peer: str) -> Forwarded:
        if self._keyed is None:
            raise ProofRefused(
                "NO_SECRET", "this node has no cluster secret: it takes no forwarded calls"
            )
        fields = proof.split(" ")
        if len(fields) != 4 or fields[0] != VERSION or not fields[2].isdigit():
            raise ProofRefused("MALFORMED", f"not '{VERSION} <node> <ms> <mac>'")
        _, node_id, time_text, mac = fields
        if not peer or len(peer) > MAX_PEER_CHARS:
            raise ProofRefused("MALFORMED", f"{PEER_HEADER} is missing or too long")
        time_ms = int(time_text)
        expected = self._mac(method, node_id, time_ms, peer)
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            raise ProofRefused(
                "FORGED",
                f"the proof from {node_id[:64]!r} does not verify (not made with this "
                "cluster's secret, or for another method or client)",
            )
        age_s = self.clock() - time_ms / 1000
        if abs(age_s) > WINDOW_S:
            raise ProofRefused(
                "STALE",
                f"the proof from {node_id[:64]!r} was made {age_s:+.0f} s from this node's "
                f"clock, beyond {WINDOW_S:.0f} s (replayed, or node clocks apart)",
            )
        return Forwarded(node_id, peer, time_ms / 1000)

    def overdue(self, forwarded: Forwarded, budget_s: float) -> float | None:
        """How many seconds past its client's deadline (less ``DEADLINE_MARGIN_S``) the
        forwarded call is now, ``budget_s`` after its proof was made; None while in time."""
        late_s = self.clock() - forwarded.made_at_s - (budget_s - DEADLINE_MARGIN_S)
        return late_s if late_s > 0 else None

    def _log(self, refused: ProofRefused) -> None:
        """At most one line per ``LOG_EVERY_S`` and reason; the next says how many were
        left out."""
        now = time.monotonic()
        logged_at, left_out = self._logged.get(refused.reason, (-LOG_EVERY_S, 0))
        if now - logged_at < LOG_EVERY_S:
            self._logged[refused.reason] = (logged_at, left_out + 1)
            return
        self._logged[refused.reason] = (now, 0)
        log.warning(
            "%s%s",
            refused,
            f" ({left_out} more like it in the last {LOG_EVERY_S:.0f} s not logged)"
            if left_out
            else "",
        )


def without_proof_headers(metadata: Iterable[tuple[str, object]]) -> list[tuple[str, object]]:
    """A call's metadata as the client sent it, for the call forwarded: headers gRPC sets
    itself and any proof headers the caller put there are left out."""
    return [
        (key, value)
        for key, value in metadata
        if key not in HEADERS and key != "user-agent" and not key.startswith((":", "grpc-"))
    ]
