"""The ``ferrymq`` command line against ``ferrymq up`` (what ``make up`` runs: a 3-node
cluster), started in a temporary directory on free ports."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferrymq.cli.main import main
from ferrymq.client import SimpleConsumer
from ferrymq.launcher.cluster import cluster_down
from ferrymq.launcher.polling import until
from routing.formats import NEWEST_FORMAT
from tests.support import ROOT


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("up")
    errors = open(workdir / "up.err", "w")  # noqa: SIM115 (the process outlives this block)
    process = subprocess.Popen(
        [sys.executable, "-m", "ferrymq.cli", "up", "--free-ports"],
        cwd=workdir,
        env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        banner = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            banner.append(line)
            if "Ctrl-C stops the cluster" in line:
                break
        assert "Ctrl-C stops the cluster" in "".join(banner), (workdir / "up.err").read_text()
        nodes = json.loads((workdir / "data" / "cluster.json").read_text())["nodes"]
        yield nodes[0]["grpc"], "".join(banner), workdir, process
    finally:
        if process.poll() is None:
            process.kill()
        if (workdir / "data" / "cluster.json").exists():
            cluster_down(str(workdir / "data"))  # the nodes are detached: stop them too


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_up_creates_the_demo_topic_and_says_how_to_use_it(up, capsys):
    address, banner, workdir, _ = up
    assert "ferrymq produce demo" in banner and "ferrymq consume demo" in banner
    for node in ("node-1", "node-2", "node-3"):  # data under ./data
        assert (workdir / "data" / node / "commitlog").is_dir()
    code, out, _ = run(capsys, "topic", "list", "--server", address, "--json")
    assert code == 0
    assert {
        "name": "demo",
        "queue_count": 4,
        "message_type": "NORMAL",
        "permission": "READ_WRITE",
        "broker_groups": ["group-1"],
        "lite_expiration_minutes": -1,  # a LITE topic's setting: -1 (never) elsewhere
    } in json.loads(out)
    code, out, _ = run(capsys, "group", "list", "--server", address)
    assert code == 0 and "demo-group" in out


def test_topic_commands(up, capsys):
    address = up[0]
    code, out, _ = run(
        capsys, "topic", "create", "cli-t", "--queues", "2", "--type", "FIFO", "--server", address
    )
    assert code == 0 and "created topic cli-t (2 queues on group-1)" in out
    code, out, _ = run(capsys, "topic", "describe", "cli-t", "--server", address, "--json")
    described = json.loads(out)
    assert described["topic"]["message_type"] == "FIFO" and len(described["queues"]) == 2
    code, out, _ = run(capsys, "topic", "describe", "cli-t", "--server", address)
    assert "min offset" in out and "cli-t: 2 queues, FIFO" in out
    code, _, err = run(capsys, "topic", "create", "cli-t", "--server", address)
    assert code == 1 and "ALREADY_EXISTS" in err
    assert run(capsys, "topic", "delete", "cli-t", "--server", address)[0] == 0
    code, _, err = run(capsys, "topic", "describe", "cli-t", "--server", address)
    assert code == 1 and "NOT_FOUND" in err
    code, _, err = run(capsys, "topic", "create", "bad name", "--server", address)
    assert code == 1 and "INVALID_ARGUMENT" in err


def test_produce_consume_commit_query_and_progress(up, capsys):
    address = up[0]
    run(capsys, "topic", "create", "cli-m", "--queues", "2", "--server", address)
    run(capsys, "group", "create", "cli-g", "--server", address)
    code, out, _ = run(
        capsys,
        "produce",
        "cli-m",
        "first",
        "second",
        "--key",
        "order-7",
        "--tag",
        "T",
        "--server",
        address,
        "--json",
    )
    assert code == 0 and json.loads(out)["sent"] == 2
    code, out, _ = run(
        capsys,
        "consume",
        "cli-m",
        "--group",
        "cli-g",
        "--commit",
        "--wait",
        "1",
        "--server",
        address,
        "--json",
    )
    consumed = json.loads(out)
    assert sorted(m["body"] for m in consumed) == ["first", "second"]
    assert all(m["tag"] == "T" and m["keys"] == ["order-7"] for m in consumed)
    code, out, _ = run(
        capsys, "group", "progress", "cli-g", "--topic", "cli-m", "--server", address, "--json"
    )
    progress = json.loads(out)
    assert sum(q["lag"] for q in progress) == 0 and sum(q["broker_offset"] for q in progress) == 2
    code, out, _ = run(
        capsys, "group", "progress", "cli-g", "--topic", "cli-m", "--server", address
    )
    assert "consumer offset" in out and "total" in out
    code, out, _ = run(
        capsys, "query", "--topic", "cli-m", "--key", "order-7", "--server", address, "--json"
    )
    assert sorted(m["body"] for m in json.loads(out)) == ["first", "second"]
    message_id = consumed[0]["message_id"]
    code, out, _ = run(capsys, "query", "--id", message_id, "--topic", "cli-m", "--server", address)
    assert code == 0 and message_id in out
    queue, offset = consumed[0]["queue_id"], consumed[0]["queue_offset"]
    code, out, _ = run(
        capsys,
        "query",
        "--topic",
        "cli-m",
        "--offset",
        str(offset),
        "--queue",
        str(queue),
        "--server",
        address,
        "--json",
    )
    assert [m["message_id"] for m in json.loads(out)] == [message_id]
    code, _, err = run(capsys, "query", "--key", "x", "--server", address)
    assert code == 2 and "--key needs --topic" in err


def test_message_history_shows_each_groups_deliveries(up, capsys):
    address = up[0]
    run(capsys, "topic", "create", "cli-h", "--queues", "1", "--server", address)
    run(capsys, "group", "create", "cli-popper", "--server", address)
    run(capsys, "group", "create", "cli-puller", "--server", address)
    assert run(capsys, "produce", "cli-h", "one", "two", "--server", address)[0] == 0
    code, _, _ = run(
        capsys, "consume", "cli-h", "--group", "cli-puller", "--commit", "--max", "1",
        "--wait", "1", "--server", address,
    )  # fmt: skip
    assert code == 0
    with SimpleConsumer(address, "cli-popper", "cli-h") as consumer:
        first, second = until(lambda: consumer.receive(2, invisible_s=300, wait_s=1), 10, "two")
        consumer.ack(first)
    history = ["message", "history", "--topic", "cli-h", "--queue", "0", "--server", address]
    code, out, _ = run(capsys, *history, "--offset", str(first.queue_offset), "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["broker_group"] == "group-1" and answer["truncated"] is False
    by_group = {g["group"]: g for g in answer["groups"]}
    assert by_group["cli-popper"]["state_text"] == "consumed: acked at attempt 1"
    assert [e["kind"] for e in by_group["cli-popper"]["events"]] == ["delivered", "acked"]
    assert by_group["cli-puller"]["state_text"] == "consumed (committed offset 1)"
    code, out, _ = run(capsys, *history, "--offset", str(second.queue_offset))
    assert code == 0
    assert f"cli-h queue 0 offset {second.queue_offset} on group-1" in out
    assert "in flight: attempt 1, invisible until" in out
    assert "not consumed yet (committed offset 1)" in out
    assert "delivered" in out and "acked" not in out
    code, _, err = run(capsys, *history, "--offset", "9")
    assert code == 1 and "no message at cli-h queue 0 offset 9" in err


def test_consume_max_commits_only_what_it_printed(up, capsys):
    address = up[0]
    run(capsys, "topic", "create", "cli-max", "--queues", "1", "--server", address)
    run(capsys, "group", "create", "cli-max-g", "--server", address)
    run(capsys, "produce", "cli-max", "--count", "10", "--size", "8", "--server", address)
    code, out, _ = run(
        capsys,
        "consume",
        "cli-max",
        "--group",
        "cli-max-g",
        "--max",
        "3",
        "--commit",
        "--server",
        address,
        "--json",
    )
    assert code == 0 and len(json.loads(out)) == 3
    code, out, _ = run(
        capsys,
        "consume",
        "cli-max",
        "--group",
        "cli-max-g",
        "--wait",
        "1",
        "--server",
        address,
        "--json",
    )
    assert code == 0 and [m["queue_offset"] for m in json.loads(out)] == list(range(3, 10))


def test_produce_a_generated_load_in_batches(up, capsys):
    address = up[0]
    run(capsys, "topic", "create", "cli-load", "--server", address)
    code, out, _ = run(
        capsys,
        "produce",
        "cli-load",
        "--count",
        "2000",
        "--size",
        "256",
        "--batch",
        "100",
        "--server",
        address,
    )
    assert code == 0 and out.startswith("sent 2000 messages in ")
    code, out, _ = run(capsys, "topic", "describe", "cli-load", "--server", address, "--json")
    assert sum(q["max_offset"] for q in json.loads(out)["queues"]) == 2000


def test_cluster_status_shows_voters_leader_groups_and_members(up, capsys):
    workdir = up[2]
    code, out, _ = run(capsys, "cluster", "status", "--data", str(workdir / "data"))
    assert code == 0
    assert "routing: leader 127.0.0.1:" in out and "term" in out
    assert out.count("MASTER") == 1 and out.count("SLAVE") == 2
    code, out, _ = run(capsys, "cluster", "status", "--data", str(workdir / "data"), "--json")
    status = json.loads(out)
    assert len(status["voters"]) == 3 and sum(v["leader"] for v in status["voters"]) == 1
    assert [g["name"] for g in status["broker_groups"]] == ["group-1"]
    assert all(n["alive"] for n in status["nodes"])


def test_a_new_cluster_writes_the_newest_routing_format_and_finalize_says_so(up, capsys):
    """No node of ``up`` is of an older release, so its controller moved routing to the
    newest format at once; finalize-upgrade confirms it, routing commits after it (a topic
    created), and cluster status shows the format and each node's version."""
    data = str(up[2] / "data")
    code, out, _ = run(capsys, "cluster", "status", "--data", data, "--json")
    status = json.loads(out)
    assert status["routing_format"] == NEWEST_FORMAT
    assert {n["routing_format"] for n in status["nodes"]} == {NEWEST_FORMAT}
    assert all(n["software_version"] for n in status["nodes"])
    code, out, _ = run(capsys, "cluster", "finalize-upgrade", "--data", data)
    assert code == 0 and f"routing writes format {NEWEST_FORMAT}" in out, out
    code, out, _ = run(capsys, "cluster", "status", "--data", data)
    assert f"format {NEWEST_FORMAT}" in out
    code, _, err = run(capsys, "topic", "create", "after-finalize", "--server", up[0])
    assert code == 0, err
    code, out, _ = run(capsys, "topic", "list", "--server", up[0])
    assert "after-finalize" in out


def test_sigterm_stops_up_cleanly(up):
    _, _, workdir, process = up
    pids = [n["pid"] for n in json.loads((workdir / "data" / "cluster.json").read_text())["nodes"]]
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    assert "stopped node-1, node-2, node-3" in process.stdout.read()
    for pid in pids:  # every node process is gone (not a zombie of ours: they are detached)
        assert (
            not Path(f"/proc/{pid}/cmdline").exists()
            or not Path(f"/proc/{pid}/cmdline").read_bytes()
        )
