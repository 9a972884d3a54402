"""Failover per official client: ``python -m bench.client_failover --json [--drills N]
[--clients python,java,java4,go,go4,alions,nodejs]``.

For each client in turn, alone on a fresh 3-node SYNC cluster (loopback, OS-chosen ports):
its producer sends one message at a time and its SimpleConsumer receives and acks
(``bench.official_failover``'s ``load``, the same events from every client's driver); the
master is killed with SIGKILL ``N`` times (5 by default), each once the load runs, the
killed node restarted and all three in sync before the next. Per client:

- ``<client>_failover_unavailable_ms_p50`` / ``_p99`` / ``_max`` and ``..._ms`` (every
  drill): from the kill to both an acknowledged send the dead master cannot have answered
  and a received message (``unavailable_ms``);
- ``<client>_failover_lost``: acknowledged sends never received (must be 0), after the
  consumer drained;
- ``<client>_failover_send_failures``: sends the client gave up on (its own retries
  spent), which are not acknowledged, so not counted lost.

Clients: ``python`` (rocketmq-python-client 5.1.2, given one node as access point),
``java`` (rocketmq-client-java 5.2.0, every node as access point, its default TLS), ``java4``
(rocketmq-client 4.9.8 on the remoting port: a sync producer and a push consumer, every
node as a NameServer), ``go`` (rocketmq-clients golang/v5, every node, its default TLS),
``go4`` (rocketmq-client-go/v2 v2.1.2 on the remoting port: a sync producer and a push
consumer, every node as a NameServer), ``alions`` (ali-ons 3.12.0, the same),
``nodejs`` (rocketmq-client-nodejs 1.0.8, given a slave: its routes name that node, which
forwards; it takes one address, so a drill never kills that node, moving the master off it
first). Every client but the Python one runs the driver named in ``--drivers``: a JSON
file written by ``python -m tests.support.client_drivers FILE``, which builds them on first
use (``make bench-clients`` does both). Prints a human summary on stderr and one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace

from bench.cluster import (
    log,
    master_of,
    percentile,
    start_cluster,
    stop_cluster,
    switch_master,
    wait_all_in_sync,
)
from bench.official_failover import (
    OfficialLoad,
    check_nothing_lost,
    go_load,
    java_load,
    remoting_load,
    unavailable_ms,
)
from ferrymq.client import Admin
from ferrymq.launcher.cluster import is_running, kill_node, load_plan, save_plan, start_node
from ferrymq.launcher.polling import until

CLIENTS = ("python", "java", "java4", "go", "go4", "alions", "nodejs")
TOPIC, GROUP = "DrillTopic", "drill-readers"
SEND_PAUSE_S = 0.005
ACKS_AROUND_KILL = 20  # acknowledged sends before each kill, and after it before the restart


def client_load(
    client: str, plan, home: str, stop_file: str, drivers: dict
) -> tuple[OfficialLoad, str]:
    """The client's load, and the node id a drill must not kill ("" for none)."""
    first = min(plan.nodes, key=lambda n: n.grpc)
    if client == "python":
        scenario = {"scenario": "load", "endpoint": first.grpc, "topic": TOPIC, "group": GROUP}
        return OfficialLoad({**scenario, "pause_s": SEND_PAUSE_S}, home, stop_file), ""
    if client not in drivers:
        raise ValueError(f"no driver for {client!r} in --drivers (tests.support.client_drivers)")
    argv, env = drivers[client]["argv"], drivers[client].get("env", {})
    every_node = ";".join(n.grpc for n in plan.nodes)
    if client == "java":
        return java_load(argv, every_node, TOPIC, GROUP, home, stop_file, SEND_PAUSE_S), ""
    if client == "java4":
        namesrv = ";".join(n.remoting for n in plan.nodes)
        return remoting_load(argv, namesrv, TOPIC, GROUP, home, stop_file, SEND_PAUSE_S), ""
    if client == "go":
        return go_load(argv, every_node, TOPIC, GROUP, home, stop_file, SEND_PAUSE_S), ""
    if client in ("go4", "alions"):
        namesrv = [n.remoting for n in plan.nodes]
        load = remoting_load(argv, namesrv, TOPIC, GROUP, home, stop_file, SEND_PAUSE_S)
        return load, ""
    if client == "nodejs":
        # It takes one address (its list form is broken too), so it reaches the cluster
        # through one node only: a slave, which the drills never kill.
        access = next(n for n in plan.nodes if n.id != master_of(plan).id)
        scenario = {
            "scenario": "load",
            "endpoint": access.grpc,
            "topic": TOPIC,
            "group": GROUP,
            "stop_file": stop_file,
            "pause_s": SEND_PAUSE_S,
        }
        return OfficialLoad(scenario, home, stop_file, argv, env), access.id
    raise ValueError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")


def drill(directory: str, load: OfficialLoad, spared: str) -> float:
    """Kill -9 of the master under ``load``; the ms until its sends and receives resumed.
    The node ``spared`` is not killed: it is moved off the master first (a planned
    switchover). The node is restarted and every node in sync again before it returns."""
    plan = load_plan(directory)
    wait_all_in_sync(plan)
    master = master_of(plan)
    if master.id == spared:
        master = switch_master(plan, next(n for n in plan.nodes if n.id != spared))
    sent = len(load.of("sent"))
    load.until(lambda: len(load.of("sent")) > sent + ACKS_AROUND_KILL, 60, "load before the kill")
    killed_at = time.monotonic()
    kill_node(plan, master)  # its ports held for its restart
    took_ms = unavailable_ms(load, killed_at, 60)
    sent = len(load.of("sent"))
    load.until(lambda: len(load.of("sent")) > sent + ACKS_AROUND_KILL, 60, "load after the kill")
    until(lambda: not is_running(master, plan), 10, f"{master.id} to die")
    restarted = start_node(plan, master)
    save_plan(replace(plan, nodes=tuple(restarted if n.id == master.id else n for n in plan.nodes)))
    return took_ms


def run_client(
    client: str, drills: int, root: str, drivers: dict, store: dict | None = None
) -> dict:
    """``drills`` kills of the master under ``client``'s load; ``store``: the nodes' store
    settings in place of ``bench.cluster.STORE`` (a test's smaller segments)."""
    directory = os.path.join(root, f"{client}-cluster")
    home = os.path.join(root, f"{client}-home")
    os.makedirs(home, exist_ok=True)
    stop_file = os.path.join(home, "stop")
    plan = start_cluster(directory, "SYNC", store)
    load = None
    try:
        with Admin(plan.nodes[0].grpc) as admin:
            admin.create_topic(TOPIC, 4)
            admin.create_group(GROUP)
        load, spared = client_load(client, plan, home, stop_file, drivers)
        load.until(lambda: len(load.of("received")) >= 20, 180, f"{client}'s load")
        took = []
        for number in range(1, drills + 1):
            took.append(round(drill(directory, load, spared), 1))
            log(f"  {client} drill {number}: sends and receives resumed after {took[-1]:.0f} ms")
        wait_all_in_sync(load_plan(directory))
        events = load.stop()
        sent, received = check_nothing_lost(events)
        lost = len(sent - received)
        failures = sum(1 for e in events if e["event"] == "send_failed")
        log(f"  {client}: {len(sent)} acknowledged, {lost} lost, {failures} sends given up")
        return {
            f"{client}_failover_unavailable_ms": took,
            f"{client}_failover_unavailable_ms_p50": round(statistics.median(took), 1),
            f"{client}_failover_unavailable_ms_p99": round(percentile(took, 0.99), 1),
            f"{client}_failover_unavailable_ms_max": max(took),
            f"{client}_failover_acknowledged": len(sent),
            f"{client}_failover_lost": lost,
            f"{client}_failover_send_failures": failures,
        }
    finally:
        if load is not None:
            load.kill()
        stop_cluster(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    parser.add_argument("--drills", type=int, default=5)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument(
        "--drivers",
        default="",
        help="JSON file of the clients' drivers (python -m tests.support.client_drivers FILE)",
    )
    args = parser.parse_args()
    drivers = {}
    if args.drivers:
        with open(args.drivers, encoding="utf-8") as f:
            drivers = json.load(f)
    figures: dict = {"drills": args.drills}
    with tempfile.TemporaryDirectory(prefix="ferrymq-client-failover-") as root:
        for client in args.clients.split(","):
            log(f"{client}: {args.drills} kills of the master under its load")
            figures |= run_client(client.strip(), args.drills, root, drivers)
    if not args.json:
        print(json.dumps(figures, indent=1), file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
