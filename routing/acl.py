"""Users and their access rules: records of the routing state, and the one function that
decides whether a user may do something.

A user is an access key, its secret sealed by the node that created it (``node.secret_box``:
the nodes must read it back to verify HMAC signatures, so it cannot be hashed), an admin
flag and a list of ACL entries. The decision is deliberately simple to audit:

- an admin may do everything;
- nobody else may touch a system topic (``%SYS%...``), whatever the entries say;
- otherwise an entry matching the action and the resource that says DENY refuses, even when
  another entry allows (deny wins);
- otherwise an ALLOW entry that matches permits; nothing matching refuses (default deny).

A pattern is a resource name, ``*`` (every name), or a prefix ending in ``*``
(``orders-*``). Records are frozen dataclasses, like every routing record, so they pickle
into the Raft log and snapshots and are never changed in place.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from routing.metadata import NAME_MAX_LENGTH, NAME_PATTERN, SYSTEM_PREFIX, TopicError

ACCESS_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]{3,64}")
ACL_ENTRIES_MAX = 256


class Effect(enum.Enum):
    ALLOW = "ALLOW"
    DENY = "DENY"


class Action(enum.Enum):
    PUBLISH = "PUBLISH"
    SUBSCRIBE = "SUBSCRIBE"


class ResourceKind(enum.Enum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"


@dataclass(frozen=True)
class AclEntry:
    effect: Effect
    action: Action
    kind: ResourceKind
    pattern: str

    def matches(self, action: Action, kind: ResourceKind, name: str) -> bool:
        if action is not self.action or kind is not self.kind:
            return False
        if self.pattern.endswith("*"):
            return name.startswith(self.pattern[:-1])
        return name == self.pattern

    def __str__(self) -> str:
        return (
            f"{self.effect.value.lower()} {self.action.value.lower()} "
            f"{self.kind.value.lower()}:{self.pattern}"
        )


@dataclass(frozen=True)
class User:
    """``sealed_secret`` is the secret key encrypted at rest (never the plain secret);
    it is kept out of ``repr`` so that no log line ever carries it."""

    access_key: str
    sealed_secret: bytes = field(repr=False)
    admin: bool = False
    acl: tuple[AclEntry, ...] = ()


def is_allowed(user: User, action: Action, kind: ResourceKind, name: str) -> bool:
    """Whether ``user`` may do ``action`` on the resource ``kind``/``name`` (deny wins)."""
    if user.admin:
        return True
    if kind is ResourceKind.TOPIC and name.startswith(SYSTEM_PREFIX):
        # The node's own topics (transaction halves, parked delayed messages, POP and
        # offset records) hold other topics' messages: no entry opens them, not even "*".
        return False
    matching = [entry for entry in user.acl if entry.matches(action, kind, name)]
    if any(entry.effect is Effect.DENY for entry in matching):
        return False
    return bool(matching)


def check_access_key(access_key: str) -> None:
    if not ACCESS_KEY_PATTERN.fullmatch(access_key):
        raise TopicError(
            "ILLEGAL_USER", f"access key {access_key!r} must be 3..64 of [A-Za-z0-9_.-]"
        )


def check_entry(entry: AclEntry) -> None:
    """``TopicError`` unless ``entry`` is a meaningful rule."""
    if entry.kind is ResourceKind.GROUP and entry.action is Action.PUBLISH:
        raise TopicError("ILLEGAL_ACL", "publish applies to topics only (groups subscribe)")
    pattern = entry.pattern
    name = pattern[:-1] if pattern.endswith("*") else pattern
    if pattern != "*" and (
        not name or len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.fullmatch(name)
    ):
        raise TopicError(
            "ILLEGAL_ACL",
            f"pattern {pattern!r} must be a name, '*' or a prefix ending in '*'",
        )
