"""Node configuration: a TOML file where every option has a default (DESIGN §11).

Layout of ``node.toml``::

    [node]
    id = "node-1"            # unique in the cluster
    group = "group-1"        # broker group it replicates with
    host = "127.0.0.1"       # address advertised to clients and peers
    data_dir = "data/node-1"

    [ports]                  # 0 asks the OS for a free port (tests)
    grpc = 8081
    metrics = 5557
    replication = 10912
    raft = 9876

    [messages]
    max_delay_ms = 3456000000              # delayed messages: at most 40 days ahead
    transaction_check_interval_ms = 60000  # ask a producer about a half this often
    transaction_max_checks = 15            # then roll it back

    [store]                  # any field of store.config.StoreConfig but data_dir
    flush_mode = "ASYNC_FLUSH"
    commitlog_segment_bytes = 1073741824

Unknown sections or keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from typing import Any

from store.config import FlushMode, StoreConfig

DEFAULT_GRPC_PORT = 8081
DEFAULT_METRICS_PORT = 5557
DEFAULT_REPLICATION_PORT = 10912
DEFAULT_RAFT_PORT = 9876


class ConfigError(ValueError):
    """The configuration file is malformed or names an unknown option."""


@dataclass(frozen=True)
class Ports:
    grpc: int = DEFAULT_GRPC_PORT
    metrics: int = DEFAULT_METRICS_PORT
    replication: int = DEFAULT_REPLICATION_PORT
    raft: int = DEFAULT_RAFT_PORT


@dataclass(frozen=True)
class MessagingOptions:
    max_delay_ms: int = 40 * 24 * 3600 * 1000
    transaction_check_interval_ms: int = 60_000
    transaction_max_checks: int = 15


@dataclass(frozen=True)
class NodeConfig:
    id: str = "node-1"
    group: str = "group-1"
    host: str = "127.0.0.1"
    data_dir: str = "data/node-1"
    ports: Ports = field(default_factory=Ports)
    messages: MessagingOptions = field(default_factory=MessagingOptions)
    store: dict[str, Any] = field(default_factory=dict)

    def store_config(self) -> StoreConfig:
        options = dict(self.store)
        if "flush_mode" in options:
            options["flush_mode"] = FlushMode(options["flush_mode"])
        return StoreConfig(
            data_dir=self.data_dir, store_host=self.host, store_port=self.ports.grpc, **options
        )


_STORE_FIELDS = {f.name for f in dataclasses.fields(StoreConfig)} - {
    "data_dir",
    "store_host",
    "store_port",
}
_NODE_FIELDS = {"id", "group", "host", "data_dir"}
_PORT_FIELDS = {f.name for f in dataclasses.fields(Ports)}
_MESSAGES_FIELDS = {f.name for f in dataclasses.fields(MessagingOptions)}


def parse_node_config(text: str) -> NodeConfig:
    """Parse ``node.toml`` text; raises ``ConfigError`` naming the offending option."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"node.toml is not valid TOML: {error}") from error
    unknown_sections = set(raw) - {"node", "ports", "messages", "store"}
    if unknown_sections:
        raise ConfigError(f"unknown section(s): {', '.join(sorted(unknown_sections))}")
    node = _checked(raw.get("node", {}), _NODE_FIELDS, "node")
    ports = _checked(raw.get("ports", {}), _PORT_FIELDS, "ports")
    store = _checked(raw.get("store", {}), _STORE_FIELDS, "store")
    messages = _checked(raw.get("messages", {}), _MESSAGES_FIELDS, "messages")
    for name, value in messages.items():
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"messages.{name} must be a positive integer, got {value!r}")
    for name, port in ports.items():
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"ports.{name} must be an integer in 0..65535, got {port!r}")
    if "flush_mode" in store and store["flush_mode"] not in {m.value for m in FlushMode}:
        raise ConfigError(
            f"store.flush_mode must be ASYNC_FLUSH or SYNC_FLUSH, got {store['flush_mode']!r}"
        )
    config = NodeConfig(
        **node, ports=Ports(**ports), messages=MessagingOptions(**messages), store=store
    )
    try:
        config.store_config()
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[store]: {error}") from error
    return config


def _checked(section: Any, allowed: set[str], name: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ConfigError(f"[{name}] must be a table")
    unknown = set(section) - allowed
    if unknown:
        raise ConfigError(f"unknown option(s) in [{name}]: {', '.join(sorted(unknown))}")
    return dict(section)


def load_node_config(
    path: str | None, *, data_dir: str | None = None, grpc_port: int | None = None
) -> NodeConfig:
    """Read ``path`` (defaults when None) and apply command-line overrides."""
    text = ""
    if path is not None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    config = parse_node_config(text)
    if data_dir is not None:
        config = dataclasses.replace(config, data_dir=data_dir)
    if grpc_port is not None:
        config = dataclasses.replace(
            config, ports=dataclasses.replace(config.ports, grpc=grpc_port)
        )
    return config


def render_node_config(config: NodeConfig) -> str:
    """The effective configuration as TOML, written to ``<data>/node.toml`` at start."""
    lines = ["[node]"]
    for name in ("id", "group", "host", "data_dir"):
        lines.append(f"{name} = {_toml_value(getattr(config, name))}")
    lines.append("")
    lines.append("[ports]")
    for name in sorted(_PORT_FIELDS):
        lines.append(f"{name} = {getattr(config.ports, name)}")
    lines.append("")
    lines.append("[messages]")
    for name in sorted(_MESSAGES_FIELDS):
        lines.append(f"{name} = {getattr(config.messages, name)}")
    lines.append("")
    lines.append("[store]")
    effective = config.store_config()
    for name in sorted(_STORE_FIELDS):
        value = getattr(effective, name)
        lines.append(
            f"{name} = {_toml_value(value.value if isinstance(value, FlushMode) else value)}"
        )
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
