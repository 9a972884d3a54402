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

from bench.peers import bootstrap, report
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


@dataclass(frozen=True)
class PeerSpec:
    name: str
    module: str
    cls: str
    package: str = ""  # the Debian package that provides ``binary``
    binary: str = ""


PEERS = (
    PeerSpec("ferrymq", "bench.peers.ferry", "Ferrymq"),
    # The official RocketMQ client against ferrymq and against Apache RocketMQ (below).
    PeerSpec("ferrymq-official", "bench.peers.ferry", "FerrymqOfficialClient"),
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
    PeerSpec("kafka", "bench.peers.kafka_kraft", "KafkaKraft"),
    PeerSpec("rocketmq", "bench.peers.rocketmq_apache", "RocketmqApache"),
)


def unavailable(name: str, reason: str) -> Figures:
    log(f"{name}: not measured: {reason}")
    return Figures(name, available=False, unavailable_reason=reason)


def run_peer(spec: PeerSpec, scale, install_error: str) -> Figures:
    """Start, measure and stop one system; its figures, or why it could not be run."""
    if install_error:
        return unavailable(spec.name, install_error)
    try:
        peer = getattr(importlib.import_module(spec.module), spec.cls)()
    except Exception as error:
        return unavailable(spec.name, f"client not usable: {error!r}")
    log(f"{spec.name}: starting a 3-node group")
    with ProcessRegistry(spec.name) as registry:
        try:
            try:
                peer.start(registry)
            except Exception as error:
                figures = unavailable(spec.name, f"could not start: {error}")
                figures.client, figures.durability = peer.client, peer.durability
                return figures
            return measure(peer, scale)
        finally:
            try:
                peer.stop()
            except Exception as error:
                log(f"{spec.name}: stop: {error!r}")
            log(f"{spec.name}: stopping every process it started")


def run(args: argparse.Namespace) -> int:
    def terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, through every teardown
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    scale = SCALES[mode]
    chosen = [p for p in PEERS if not args.only or p.name in args.only.split(",")]
    started_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    install_errors: dict[str, str] = {}
    if not args.no_install:
        install_errors = bootstrap.ensure_debian_packages(
            {p.package: p.binary for p in chosen if p.package}
        )
    peers: dict[str, dict] = {}
    try:
        for spec in chosen:
            figures = run_peer(spec, scale, install_errors.get(spec.package, ""))
            peers[spec.name] = figures.to_json()
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
    }
    result = report.build(peers, context)
    if not args.no_write:
        command = "python -m bench.peers --json" + {"full": "", "quick": " --quick"}.get(
            mode, " --smoke"
        )
        chart_path = os.path.join(os.path.dirname(RESULTS), CHART)
        try:
            report.chart(result, chart_path)
        except Exception as error:
            log(f"chart not drawn: {error!r}")
            chart_path = None
        report.write_section(
            RESULTS, report.markdown(result, command, CHART if chart_path else None)
        )
        log(f"wrote {RESULTS}" + (f" and {chart_path}" if chart_path else ""))
    if not args.json:
        for name, figures in peers.items():
            log(f"{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items() if k != "name"))
    log(
        "ferrymq / best peer: "
        + ", ".join(f"{w.ratio}={result[w.ratio]}" for w in report.WORKLOADS)
        + f"; targets {result['targets_met']}"
    )
    print(json.dumps(result), flush=True)
    return 0
