"""The ACL decision: what a caller may do, asked by every service on the request it then
executes (never by a door, never on another copy of the request).

A need is one permission: any of some actions on one resource. The rules of the jobs, in
one place (docs/security.md lists them per request of every door):

- publishing to a topic: PUBLISH on it (``publish``);
- reading a topic: SUBSCRIBE on it (``read``);
- consuming as a group: SUBSCRIBE on the topic and on the group (``consume``);
- a group's retry topic ``%RETRY%<group>`` is the group's own: reading it, consuming it
  or writing to it (a 4.x consumer handing a message back) needs SUBSCRIBE on the group,
  as RocketMQ's broker asks; a dead-letter topic ``%DLQ%<group>`` is an ordinary topic
  (grant SUBSCRIBE on it, or on ``%DLQ%*``, to whoever drains dead letters);
- resending a group's dead letters (``node/services/dead_letter_resend.py``): what the
  resend reads and writes, no rule of its own: SUBSCRIBE on the group (it writes the
  group's retry topic and its POP state, as a consumer of the group does) and on its
  dead-letter topic ``%DLQ%<group>`` (it reads it) (``resend_dead_letters``);
- reading a node's configuration (``node/services/node_settings.py``; secrets are never
  in it): admin rights, as RocketMQ's broker asks for getBrokerConfig;
- a request that needs a resource it does not name (EndTransaction without a topic, a
  lookup across every topic) and every change of the cluster: admin rights.

With authentication off (``Permissions(enabled=False)``) everything is allowed. With it on,
a caller without a verified user is refused (a door that forgot to authenticate refuses,
it does not open).

Refusals raise ``AccessDenied`` (an ``InvalidRequest`` with the code FORBIDDEN, or
UNAUTHORIZED for a caller without credentials), whose message says what was missing:
``FORBIDDEN: user app has no publish permission on topic payments``. They are logged
through ``node/refusal_log.py``: at most a line per ten seconds for each call and verified
user, so a flood of refusals logs at a bounded rate.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from node.refusal_log import RefusalLog
from node.rpc_status import AccessDenied
from node.services.caller import Caller
from routing.acl import Action, ResourceKind, is_allowed
from routing.metadata import RETRY_PREFIX, dead_letter_topic_of, retry_topic_of

log = logging.getLogger("ferrymq.auth")
NEEDS_CACHED = 4096
PUBLISH = (Action.PUBLISH,)
SUBSCRIBE = (Action.SUBSCRIBE,)
PUBLISH_OR_SUBSCRIBE = (Action.PUBLISH, Action.SUBSCRIBE)


@dataclass(frozen=True, slots=True)
class Need:
    """One permission a request needs: any of ``actions`` on the resource."""

    actions: tuple[Action, ...]
    kind: ResourceKind
    name: str


ADMIN = Need((), ResourceKind.TOPIC, "")  # admin rights: no entry grants them


def group_of_retry_topic(topic: str) -> str | None:
    """The group whose retry topic ``topic`` is, or None."""
    return topic[len(RETRY_PREFIX) :] if topic.startswith(RETRY_PREFIX) else None


def _topic(actions: tuple[Action, ...], topic: str) -> Need:
    if not topic:
        return ADMIN  # a request that names no topic acts on any: admins only
    group = group_of_retry_topic(topic)
    if group is not None:  # the group's own topic: its members' permission
        return group_need(group)
    return Need(actions, ResourceKind.TOPIC, topic)


def group_need(group: str) -> Need:
    if not group:
        return ADMIN
    return Need(SUBSCRIBE, ResourceKind.GROUP, group)


# The needs of the requests on the data path, built once per name (a send's needs cost a
# cache lookup, not new objects): tuples, so a caller never changes a shared one.
@functools.lru_cache(maxsize=NEEDS_CACHED)
def publish(topic: str) -> tuple[Need, ...]:
    return (_topic(PUBLISH, topic),)


@functools.lru_cache(maxsize=NEEDS_CACHED)
def read(topic: str) -> tuple[Need, ...]:
    """Reading a topic without a group (bounds, queries)."""
    return (_topic(SUBSCRIBE, topic),)


def describe(topic: str) -> tuple[Need, ...]:
    """Seeing a topic's description: a publisher or a subscriber."""
    return (_topic(PUBLISH_OR_SUBSCRIBE, topic),)


@functools.lru_cache(maxsize=NEEDS_CACHED)
def consume(topic: str, group: str) -> tuple[Need, ...]:
    """Consuming ``topic`` as ``group``: both must be allowed."""
    first = _topic(SUBSCRIBE, topic)
    if group and first != group_need(group):
        return (first, group_need(group))
    return (first,)


def resend_dead_letters(group: str) -> tuple[Need, ...]:
    """Resending ``group``'s dead letters: reading its dead-letter topic and writing its
    retry topic (a consumer's right on the group)."""
    return (*read(dead_letter_topic_of(group)), *publish(retry_topic_of(group)))


class Permissions:
    def __init__(self, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self._log = RefusalLog(log, clock)

    def require(self, caller: Caller, needs: Iterable[Need]) -> None:
        """Nothing when ``caller`` holds every need; ``AccessDenied`` otherwise."""
        if not self.enabled:
            return
        user = caller.user
        if user is None:
            self._log.refused(caller.method, "", "", "no verified user")
            raise AccessDenied(False, "UNAUTHENTICATED: the request carries no credentials")
        if user.admin:
            return
        for need in needs:
            if need is ADMIN:
                reason = f"{caller.method} needs admin rights"
                self._log.refused(caller.method, user.access_key, user.access_key, reason)
                raise AccessDenied(True, f"FORBIDDEN: user {user.access_key}: {reason}")
            if not any(is_allowed(user, action, need.kind, need.name) for action in need.actions):
                wanted = " or ".join(action.value.lower() for action in need.actions)
                reason = f"no {wanted} permission on {need.kind.value.lower()} {need.name}"
                self._log.refused(caller.method, user.access_key, user.access_key, reason)
                raise AccessDenied(True, f"FORBIDDEN: user {user.access_key} has {reason}")

    def require_admin(self, caller: Caller) -> None:
        self.require(caller, (ADMIN,))

    def may(self, caller: Caller, needs: Iterable[Need]) -> bool:
        """Whether ``require`` would pass, without logging a refusal (for filtering what
        a caller is shown or sent)."""
        if not self.enabled:
            return True
        user = caller.user
        if user is None:
            return False
        if user.admin:
            return True
        return all(
            need is not ADMIN
            and any(is_allowed(user, action, need.kind, need.name) for action in need.actions)
            for need in needs
        )
