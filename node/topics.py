"""The standalone node's topic and consumer-group table.

Until routing is replicated with Raft (the routing issue), a node keeps its own table in
``<data>/topics.json``, written to a temporary file, fsynced and renamed, so a crash leaves
the old or the new table, never a torn one.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import enum
import json
import os
import re
from dataclasses import asdict, dataclass

NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
NAME_MAX_LENGTH = 127  # RocketMQ's limit for topic and group names
QUEUES_MAX = 1024
DEFAULT_MAX_DELIVERY_ATTEMPTS = 16
SYSTEM_PREFIX = "%SYS%"
DLQ_PREFIX = "%DLQ%"
GROUP_NAME_MAX_LENGTH = NAME_MAX_LENGTH - len(DLQ_PREFIX)  # so %DLQ%<group> is a legal name


def dead_letter_topic_of(group: str) -> str:
    return DLQ_PREFIX + group


class MessageType(enum.Enum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"


class Permission(enum.Enum):
    READ = "READ"
    WRITE = "WRITE"
    READ_WRITE = "READ_WRITE"


class TopicError(ValueError):
    """A request names an invalid or unknown topic or group; ``reason`` is stable."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queue_count: int = 8
    message_type: MessageType = MessageType.NORMAL
    permission: Permission = Permission.READ_WRITE


@dataclass(frozen=True)
class GroupConfig:
    name: str
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    fifo: bool = False


def check_name(kind: str, name: str) -> None:
    """``TopicError`` unless ``name`` is a legal topic or group name."""
    if not name:
        raise TopicError(f"ILLEGAL_{kind}", f"{kind.lower()} name is empty")
    if len(name) > NAME_MAX_LENGTH:
        raise TopicError(
            f"ILLEGAL_{kind}", f"{kind.lower()} name is {len(name)} characters, the limit is 127"
        )
    if not NAME_PATTERN.match(name):
        raise TopicError(
            f"ILLEGAL_{kind}",
            f"{kind.lower()} name {name!r} has characters outside [%|a-zA-Z0-9_-]",
        )


class TopicTable:
    def __init__(self, path: str) -> None:
        self.path = path
        self.topics: dict[str, TopicConfig] = {}
        self.groups: dict[str, GroupConfig] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            for t in raw.get("topics", []):
                config = TopicConfig(
                    t["name"],
                    t["queue_count"],
                    MessageType(t["message_type"]),
                    Permission(t["permission"]),
                )
                self.topics[config.name] = config
            for g in raw.get("groups", []):
                self.groups[g["name"]] = GroupConfig(
                    g["name"], g["max_delivery_attempts"], g["fifo"]
                )

    # ---- topics ----------------------------------------------------------------------
    def create_topic(self, config: TopicConfig) -> TopicConfig:
        check_name("TOPIC", config.name)
        if config.name.startswith(SYSTEM_PREFIX):
            raise TopicError("ILLEGAL_TOPIC", f"names starting with {SYSTEM_PREFIX} are reserved")
        if not 1 <= config.queue_count <= QUEUES_MAX:
            raise TopicError(
                "ILLEGAL_TOPIC", f"queue count must be 1..{QUEUES_MAX}, got {config.queue_count}"
            )
        if config.name in self.topics:
            raise TopicError("TOPIC_EXISTS", f"topic {config.name} already exists")
        self.topics[config.name] = config
        self._save()
        return config

    def update_topic(self, config: TopicConfig) -> TopicConfig:
        current = self.topic(config.name)
        if config.queue_count < current.queue_count:
            raise TopicError(
                "ILLEGAL_TOPIC", "queues cannot be removed: their messages would become unreachable"
            )
        if not 1 <= config.queue_count <= QUEUES_MAX:
            raise TopicError("ILLEGAL_TOPIC", f"queue count must be 1..{QUEUES_MAX}")
        self.topics[config.name] = config
        self._save()
        return config

    def delete_topic(self, name: str) -> None:
        self.topic(name)
        del self.topics[name]
        self._save()

    def topic(self, name: str) -> TopicConfig:
        check_name("TOPIC", name)
        found = self.topics.get(name)
        if found is None:
            raise TopicError("TOPIC_NOT_FOUND", f"topic {name} does not exist")
        return found

    # ---- groups ----------------------------------------------------------------------
    def create_group(self, config: GroupConfig) -> GroupConfig:
        check_name("CONSUMER_GROUP", config.name)
        if len(config.name) > GROUP_NAME_MAX_LENGTH:
            raise TopicError(
                "ILLEGAL_CONSUMER_GROUP",
                f"group name is {len(config.name)} characters, the limit is "
                f"{GROUP_NAME_MAX_LENGTH} (its dead-letter topic {DLQ_PREFIX}<group> must fit)",
            )
        if not 1 <= config.max_delivery_attempts <= 1000:
            raise TopicError("ILLEGAL_CONSUMER_GROUP", "max delivery attempts must be 1..1000")
        if config.name in self.groups:
            raise TopicError("GROUP_EXISTS", f"group {config.name} already exists")
        self.groups[config.name] = config
        self._save()
        return config

    def dead_letter_topic(self, group: str) -> TopicConfig:
        """The group's ``%DLQ%<group>`` topic, created (one queue) the first time."""
        name = dead_letter_topic_of(group)
        found = self.topics.get(name)
        if found is None:
            found = self.topics[name] = TopicConfig(name, queue_count=1)
            self._save()
        return found

    def delete_group(self, name: str) -> None:
        self.group(name)
        del self.groups[name]
        self._save()

    def group(self, name: str) -> GroupConfig:
        check_name("CONSUMER_GROUP", name)
        found = self.groups.get(name)
        if found is None:
            raise TopicError("CONSUMER_GROUP_NOT_FOUND", f"group {name} does not exist")
        return found

    # ---- persistence -----------------------------------------------------------------
    def _save(self) -> None:
        document = {
            "topics": [
                {
                    **asdict(t),
                    "message_type": t.message_type.value,
                    "permission": t.permission.value,
                }
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
            "groups": [asdict(g) for g in sorted(self.groups.values(), key=lambda g: g.name)],
        }
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        directory = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
