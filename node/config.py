"""Node configuration: a TOML file where every option has a default (ports: docs/architecture.md,
"Ports, and cluster.json").

Layout of ``node.toml``::

    [node]
    id = "node-1"            # unique in the cluster
    group = "group-1"        # broker group it replicates with
    host = "127.0.0.1"       # address advertised to clients; the client port binds it
    internal_host = ""       # replication and Raft bind it and peers dial it (default:
                             # host); a voter's Raft address is internal_host:ports.raft
    data_dir = "data/node-1"

    [ports]                  # 0 asks the OS for a free port (tests)
    grpc = 8081
    remoting = 10911         # RocketMQ 4.x clients: broker and NameServer requests
    metrics = 5557
    replication = 10912
    raft = 8876

    [metrics]                # see docs/security.md
    host = "127.0.0.1"       # /metrics binds it: set an address Prometheus can reach
    bearer_token = ""        # set: a scrape needs "Authorization: Bearer <token>" (else 401)

    [messages]
    max_delay_ms = 3456000000              # delayed messages: at most 40 days ahead
    transaction_check_interval_ms = 60000  # ask a producer about a half this often
    transaction_max_checks = 15            # then roll it back
    max_concurrent_rpcs = 4096             # client port: calls served at once (streams and
                                           # long polls included); more: RESOURCE_EXHAUSTED
    untyped_topics_take_any_type = true    # RocketMQ 5: a topic created without a type
                                           # takes every type (false: it is NORMAL)
    auto_create_groups = true              # a consumer group is created on first use (a
                                           # receive, pull or heartbeat naming it)
    delay_levels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
                                           # RocketMQ 4.x delay levels 1..n (DELAY property,
                                           # consumer retries): the same on every node
    max_request_bytes = 536870912          # held by every request being handled, both
                                           # doors: past it, SYSTEM_BUSY (remoting) or
                                           # RESOURCE_EXHAUSTED (gRPC); at least 67108864
    max_request_bytes_per_connection = 67108864  # held by one connection's requests:
                                           # past it, a remoting connection is not read
                                           # until below half, a gRPC one's calls refused
    max_producer_groups_per_client = 64    # a 4.x client's producer groups (heartbeats,
                                           # halves sent): more, the heartbeat is refused
    long_polling_s = 20                    # the long poll consumers are told to use and
                                           # the longest a receive waits (a push consumer's
                                           # stop waits for its long polls): 1..60

    [console]                # the web console (node/console/, docs/console.md): off by default
    enabled = false
    host = "127.0.0.1"       # with security.auth = false only a loopback address is allowed
    port = 8090              # 0 asks the OS (the node prints "console on host:port")
    session_ttl_s = 28800    # a login lasts this long (60..604800)
    hostnames = []           # names browsers may use for it besides IP addresses, localhost
                             # and node.host (the Host header is checked: DNS rebinding)

    [remoting]               # what clients may hold of the RocketMQ 4.x port
                             # (docs/security.md, "The remoting port")
    max_connections = 10000              # open at once; one more is closed at once
    max_connections_per_address = 1000   # from one client address (clients behind one
                                         # NAT address share it)
    idle_timeout_ms = 120000             # nothing received, nothing in flight: closed
    first_frame_timeout_ms = 10000       # no whole request after accept (TLS handshake
                                         # included): closed

    [lite]                   # lite topics (RocketMQ 5.5): expiry of idle ones, for LITE
                             # topics with lite.topic.expiration (node/lite_expiry.py)
    expiry_check_interval_s = 120  # the master looks for idle lite topics this often
                             # (RocketMQ's liteTtlCheckInterval)
    min_expiry_s = 900       # no lite topic expires sooner after its last message, and
                             # none in a node's first min_expiry_s as master (RocketMQ's
                             # minLiteTTl, 15 min); 0 in tests only

    [store]                  # any field of store.config.StoreConfig but data_dir
    flush_mode = "ASYNC_FLUSH"
    commitlog_segment_bytes = 1073741824
    commitlog_cache_bytes = 0    # 0: the kernel decides what the page cache keeps; N:
                             # flushed log bytes more than N behind the flush point are
                             # dropped from it (readers further behind read from disk), for
                             # hosts where new memory is dear (docs/architecture.md)

    [cluster]                # routing (Raft) membership; empty voters = standalone
    voters = ["10.0.0.1:8876", "10.0.0.2:8876", "10.0.0.3:8876"]   # Raft addresses
    secret = "..."           # shared by every node: encrypts Raft, authenticates links
    lease_ms = 3000          # a node silent this long is marked down
    heartbeat_interval_ms = 1000
    join_timeout_ms = 30000  # give up starting when routing cannot be reached

    [replication]            # within this node's broker group (the same on all its nodes)
    mode = "SYNC"            # SYNC: OK once min_insync_replicas hold it; ASYNC: once local
    min_insync_replicas = 2  # counting the master (a standalone node always uses 1)
    ack_timeout_ms = 3000    # then SLAVE_PERSISTENCE_TIMEOUT, never OK
    max_lag_ms = 15000       # a slave behind this long leaves the in-sync set
    max_lag_bytes = 268435456
    max_backlog_ms = 1000    # in-sync replicas this far behind: new writes get SYSTEM_BUSY
    unclean_election = false # true: elect outside the in-sync set (may lose messages)

    [security]               # see docs/security.md; everything off by default
    auth = false             # true: every client RPC needs a valid RocketMQ 5 signature;
                             # without TLS a captured signature works for clock_skew_s
                             # (the node warns at start): turn TLS on with it
    clock_skew_s = 300       # a signed x-mq-date-time further than this from now is refused
    admin_access_key = ""    # with auth: ensure this admin user exists at start
    admin_secret_key = ""
    tls_cert = ""            # PEM certificate chain and key: the client port speaks TLS
    tls_key = ""
    tls_client_ca = ""       # PEM CA bundle: clients must present a certificate it signed
    tls_ca = ""              # PEM CA this node trusts when it calls another node's client
                             # port (default: tls_client_ca, else its own certificate)
    client_tls = ""          # what the client ports (gRPC and remoting) speak: "optional"
                             # (TLS and plaintext on each port, as RocketMQ's proxy; the
                             # default without tls_cert: a self-signed certificate is made
                             # in <data>/tls/ on first start), "required" (TLS only; the
                             # default with tls_cert, and needs it), "off" (plaintext only)

A node is a Raft voter when ``host:ports.raft`` is one of ``voters``; any other node keeps
a read-only replica of the routing state. With no voters the node is a cluster of one (its
own single voter, with a secret it makes up at each start).

Unknown sections or keys are errors, so a typo never silently falls back to a default.

Every option can also come from the environment, which wins over the file (a container
image ships one ``node.toml`` and each node, pod or compose service sets what differs):
``FERRYMQ_<SECTION>__<OPTION>``, e.g. ``FERRYMQ_NODE__ID=node-2``,
``FERRYMQ_CLUSTER__SECRET=...``, ``FERRYMQ_PORTS__GRPC=8082``. A string option takes the
value as it is; any other takes a TOML value (``8082``, ``true``, ``["a:1", "b:2"]``). A
variable naming an unknown section or option is an error, as in the file.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ha.options import ReplicationMode, ReplicationOptions
from node.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelsError, parse_delay_levels
from node.long_polling import LONG_POLLING_DEFAULT_S, LONG_POLLING_MAX_S
from store.config import FlushMode, StoreConfig

# The largest message the client port's gRPC server takes (node/server.py): every request of
# either door must fit the node's request bytes.
LARGEST_REQUEST_BYTES = 64 << 20
DEFAULT_GRPC_PORT = 8081
DEFAULT_METRICS_PORT = 5557
DEFAULT_REPLICATION_PORT = 10912
# RocketMQ's broker port. 9876, RocketMQ's NameServer port, was Raft's until the remoting
# port came: a local cluster gives it to its first node's remoting port, so that 4.x
# clients find a NameServer where they look for one (ferrymq/launcher/cluster.py).
DEFAULT_REMOTING_PORT = 10911
DEFAULT_RAFT_PORT = 8876
WILDCARD_HOSTS = ("0.0.0.0", "::")
METRICS_TOKEN_MIN_CHARS = 16
DEFAULT_CONSOLE_PORT = 8090
CONSOLE_SESSION_TTL_RANGE_S = (60, 7 * 24 * 3600)


class ConfigError(ValueError):
    """The configuration file is malformed or names an unknown option."""


@dataclass(frozen=True)
class Ports:
    grpc: int = DEFAULT_GRPC_PORT
    remoting: int = DEFAULT_REMOTING_PORT
    metrics: int = DEFAULT_METRICS_PORT
    replication: int = DEFAULT_REPLICATION_PORT
    raft: int = DEFAULT_RAFT_PORT


@dataclass(frozen=True)
class MetricsOptions:
    host: str = "127.0.0.1"
    bearer_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class ConsoleOptions:
    """The web console (``node/console/``): off unless enabled; loopback by default."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = DEFAULT_CONSOLE_PORT
    session_ttl_s: int = 8 * 3600  # a working day
    hostnames: tuple[str, ...] = ()


@dataclass(frozen=True)
class MessagingOptions:
    max_delay_ms: int = 40 * 24 * 3600 * 1000
    transaction_check_interval_ms: int = 60_000
    transaction_max_checks: int = 15
    # Each call holds a task, its buffers and (a long poll, a stream) for up to a minute:
    # enough for about 2,000 clients with a Telemetry stream and a long poll each, while a
    # flood of calls is refused at once instead of exhausting memory.
    max_concurrent_rpcs: int = 4096
    # RocketMQ 5's defaults that applications rely on (docs/architecture.md, "RocketMQ's
    # defaults"): a topic created without a type takes every type, and a consumer group
    # is created the first time a consumer uses it.
    untyped_topics_take_any_type: bool = True
    auto_create_groups: bool = True
    delay_levels: str = DEFAULT_DELAY_LEVELS
    # Bytes every request being handled holds, whichever door (node/request_budget.py): 8
    # of gRPC's largest messages (64 MiB), 32 of the remoting port's largest frames.
    max_request_bytes: int = 512 << 20
    # One connection's share: four of the largest remoting frames, one gRPC message.
    max_request_bytes_per_connection: int = 64 << 20
    # A 4.x client's heartbeat names every producer group of its instance: a handful.
    max_producer_groups_per_client: int = 64
    # The long poll the settings tell push consumers (RocketMQ's proxy:
    # grpcClientConsumerMaxLongPollingTimeoutMillis, 20 s); a push consumer's stop waits
    # for its long polls, so it costs a stopping application up to this.
    long_polling_s: int = int(LONG_POLLING_DEFAULT_S)

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.delay_levels)


@dataclass(frozen=True)
class RemotingOptions:
    """Bounds of the remoting port (node/remoting/server.py, ``transport_limits``)."""

    # The transport's fixed limit until now: a 4.x client process keeps one connection
    # per node it talks to, so this is about 10,000 client processes.
    max_connections: int = 10_000
    # A tenth of the node's: one address (one attacker) cannot take every connection,
    # while tests, benchmarks and chaos runs (all from 127.0.0.1, tens of connections)
    # and about a thousand client processes behind one NAT address still fit.
    max_connections_per_address: int = 1_000
    # RocketMQ's server default (serverChannelMaxIdleTimeSeconds); its clients heartbeat
    # every 30 s, and a long poll in flight keeps a connection open.
    idle_timeout_ms: int = 120_000
    # A client sends its first request right after connecting; this covers a slow TLS
    # handshake too, while a silent connection holds its slot for seconds, not forever.
    first_frame_timeout_ms: int = 10_000


@dataclass(frozen=True)
class LiteOptions:
    """Expiry of idle lite topics (node/lite_expiry.py), RocketMQ's broker defaults."""

    expiry_check_interval_s: int = 120
    min_expiry_s: int = 900


@dataclass(frozen=True)
class ClusterOptions:
    voters: tuple[str, ...] = ()
    secret: str = field(default="", repr=False)  # never in a log line or a traceback
    lease_ms: int = 3000
    heartbeat_interval_ms: int = 1000
    join_timeout_ms: int = 30_000

    @property
    def standalone(self) -> bool:
        return not self.voters


@dataclass(frozen=True)
class SecurityOptions:
    auth: bool = False
    clock_skew_s: int = 300
    admin_access_key: str = ""
    admin_secret_key: str = field(default="", repr=False)
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    tls_ca: str = ""
    client_tls: str = ""  # "" (decided by tls_cert), "optional", "required" or "off"

    @property
    def tls(self) -> bool:
        """Whether a certificate is configured (nodes then verify each other with it)."""
        return bool(self.tls_cert)

    @property
    def client_tls_mode(self) -> str:
        """What the client ports speak: ``optional`` (TLS and plaintext on each port, the
        default without a certificate), ``required`` (TLS only, the default with one) or
        ``off`` (plaintext only)."""
        return self.client_tls or ("required" if self.tls else "optional")


@dataclass(frozen=True)
class NodeConfig:
    id: str = "node-1"
    group: str = "group-1"
    host: str = "127.0.0.1"
    data_dir: str = "data/node-1"
    internal_host: str = ""
    ports: Ports = field(default_factory=Ports)
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    messages: MessagingOptions = field(default_factory=MessagingOptions)
    remoting: RemotingOptions = field(default_factory=RemotingOptions)
    lite: LiteOptions = field(default_factory=LiteOptions)
    console: ConsoleOptions = field(default_factory=ConsoleOptions)
    store: dict[str, Any] = field(default_factory=dict)
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    replication: ReplicationOptions = field(default_factory=ReplicationOptions)
    security: SecurityOptions = field(default_factory=SecurityOptions)

    @property
    def peer_host(self) -> str:
        """Where the internal links (replication, Raft) listen and peers dial them."""
        return self.internal_host or self.host

    @property
    def raft_address(self) -> str:
        return f"{self.peer_host}:{self.ports.raft}"

    @property
    def is_voter(self) -> bool:
        return self.raft_address in self.cluster.voters

    def store_config(self) -> StoreConfig:
        options = dict(self.store)
        if "flush_mode" in options:
            options["flush_mode"] = FlushMode(options["flush_mode"])
        return StoreConfig(
            data_dir=self.data_dir, store_host=self.host, store_port=self.ports.remoting, **options
        )


_STORE_FIELDS = {f.name for f in dataclasses.fields(StoreConfig)} - {
    "data_dir",
    "store_host",
    "store_port",
}
_NODE_FIELDS = {"id", "group", "host", "internal_host", "data_dir"}
_METRICS_FIELDS = {f.name for f in dataclasses.fields(MetricsOptions)}
_PORT_FIELDS = {f.name for f in dataclasses.fields(Ports)}
_MESSAGES_FIELDS = {f.name for f in dataclasses.fields(MessagingOptions)}
_MESSAGES_SWITCHES = {"untyped_topics_take_any_type", "auto_create_groups"}
_REMOTING_FIELDS = {f.name for f in dataclasses.fields(RemotingOptions)}
_LITE_FIELDS = {f.name for f in dataclasses.fields(LiteOptions)}
_CONSOLE_FIELDS = {f.name for f in dataclasses.fields(ConsoleOptions)}
_CLUSTER_FIELDS = {f.name for f in dataclasses.fields(ClusterOptions)}
_REPLICATION_FIELDS = {f.name for f in dataclasses.fields(ReplicationOptions)}
_SECURITY_FIELDS = {f.name for f in dataclasses.fields(SecurityOptions)}


ENVIRONMENT_PREFIX = "FERRYMQ_"
# What each section's options are, for the types of values the environment gives.
_SECTION_TYPES: dict[str, type] = {
    "node": NodeConfig,
    "ports": Ports,
    "metrics": MetricsOptions,
    "messages": MessagingOptions,
    "remoting": RemotingOptions,
    "lite": LiteOptions,
    "console": ConsoleOptions,
    "store": StoreConfig,
    "cluster": ClusterOptions,
    "replication": ReplicationOptions,
    "security": SecurityOptions,
}
_ALLOWED_FIELDS = {
    "node": _NODE_FIELDS,
    "ports": _PORT_FIELDS,
    "metrics": _METRICS_FIELDS,
    "messages": _MESSAGES_FIELDS,
    "remoting": _REMOTING_FIELDS,
    "lite": _LITE_FIELDS,
    "console": _CONSOLE_FIELDS,
    "store": _STORE_FIELDS,
    "cluster": _CLUSTER_FIELDS,
    "replication": _REPLICATION_FIELDS,
    "security": _SECURITY_FIELDS,
}


def environment_settings(environment: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The options ``FERRYMQ_<SECTION>__<OPTION>`` variables set, by section (other
    ``FERRYMQ_`` variables, without ``__``, are the CLI's and the tests'). Raises
    ``ConfigError`` naming a variable whose section or option does not exist."""
    settings: dict[str, dict[str, Any]] = {}
    for variable, text in sorted(environment.items()):
        if not variable.startswith(ENVIRONMENT_PREFIX) or "__" not in variable:
            continue
        section, _, option = variable[len(ENVIRONMENT_PREFIX) :].lower().partition("__")
        if section not in _ALLOWED_FIELDS:
            raise ConfigError(f"{variable}: no section [{section}] in node.toml")
        if option not in _ALLOWED_FIELDS[section]:
            raise ConfigError(f"{variable}: no option {option!r} in [{section}]")
        kind = {f.name: f.type for f in dataclasses.fields(_SECTION_TYPES[section])}[option]
        settings.setdefault(section, {})[option] = (
            text if kind in ("str", str) else _environment_value(variable, text)
        )
    return settings


def _environment_value(variable: str, text: str) -> Any:
    """A TOML value (a number, a boolean, a list); a bare word (``SYNC_FLUSH``) is taken
    as a string, which the option's own check then accepts or refuses."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        if text.replace("_", "").replace("-", "").isalnum():
            return text
        raise ConfigError(f"{variable} is not a TOML value: {text!r}") from None


def parse_node_config(text: str, environment: Mapping[str, str] | None = None) -> NodeConfig:
    """Parse ``node.toml`` text, with the options ``environment`` sets in place of the
    file's; raises ``ConfigError`` naming the offending option."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"node.toml is not valid TOML: {error}") from error
    for section, options in environment_settings(environment or {}).items():
        if not isinstance(raw.setdefault(section, {}), dict):
            raise ConfigError(f"[{section}] must be a table")
        raw[section].update(options)
    unknown_sections = set(raw) - {
        "node",
        "ports",
        "metrics",
        "messages",
        "remoting",
        "lite",
        "console",
        "store",
        "cluster",
        "replication",
        "security",
    }
    if unknown_sections:
        raise ConfigError(f"unknown section(s): {', '.join(sorted(unknown_sections))}")
    node = _checked(raw.get("node", {}), _NODE_FIELDS, "node")
    ports = _checked(raw.get("ports", {}), _PORT_FIELDS, "ports")
    metrics = _metrics_options(_checked(raw.get("metrics", {}), _METRICS_FIELDS, "metrics"))
    store = _checked(raw.get("store", {}), _STORE_FIELDS, "store")
    messages = _checked(raw.get("messages", {}), _MESSAGES_FIELDS, "messages")
    remoting = _remoting_options(_checked(raw.get("remoting", {}), _REMOTING_FIELDS, "remoting"))
    lite = _lite_options(_checked(raw.get("lite", {}), _LITE_FIELDS, "lite"))
    cluster = _cluster_options(_checked(raw.get("cluster", {}), _CLUSTER_FIELDS, "cluster"))
    replication = _replication_options(
        _checked(raw.get("replication", {}), _REPLICATION_FIELDS, "replication")
    )
    security = _security_options(
        _checked(raw.get("security", {}), _SECURITY_FIELDS, "security"), cluster
    )
    console = _console_options(_checked(raw.get("console", {}), _CONSOLE_FIELDS, "console"))
    if console.enabled and not security.auth and not is_loopback(console.host):
        raise ConfigError(
            f"console.host = {console.host!r} with security.auth = false: anyone who reaches "
            "the console would act as an admin; bind a loopback address (127.0.0.1, ::1 or "
            "localhost), or turn security.auth on"
        )
    for name, value in messages.items():
        if name == "delay_levels":
            if not isinstance(value, str):
                raise ConfigError(f"messages.delay_levels must be a string, got {value!r}")
            try:
                parse_delay_levels(value)
            except DelayLevelsError as error:
                raise ConfigError(f"messages.delay_levels: {error}") from None
        elif name in _MESSAGES_SWITCHES:
            if not isinstance(value, bool):
                raise ConfigError(f"messages.{name} must be true or false, got {value!r}")
        elif not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"messages.{name} must be a positive integer, got {value!r}")
    _check_request_bytes(messages)
    if not 1 <= messages.get("long_polling_s", 1) <= LONG_POLLING_MAX_S:
        raise ConfigError(
            f"messages.long_polling_s must be 1..{LONG_POLLING_MAX_S:.0f}, got "
            f"{messages['long_polling_s']!r}"
        )
    for name, port in ports.items():
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"ports.{name} must be an integer in 0..65535, got {port!r}")
    for name in ("host", "internal_host"):
        if not isinstance(node.get(name, ""), str):
            raise ConfigError(f"node.{name} must be a string")
    if node.get("internal_host", "") in WILDCARD_HOSTS:
        raise ConfigError(
            "node.internal_host is the address peers dial for replication and Raft: name "
            f"an address of this machine, not {node['internal_host']!r} (omit it to use "
            "node.host)"
        )
    if "flush_mode" in store and store["flush_mode"] not in {m.value for m in FlushMode}:
        raise ConfigError(
            f"store.flush_mode must be ASYNC_FLUSH or SYNC_FLUSH, got {store['flush_mode']!r}"
        )
    config = NodeConfig(
        **node,
        ports=Ports(**ports),
        metrics=metrics,
        messages=MessagingOptions(**messages),
        remoting=remoting,
        lite=lite,
        console=console,
        store=store,
        cluster=cluster,
        replication=replication,
        security=security,
    )
    if max(config.messages.delay_levels_ms) > config.messages.max_delay_ms:
        raise ConfigError(
            "messages.delay_levels: a level is longer than messages.max_delay_ms, the "
            "longest delay a message may have"
        )
    if cluster.voters and config.is_voter and config.ports.raft == 0:
        raise ConfigError("a voter needs a fixed ports.raft: the other voters dial it")
    try:
        config.store_config()
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[store]: {error}") from error
    return config


def _cluster_options(section: dict[str, Any]) -> ClusterOptions:
    voters = section.get("voters", [])
    if not isinstance(voters, list) or not all(
        isinstance(v, str) and v.rpartition(":")[2].isdigit() for v in voters
    ):
        raise ConfigError(f"cluster.voters must be a list of 'host:port' strings, got {voters!r}")
    if len(set(voters)) != len(voters):
        raise ConfigError("cluster.voters names a voter twice")
    if voters and len(voters) % 2 == 0:
        raise ConfigError(
            f"cluster.voters has {len(voters)} voters: use an odd number (3 or 5), an even "
            "one tolerates no more failures than one fewer"
        )
    secret = section.get("secret", "")
    if not isinstance(secret, str):
        raise ConfigError("cluster.secret must be a string")
    if voters and len(secret) < 8:
        raise ConfigError("cluster.secret must be set (8 characters or more) when voters are")
    if secret.startswith("CHANGE-ME"):
        raise ConfigError("cluster.secret is still the placeholder of the example configs")
    numbers = {k: v for k, v in section.items() if k not in ("voters", "secret")}
    for name, value in numbers.items():
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"cluster.{name} must be a positive integer, got {value!r}")
    options = ClusterOptions(voters=tuple(voters), secret=secret, **numbers)
    if options.heartbeat_interval_ms * 2 > options.lease_ms:
        raise ConfigError("cluster.heartbeat_interval_ms must be at most half of lease_ms")
    return options


def _remoting_options(section: dict[str, Any]) -> RemotingOptions:
    for name, value in section.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"remoting.{name} must be a positive integer, got {value!r}")
    options = RemotingOptions(**section)
    if options.max_connections_per_address > options.max_connections:
        raise ConfigError(
            f"remoting.max_connections_per_address ({options.max_connections_per_address}) "
            f"must be at most max_connections ({options.max_connections})"
        )
    return options


def _lite_options(section: dict[str, Any]) -> LiteOptions:
    for name, value in section.items():
        low = 1 if name == "expiry_check_interval_s" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            kind = "a positive integer" if low else "an integer, 0 or more"
            raise ConfigError(f"lite.{name} must be {kind}, got {value!r}")
    return LiteOptions(**section)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (a literal loopback address, or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _console_options(section: dict[str, Any]) -> ConsoleOptions:
    if not isinstance(section.get("enabled", False), bool):
        raise ConfigError("console.enabled must be true or false")
    host = section.get("host", ConsoleOptions.host)
    if not isinstance(host, str) or not host:
        raise ConfigError("console.host must name an address (127.0.0.1: this machine only)")
    port = section.get("port", DEFAULT_CONSOLE_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"console.port must be an integer in 0..65535, got {port!r}")
    low, high = CONSOLE_SESSION_TTL_RANGE_S
    ttl = section.get("session_ttl_s", ConsoleOptions.session_ttl_s)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not low <= ttl <= high:
        raise ConfigError(f"console.session_ttl_s must be an integer in {low}..{high}, got {ttl!r}")
    hostnames = section.get("hostnames", [])
    if not isinstance(hostnames, list) or not all(
        isinstance(name, str) and name and ":" not in name for name in hostnames
    ):
        raise ConfigError(
            f"console.hostnames must be a list of host names without ports, got {hostnames!r}"
        )
    return ConsoleOptions(**{**section, "hostnames": tuple(hostnames)})


def _check_request_bytes(messages: dict[str, Any]) -> None:
    """The node's request bytes must fit the largest request of either door."""
    defaults = MessagingOptions()
    node_bytes = messages.get("max_request_bytes", defaults.max_request_bytes)
    per_connection = messages.get(
        "max_request_bytes_per_connection", defaults.max_request_bytes_per_connection
    )
    if node_bytes < LARGEST_REQUEST_BYTES:
        raise ConfigError(
            f"messages.max_request_bytes must be at least {LARGEST_REQUEST_BYTES} (the "
            f"largest gRPC message, which must fit), got {node_bytes}"
        )
    if per_connection > node_bytes:
        raise ConfigError(
            f"messages.max_request_bytes_per_connection ({per_connection}) must be at most "
            f"max_request_bytes ({node_bytes})"
        )


def _metrics_options(section: dict[str, Any]) -> MetricsOptions:
    for name in _METRICS_FIELDS:
        if not isinstance(section.get(name, ""), str):
            raise ConfigError(f"metrics.{name} must be a string")
    options = MetricsOptions(**section)
    if not options.host:
        raise ConfigError("metrics.host must name an address (127.0.0.1: this machine only)")
    token = options.bearer_token
    if token.startswith("CHANGE-ME"):
        raise ConfigError("metrics.bearer_token is still the placeholder of the examples")
    if token and (len(token) < METRICS_TOKEN_MIN_CHARS or not token.isprintable() or " " in token):
        raise ConfigError(
            f"metrics.bearer_token must be {METRICS_TOKEN_MIN_CHARS} characters or more, "
            "printable, without spaces (e.g. `openssl rand -hex 24`)"
        )
    return options


def _replication_options(section: dict[str, Any]) -> ReplicationOptions:
    options = dict(section)
    if "mode" in options:
        if options["mode"] not in ("SYNC", "ASYNC"):
            raise ConfigError(f"replication.mode must be SYNC or ASYNC, got {options['mode']!r}")
        options["mode"] = ReplicationMode(options["mode"])
    if not isinstance(options.get("unclean_election", False), bool):
        raise ConfigError("replication.unclean_election must be true or false")
    for name, value in options.items():
        if name in ("mode", "unclean_election"):
            continue
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"replication.{name} must be a positive integer, got {value!r}")
    return ReplicationOptions(**options)


def _security_options(section: dict[str, Any], cluster: ClusterOptions) -> SecurityOptions:
    if not isinstance(section.get("auth", False), bool):
        raise ConfigError("security.auth must be true or false")
    skew = section.get("clock_skew_s", SecurityOptions.clock_skew_s)
    if not isinstance(skew, int) or not 1 <= skew <= 86_400:
        raise ConfigError(f"security.clock_skew_s must be an integer in 1..86400, got {skew!r}")
    for name in _SECURITY_FIELDS - {"auth", "clock_skew_s"}:
        if not isinstance(section.get(name, ""), str):
            raise ConfigError(f"security.{name} must be a string")
    options = SecurityOptions(**section)
    if bool(options.tls_cert) != bool(options.tls_key):
        raise ConfigError("security.tls_cert and security.tls_key go together")
    if (options.tls_client_ca or options.tls_ca) and not options.tls:
        raise ConfigError("security.tls_client_ca and tls_ca need tls_cert and tls_key")
    if options.client_tls not in ("", "optional", "required", "off"):
        raise ConfigError(
            f"security.client_tls must be optional, required or off, got {options.client_tls!r}"
        )
    if options.client_tls == "required" and not options.tls:
        raise ConfigError(
            "security.client_tls = required needs tls_cert and tls_key: nodes call each"
            " other's client ports and verify the certificate they present"
        )
    if options.client_tls == "off" and options.tls:
        raise ConfigError("security.client_tls = off leaves tls_cert and tls_key unused")
    if bool(options.admin_access_key) != bool(options.admin_secret_key):
        raise ConfigError("security.admin_access_key and admin_secret_key go together")
    if options.admin_secret_key and len(options.admin_secret_key) < 8:
        raise ConfigError("security.admin_secret_key must have 8 characters or more")
    if options.admin_secret_key.startswith("CHANGE-ME"):
        raise ConfigError("security.admin_secret_key is still the placeholder of the examples")
    if (options.auth or options.admin_access_key) and len(cluster.secret) < 8:
        raise ConfigError(
            "security.auth and admin users need cluster.secret (8 characters or more), even "
            "on a standalone node: users' secret keys are encrypted at rest with a key "
            "derived from it"
        )
    return options


def _checked(section: Any, allowed: set[str], name: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ConfigError(f"[{name}] must be a table")
    unknown = set(section) - allowed
    if unknown:
        raise ConfigError(f"unknown option(s) in [{name}]: {', '.join(sorted(unknown))}")
    return dict(section)


def load_node_config(
    path: str | None,
    *,
    data_dir: str | None = None,
    grpc_port: int | None = None,
    remoting_port: int | None = None,
    metrics_port: int | None = None,
    environment: Mapping[str, str] | None = None,
) -> NodeConfig:
    """Read ``path`` (defaults when None), with the options the environment
    (``os.environ`` unless given) sets in its place, and apply command-line overrides."""
    text = ""
    if path is not None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    config = parse_node_config(text, os.environ if environment is None else environment)
    if data_dir is not None:
        config = dataclasses.replace(config, data_dir=data_dir)
    if grpc_port is not None:
        config = dataclasses.replace(
            config, ports=dataclasses.replace(config.ports, grpc=grpc_port)
        )
    if remoting_port is not None:
        config = dataclasses.replace(
            config, ports=dataclasses.replace(config.ports, remoting=remoting_port)
        )
    if metrics_port is not None:
        config = dataclasses.replace(
            config, ports=dataclasses.replace(config.ports, metrics=metrics_port)
        )
    return config


def render_node_config(config: NodeConfig) -> str:
    """The effective configuration as TOML, written to ``<data>/node.toml`` at start."""
    lines = ["[node]"]
    for name in ("id", "group", "host", "internal_host", "data_dir"):
        lines.append(f"{name} = {_toml_value(getattr(config, name))}")
    lines.append("")
    lines.append("[ports]")
    for name in sorted(_PORT_FIELDS):
        lines.append(f"{name} = {getattr(config.ports, name)}")
    lines.append("")
    lines.append("[metrics]")
    lines.append(f"host = {_toml_value(config.metrics.host)}")
    if config.metrics.bearer_token:
        lines.append("# bearer_token: set in the configuration, not repeated here")
    lines.append("")
    lines.append("[messages]")
    for name in sorted(_MESSAGES_FIELDS):
        lines.append(f"{name} = {_toml_value(getattr(config.messages, name))}")
    lines.append("")
    lines.append("[remoting]")
    for name in sorted(_REMOTING_FIELDS):
        lines.append(f"{name} = {getattr(config.remoting, name)}")
    lines.append("")
    lines.append("[lite]")
    for name in sorted(_LITE_FIELDS):
        lines.append(f"{name} = {getattr(config.lite, name)}")
    lines.append("")
    lines += _console_lines(config.console)
    lines.append("[cluster]")
    lines.append("voters = [" + ", ".join(_toml_value(v) for v in config.cluster.voters) + "]")
    if config.cluster.secret:
        lines.append("# secret: set in the configuration, not repeated here")
    for name in sorted(_CLUSTER_FIELDS - {"voters", "secret"}):
        lines.append(f"{name} = {getattr(config.cluster, name)}")
    lines.append("")
    lines.append("[replication]")
    for name in sorted(_REPLICATION_FIELDS):
        value = getattr(config.replication, name)
        lines.append(
            f"{name} = {_toml_value(value.value if isinstance(value, enum.Enum) else value)}"
        )
    lines.append("")
    lines.append("[security]")
    for name in sorted(_SECURITY_FIELDS - {"admin_secret_key"}):
        lines.append(f"{name} = {_toml_value(getattr(config.security, name))}")
    if config.security.admin_secret_key:
        lines.append("# admin_secret_key: set in the configuration, not repeated here")
    lines.append("")
    lines.append("[store]")
    effective = config.store_config()
    for name in sorted(_STORE_FIELDS):
        value = getattr(effective, name)
        lines.append(
            f"{name} = {_toml_value(value.value if isinstance(value, FlushMode) else value)}"
        )
    return "\n".join(lines) + "\n"


def effective_settings(config: NodeConfig) -> dict[str, dict[str, Any]]:
    """Every option of ``node.toml`` with the value the node runs with, by section in the
    file's order and by name (``[store]``: ``StoreConfig``'s effective values, defaults
    included), as ``render_node_config`` writes them. Secrets included: whoever shows
    them redacts (``node/services/node_settings.py``)."""
    holders = {name: getattr(config, name, None) for name in _ALLOWED_FIELDS}
    holders |= {"node": config, "store": config.store_config()}
    return {
        section: {name: getattr(holders[section], name) for name in sorted(names)}
        for section, names in _ALLOWED_FIELDS.items()
    }


def _console_lines(console: ConsoleOptions) -> list[str]:
    lines = ["[console]"]
    for name in sorted(_CONSOLE_FIELDS - {"hostnames"}):
        lines.append(f"{name} = {_toml_value(getattr(console, name))}")
    lines.append("hostnames = [" + ", ".join(_toml_value(v) for v in console.hostnames) + "]")
    return [*lines, ""]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
