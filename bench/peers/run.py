"""The run: each system in turn (started, measured, torn down before the next, so that
none competes with another for the cores or the disk), then the report."""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import signal
import time
from dataclasses import dataclass

from bench.peers import bootstrap, drills, growth, report
from bench.peers.processes import ProcessRegistry
from bench.peers.workloads import (
    BATCH,
    BATCHES_IN_FLIGHT,
    BODY_BYTES,
    IN_FLIGHT,
    SCALES,
    Figures,
    log,
    measure,
)

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "RESULTS.md")
CHART = "peers.png"  # next to RESULTS.md
GROWTH_CHART = "peers-growth.png"  # failover, topics and backlog


# What a run measures, in this order on each system (failover restarts nodes; the topics
# part leaves thousands of topics behind, so it comes last).
PARTS = ("workloads", "failover", "backlog", "topics")
ALL = PARTS
DRILLS = {"full": 5, "quick": 3, "smoke": 1}


@dataclass(frozen=True)
class PeerSpec:
    name: str
    module: str
    cls: str
    package: str = ""  # the Debian package that provides ``binary``
    binary: str = ""
    parts: tuple[str, ...] = ("workloads",)  # the parts this system takes part in


@dataclass(frozen=True)
class Settings:
    """What to run: the size, the parts, the drills."""

    mode: str = "smoke"
    parts: tuple[str, ...] = PARTS
    drills: int = 1

    @property
    def scale(self):
        return SCALES[self.mode]


PEERS = (
    PeerSpec("ferrymq", "bench.peers.ferry", "Ferrymq", parts=ALL),
    # The official RocketMQ client against ferrymq and against Apache RocketMQ (below).
    PeerSpec(
        "ferrymq-official",
        "bench.peers.ferry",
        "FerrymqOfficialClient",
        parts=("workloads", "failover"),
    ),
    PeerSpec(
        "nats",
        "bench.peers.nats_jetstream",
        "NatsJetStream",
        "nats-server",
        "/usr/sbin/nats-server",
    ),
    PeerSpec(
        "redis",
        "bench.peers.redis_streams",
        "RedisStreams",
        "redis-server",
        "/usr/bin/redis-server",
    ),
    PeerSpec(
        "rabbitmq",
        "bench.peers.rabbitmq_quorum",
        "RabbitMqQuorum",
        "rabbitmq-server",
        "/usr/lib/rabbitmq/bin/rabbitmq-server",
    ),
    # The JVM peers fetch their own artifacts from Maven Central (bench.peers.jvm).
    PeerSpec("kafka", "bench.peers.kafka_kraft", "KafkaKraft", parts=ALL),
    PeerSpec("rocketmq", "bench.peers.rocketmq_apache", "RocketmqApache", parts=ALL),
    # Apache RocketMQ and ferrymq through the same, fastest clients: the Java clients of
    # both generations (4.x over remoting, 5.x over gRPC), with their defaults.
    PeerSpec("rocketmq-java4", "bench.peers.rocketmq_apache", "RocketmqApacheJava4"),
    PeerSpec("ferrymq-java4", "bench.peers.ferry", "FerrymqJava4Client"),
    PeerSpec("rocketmq-java5", "bench.peers.rocketmq_apache", "RocketmqApacheJava5"),
    PeerSpec("ferrymq-java5", "bench.peers.ferry", "FerrymqJava5Client"),
    # The same, every failover period at its shortest: a second failover configuration.
    PeerSpec(
        "rocketmq-shortest",
        "bench.peers.rocketmq_apache",
        "RocketmqApacheShortTimeouts",
        parts=("failover",),
    ),
)


def select(only: str) -> tuple[tuple[str, ...], list[PeerSpec]]:
    """``--only``: part names (PARTS) and system names, mixed; none of either means all.
    Raises ValueError naming what is neither."""
    words = [w.strip() for w in only.split(",") if w.strip()]
    names = {p.name for p in PEERS}
    unknown = [w for w in words if w not in PARTS and w not in names]
    if unknown:
        raise ValueError(
            f"--only: {', '.join(unknown)} is neither a part ({', '.join(PARTS)}) nor a "
            f"system ({', '.join(sorted(names))})"
        )
    parts = tuple(p for p in PARTS if p in words) or PARTS
    systems = [w for w in words if w in names]
    chosen = [
        p
        for p in PEERS
        if (not systems or p.name in systems) and any(part in p.parts for part in parts)
    ]
    return parts, chosen


def unavailable(name: str, reason: str) -> Figures:
    log(f"{name}: not measured: {reason}")
    return Figures(name, available=False, unavailable_reason=reason)


def _unavailable_parts(spec: PeerSpec, parts: tuple[str, ...], reason: str, peer=None) -> dict:
    figures = unavailable(spec.name, reason)
    if peer is not None:
        figures.client, figures.durability = peer.client, peer.durability
    found: dict[str, dict] = {}
    for part in parts:
        if part == "workloads":
            found[part] = figures.to_json()
        else:
            found[part] = {"system": spec.name, "available": False, "error": reason}
    return found


def run_peer(spec: PeerSpec, settings: Settings, install_error: str = "") -> dict[str, dict]:
    """Start one system, run each selected part it takes part in, stop it: ``{part:
    figures}``, or for every part why it could not be run."""
    parts = tuple(p for p in settings.parts if p in spec.parts)
    if install_error:
        return _unavailable_parts(spec, parts, install_error)
    try:
        peer = getattr(importlib.import_module(spec.module), spec.cls)()
    except Exception as error:
        return _unavailable_parts(spec, parts, f"client not usable: {error!r}")
    log(f"{spec.name}: starting a 3-node group for {', '.join(parts)}")
    found: dict[str, dict] = {}
    with ProcessRegistry(spec.name) as registry:
        try:
            try:
                peer.start(registry)
            except Exception as error:
                return _unavailable_parts(spec, parts, f"could not start: {error}", peer)
            for part in parts:
                found[part] = run_part(peer, part, settings)
            return found
        finally:
            try:
                peer.stop()
            except Exception as error:
                log(f"{spec.name}: stop: {error!r}")
            log(f"{spec.name}: stopping every process it started")


def run_part(peer, part: str, settings: Settings) -> dict:
    """One part on a started system; a part that fails is recorded with its error."""
    log(f"{peer.name}: {part}")
    if part == "workloads":
        return measure(peer, settings.scale).to_json()
    try:
        if part == "failover":
            return drills.run_drills(peer, settings.drills).to_json()
        if part == "backlog":
            return growth.run_backlog(peer, growth.BACKLOG_BYTES[settings.mode])
        return growth.run_topics(
            peer, growth.TOPIC_COUNTS[settings.mode], growth.SPREAD_MESSAGES[settings.mode]
        )
    except Exception as error:
        log(f"  {peer.name} {part} failed: {error!r}")
        return {"system": peer.name, "error": f"{type(error).__name__}: {error}"[:500]}


def run(args: argparse.Namespace) -> int:
    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, through every teardown
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    scale = SCALES[mode]
    try:
        parts, chosen = select(args.only)
    except ValueError as error:
        log(str(error))
        return 2
    if args.drills < 0:
        log("--drills must be at least 1")
        return 2
    settings = Settings(mode, parts, args.drills or DRILLS[mode])
    started_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    install_errors: dict[str, str] = {}
    if not args.no_install:
        install_errors = bootstrap.ensure_debian_packages(
            {p.package: p.binary for p in chosen if p.package}
        )
    peers: dict[str, dict] = {}
    anchors: dict[str, dict[str, dict]] = {part: {} for part in PARTS if part != "workloads"}
    try:
        for spec in chosen:
            found = run_peer(spec, settings, install_errors.get(spec.package, ""))
            if "workloads" in found:
                peers[spec.name] = found.pop("workloads")
            for part, figures in found.items():
                anchors[part][spec.name] = figures
    except KeyboardInterrupt:
        log("interrupted; every process started has been stopped")
        return 130
    context = {
        "mode": mode,
        "started_at": started_at,
        "seconds": round(time.monotonic() - started, 1),
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "machine": report.machine(),
        "body_bytes": BODY_BYTES,
        "in_flight": IN_FLIGHT,
        "batch": {"messages_per_request": BATCH, "requests_in_flight": BATCHES_IN_FLIGHT},
        "messages": vars(scale),
        "parts": list(parts),
        "drills": settings.drills,
        "topic_counts": list(growth.TOPIC_COUNTS[mode]),
        "backlog_bytes": list(growth.BACKLOG_BYTES[mode]),
    }
    result = report.build(peers, context)
    result.update({part: found for part, found in anchors.items() if found})
    if result.get("failover"):
        result["failover_ratios"] = report.failover_ratios(result["failover"])
    if not args.no_write:
        command = "python -m bench.peers --json" + {"full": "", "quick": " --quick"}.get(
            mode, " --smoke"
        )
        results = args.results or RESULTS
        charts = {}
        for name, draw in ((CHART, report.chart), (GROWTH_CHART, report.growth_chart)):
            path = os.path.join(os.path.dirname(results), name)
            try:
                if draw(result, path):
                    charts[name] = path
            except Exception as error:
                log(f"chart {name} not drawn: {error!r}")
        # Each section only when its parts ran: a run of some parts leaves the others'.
        if peers:
            report.write_section(
                results, report.markdown(result, command, CHART if CHART in charts else None)
            )
        if any(anchors.values()):
            chart = GROWTH_CHART if GROWTH_CHART in charts else None
            report.write_section(results, report.anchors_section(result, command, chart))
        log(f"wrote {results}" + "".join(f" and {path}" for path in charts.values()))
    if not args.json:
        for name, figures in peers.items():
            log(f"{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items() if k != "name"))
    for name, figures in (result.get("failover") or {}).items():
        log(
            f"failover {name}: unavailable p50 {figures.get('unavailable_ms_p50')} ms, "
            f"p99 {figures.get('unavailable_ms_p99')} ms, lost {figures.get('lost')}"
            + (f" ({figures['error']})" if figures.get("error") else "")
        )
    log(
        "ferrymq / best peer: "
        + ", ".join(f"{w.ratio}={result[w.ratio]}" for w in report.WORKLOADS)
        + f"; targets {result['targets_met']}"
    )
    print(json.dumps(result), flush=True)
    return 0
