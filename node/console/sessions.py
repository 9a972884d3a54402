"""Console sessions: a signed cookie, and the CSRF token that goes with it.

A session is the cookie's own content, signed with HMAC-SHA256 under a key derived from the
cluster secret (every node of a cluster derives the same key; a standalone node without a
secret makes one up at start): ``<payload>.<signature>``, both base64url, where the payload
names the access key, the expiry, a random session id and a fingerprint of the user's sealed
secret. A session therefore ends when it expires, when it is logged out (its id is
remembered as revoked until it would have expired), when the user is deleted, or when the
user's secret key changes (the fingerprint no longer matches). The user's rights are read
from the routing state on every request, never from the cookie.

The CSRF token is an HMAC of the session id under the same key: the page reads it once
(``GET /api/session``) and sends it in the ``X-CSRF-Token`` header of every state-changing
request; another site can neither read it nor make a browser add a custom header.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from node.secret_box import derive_key
from routing.acl import User

KEY_LABEL = b"ferrymq console sessions v1"
COOKIE_MAX_CHARS = 1024
REVOKED_MAX = 10_000  # logouts remembered; past it the oldest expired ones go first


@dataclass(frozen=True, slots=True)
class Session:
    access_key: str  # "" with authentication off (nobody to name)
    expires_s: int
    session_id: str
    fingerprint: str


def fingerprint(user: User | None) -> str:
    """What changes when a user's secret key changes (not the secret: a hash of its sealed
    form, which is random per sealing)."""
    if user is None:
        return ""
    return hashlib.sha256(user.sealed_secret).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionKeys:
    """Issues and verifies session cookies and CSRF tokens."""

    def __init__(
        self, cluster_secret: str, ttl_s: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = (
            derive_key(cluster_secret, KEY_LABEL) if cluster_secret else secrets.token_bytes(32)
        )
        self.ttl_s = ttl_s
        self.clock = clock
        self._revoked: dict[str, int] = {}  # session id -> its expiry

    def issue(self, user: User | None) -> tuple[str, Session]:
        session = Session(
            user.access_key if user is not None else "",
            int(self.clock()) + self.ttl_s,
            secrets.token_hex(16),
            fingerprint(user),
        )
        payload = json.dumps(
            [session.access_key, session.expires_s, session.session_id, session.fingerprint],
            separators=(",", ":"),
        ).encode()
        return f"{_b64(payload)}.{_b64(self._sign(b'session:' + payload))}", session

    def verify(self, cookie: str) -> Session | None:
        """The session a cookie carries, or None (forged, altered, expired, revoked)."""
        if not cookie or len(cookie) > COOKIE_MAX_CHARS or cookie.count(".") != 1:
            return None
        payload_text, signature_text = cookie.split(".")
        try:
            payload, signature = _unb64(payload_text), _unb64(signature_text)
        except ValueError:
            return None
        if not hmac.compare_digest(signature, self._sign(b"session:" + payload)):
            return None
        access_key, expires_s, session_id, print_ = json.loads(payload)
        session = Session(access_key, expires_s, session_id, print_)
        if session.expires_s <= self.clock() or session.session_id in self._revoked:
            return None
        return session

    def csrf_token(self, session: Session) -> str:
        return _b64(self._sign(b"csrf:" + session.session_id.encode()))

    def csrf_matches(self, session: Session, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.csrf_token(session).encode())

    def revoke(self, session: Session) -> None:
        now = self.clock()
        if len(self._revoked) >= REVOKED_MAX:
            self._revoked = {sid: exp for sid, exp in self._revoked.items() if exp > now}
            while len(self._revoked) >= REVOKED_MAX:  # all still valid: the oldest go
                self._revoked.pop(next(iter(self._revoked)))
        self._revoked[session.session_id] = session.expires_s

    def _sign(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()
