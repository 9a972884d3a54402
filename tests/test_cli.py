"""The ``ferrymq`` command line against ``ferrymq up`` (what ``make up`` runs), started in
a temporary directory on a free port."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from ferrymq.cli import main
from tests.node_process import ROOT


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("up")
    process = subprocess.Popen(
        [sys.executable, "-m", "ferrymq.cli", "up", "--port", "0"],
        cwd=workdir,
        env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    address, banner = None, []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        banner.append(line)
        if " ready on " in line:
            address = line.rsplit(" ", 1)[1].strip()
        if "Ctrl-C stops the node" in line:
            break
    assert address, banner
    yield address, "".join(banner), workdir, process
    if process.poll() is None:
        process.kill()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_up_creates_the_demo_topic_and_says_how_to_use_it(up, capsys):
    address, banner, workdir, _ = up
    assert "ferrymq produce demo" in banner and "ferrymq consume demo" in banner
    assert (workdir / "data" / "commitlog").is_dir()  # data under ./data
    code, out, _ = run(capsys, "topic", "list", "--server", address, "--json")
    assert code == 0
    assert {
        "name": "demo",
        "queue_count": 4,
        "message_type": "NORMAL",
        "permission": "READ_WRITE",
    } in json.loads(out)
    code, out, _ = run(capsys, "group", "list", "--server", address)
    assert code == 0 and "demo-group" in out


def test_topic_commands(up, capsys):
    address = up[0]
    code, out, _ = run(
        capsys, "topic", "create", "cli-t", "--queues", "2", "--type", "FIFO", "--server", address
    )
    assert code == 0 and "created topic cli-t (2 queues)" in out
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


def test_sigterm_stops_up_cleanly(up):
    _, _, _, process = up
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert "stopped" in process.stdout.read()
