"""Who sent a request: the RocketMQ 5 signature headers, verified against the users of the
routing state.

Every official RocketMQ 5 client sends, on every call::

    x-mq-date-time: 20261123T025559Z
    authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1(secret key, the x-mq-date-time value)>

The signature covers only the date, so a captured header is a bearer token until the date
leaves the clock-skew window: that window bounds replay, and TLS keeps headers from being
captured. Unknown access keys and wrong signatures get the same answer, so the refusal
does not tell which access keys exist.

The remoting port's 4.x clients sign with RocketMQ ACL 1.0 instead (``AccessKey`` and
``Signature`` ext fields over the request's own fields and body): ``authenticate_content``
verifies those against the same users and secrets.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ferrymq.codec.acl_signature import sign_content
from node.refusal_log import RefusalLog
from node.rpc_status import AccessDenied
from node.secret_box import SealError, SecretBox
from routing.acl import User

log = logging.getLogger("ferrymq.auth")
SCHEME = "MQv2-HMAC-SHA1"
SIGNED_HEADER = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
BAD_SIGNATURE = "the signature does not match (wrong access key or secret key)"
BAD_SECRET = "wrong access key or secret key"
BAD_CREDENTIALS = ""  # the refusal log's key for every bad credential (no access key is "")


class AuthenticationError(Exception):
    """The request carries no valid credentials; the message says what was wrong (and
    never any secret)."""


@dataclass(frozen=True)
class Credentials:
    """The parsed ``authorization`` header (the signature is not a secret: it is a
    function of the date)."""

    access_key: str
    signed_headers: str
    signature: str


def parse_authorization(value: str) -> Credentials:
    scheme, _, rest = value.partition(" ")
    if scheme != SCHEME:
        raise AuthenticationError(f"authorization scheme must be {SCHEME}")
    fields = {}
    for part in rest.split(","):
        name, sep, field_value = part.strip().partition("=")
        if sep:
            fields[name] = field_value
    if not {"Credential", "SignedHeaders", "Signature"} <= fields.keys():
        raise AuthenticationError(
            "authorization must carry Credential, SignedHeaders and Signature"
        )
    return Credentials(fields["Credential"], fields["SignedHeaders"], fields["Signature"])


def sign(secret_key: str, date_time: str) -> str:
    """The signature the official clients compute (``rocketmq.v5.util.Signature.sign``)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def signature_headers(access_key: str, secret_key: str, now_s: float | None = None) -> tuple:
    """The two headers a client sends to authenticate a call signed now."""
    date_time = time.strftime(DATE_FORMAT, time.gmtime(time.time() if now_s is None else now_s))
    authorization = (
        f"{SCHEME} Credential={access_key}, SignedHeaders={SIGNED_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )
    return ((SIGNED_HEADER, date_time), ("authorization", authorization))


def parse_date_time(value: str) -> float:
    """Seconds since the epoch of an ``x-mq-date-time`` value (UTC)."""
    try:
        return float(calendar.timegm(time.strptime(value, DATE_FORMAT)))
    except ValueError:
        raise AuthenticationError(f"{SIGNED_HEADER} {value!r} is not {DATE_FORMAT}") from None


class Authenticator:
    """Verifies signatures against the users ``user_of`` finds (the routing state).

    Opened secrets are cached by (access key, sealed bytes), so a changed secret is seen
    at once and each request costs one HMAC, not one decryption."""

    def __init__(
        self,
        user_of: Callable[[str], User | None],
        box: SecretBox,
        clock_skew_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.user_of = user_of
        self.box = box
        self.clock_skew_s = clock_skew_s
        self.clock = clock
        self._secrets: dict[tuple[str, bytes], str] = {}

    def authenticate(self, metadata: Mapping[str, str]) -> User:
        header = metadata.get("authorization")
        if not header:
            raise AuthenticationError("the request carries no authorization header")
        credentials = parse_authorization(header)
        if credentials.signed_headers.lower() != SIGNED_HEADER:
            raise AuthenticationError(f"SignedHeaders must be {SIGNED_HEADER}")
        date_time = metadata.get(SIGNED_HEADER, "")
        if not date_time:
            raise AuthenticationError(f"the request carries no {SIGNED_HEADER} header")
        skew = parse_date_time(date_time) - self.clock()
        if abs(skew) > self.clock_skew_s:
            raise AuthenticationError(
                f"{SIGNED_HEADER} {date_time} is {skew:+.0f} s from the server's UTC clock, "
                f"beyond the allowed {self.clock_skew_s:.0f} s (expired, replayed, or a "
                "client clock or time zone that is off)"
            )
        user = self.user_of(credentials.access_key)
        if user is None:
            raise AuthenticationError(BAD_SIGNATURE)
        expected = sign(self._secret_of(user), date_time)
        if not hmac.compare_digest(expected.encode(), credentials.signature.lower().encode()):
            raise AuthenticationError(BAD_SIGNATURE)
        return user

    def authenticate_content(
        self, access_key: str, signature: str, contents: Sequence[bytes]
    ) -> User:
        """The user whose secret signs one of ``contents`` (the forms a client may have
        signed) into ``signature``: RocketMQ ACL 1.0, which signs the request itself and
        carries no date, so it bounds no replay (TLS keeps frames from being captured)."""
        if not access_key or not signature:
            raise AuthenticationError(
                "the request carries no AccessKey and Signature ext fields: this node "
                "requires RocketMQ ACL 1.0 signatures (the 4.x clients' AclClientRPCHook)"
            )
        user = self.user_of(access_key)
        if user is None:
            raise AuthenticationError(BAD_SIGNATURE)
        secret = self._secret_of(user)
        wanted = signature.encode()
        for content in contents:
            if hmac.compare_digest(sign_content(secret, content).encode(), wanted):
                return user
        raise AuthenticationError(BAD_SIGNATURE)

    def authenticate_secret(self, access_key: str, secret_key: str) -> User:
        """The user whose secret key ``secret_key`` is: the web console's login, where the
        browser sends the keys once (over TLS, or on loopback) and then holds a session."""
        if not access_key or not secret_key:
            raise AuthenticationError("the login carries no access key or no secret key")
        user = self.user_of(access_key)
        if user is None:
            raise AuthenticationError(BAD_SECRET)
        if not hmac.compare_digest(self._secret_of(user).encode(), secret_key.encode()):
            raise AuthenticationError(BAD_SECRET)
        return user

    def secret_of(self, user: User) -> str:
        """``user``'s secret key (a node signs a call as the user: the console's failover
        handed to the master)."""
        return self._secret_of(user)

    def _secret_of(self, user: User) -> str:
        key = (user.access_key, user.sealed_secret)
        secret = self._secrets.get(key)
        if secret is None:
            try:
                secret = self.box.open(user.access_key, user.sealed_secret)
            except SealError as error:
                log.error(
                    "user %s: %s (is the cluster secret the same on every node?)",
                    user.access_key,
                    error,
                )
                raise AuthenticationError(BAD_SIGNATURE) from None
            if len(self._secrets) > 10_000:
                self._secrets.clear()
            self._secrets[key] = secret
        return secret


class Verification:
    """Who a request is, for either door: the verified user, or ``AccessDenied``
    (UNAUTHENTICATED, saying what was wrong) with the refusal logged at a bounded rate
    (``node/refusal_log.py``; the claimed access key is the caller's choice, so it never
    picks the log line: every bad credential of a call shares one)."""

    def __init__(self, authenticator: Authenticator, clock: Callable[[], float] = time.monotonic):
        self.authenticator = authenticator
        self._log = RefusalLog(log, clock)

    def of_metadata(self, method: str, metadata: Mapping[str, str]) -> User:
        """The user of a gRPC call's signature headers."""
        try:
            return self.authenticator.authenticate(metadata)
        except AuthenticationError as error:
            raise self._refused(method, _claimed_access_key(metadata), error) from None

    def of_signature(
        self, method: str, access_key: str, signature: str, contents: Sequence[bytes]
    ) -> User:
        """The user of a remoting request's ACL 1.0 signature."""
        try:
            return self.authenticator.authenticate_content(access_key, signature, contents)
        except AuthenticationError as error:
            raise self._refused(method, access_key[:64], error) from None

    def of_secret(self, method: str, access_key: str, secret_key: str) -> User:
        """The user of a console login's access key and secret key."""
        try:
            return self.authenticator.authenticate_secret(access_key, secret_key)
        except AuthenticationError as error:
            raise self._refused(method, access_key[:64], error) from None

    def _refused(self, method: str, claimed: str, error: AuthenticationError) -> AccessDenied:
        self._log.refused(method, BAD_CREDENTIALS, claimed, str(error))
        return AccessDenied(False, f"UNAUTHENTICATED: {error}")


def _claimed_access_key(metadata: Mapping[str, str]) -> str:
    header = metadata.get("authorization", "")
    _, _, rest = header.partition("Credential=")
    return rest.partition(",")[0][:64]
