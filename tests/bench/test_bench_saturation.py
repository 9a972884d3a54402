"""bench.saturation's accounting of the load driver's steps: the warm-up step every run
begins with is reported apart and counts in no figure. A stand-in driver (a Python
script speaking ``bench/java/LoadDriver.java``'s events) refuses part of whatever step
it runs first, as the JVM's first seconds did; the ramp's sustainable rate is what the
steps after it kept up with. The real drivers (``LoadDriver`` on RocketMQ's Java client,
``KafkaLoadDriver`` on Kafka's, ``bench.sdk_load_driver`` on ferrymq's SDK) count every
send and arrival of a real broker's steps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from bench import saturation
from ferrymq.launcher.cluster import ClusterPlan
from tests.support import clients

# Each step's event as the Java driver prints it; the first step (a cold JVM) has 5 %
# of its sends refused with SYSTEM_BUSY.
COLD_FIRST_STEP_DRIVER = textwrap.dedent(
    """
    import json, sys
    steps = [s.split(":") for s in sys.argv[6].split(",")]
    for i, (rate, seconds) in enumerate(steps):
        sent = int(float(rate) * float(seconds))
        refused = sent // 20 if i == 0 else 0
        print(json.dumps({
            "event": "step", "rate": float(rate), "seconds": float(seconds),
            "elapsed_ms": float(seconds) * 1000, "sent": sent, "acked": sent - refused,
            "errors": {"broker:2": refused} if refused else {}, "error_samples": {},
            "publish_ms": {"p50": 2.0, "p99": 9.0, "max": 20.0}, "received": sent - refused,
            "end_to_end_ms": {"p50": 3.0, "p99": 11.0, "max": 25.0}, "backlog": 0,
        }), flush=True)
    print(json.dumps({"event": "drained", "received": 0, "backlog": 0}), flush=True)
    print(json.dumps({"event": "done"}), flush=True)
    """
)


def no_nodes(tmp_path) -> ClusterPlan:
    """A plan with no node to scrape: the liveness figures stay empty."""
    return ClusterPlan(str(tmp_path), "secret", (), {})


def test_the_ramp_counts_the_steps_after_the_warm_up(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(COLD_FIRST_STEP_DRIVER)
    scale = saturation.Scale((1_000, 2_000, 3_000), step_s=1.0, warm_up_s=0.5)

    figures = saturation.ramp(no_nodes(tmp_path), (sys.executable, str(driver)), scale)

    assert figures["warm_up_step"]["rate"] == saturation.WARM_UP_RATE
    assert figures["warm_up_step"]["errors"] == {"broker:2": 12}
    assert [step["rate"] for step in figures["steps"]] == [1_000, 2_000, 3_000]
    assert all(step["acked"] == step["sent"] for step in figures["steps"])
    assert figures["sustainable_msgs_per_s"] == 3_000
    json.dumps(figures)  # the figures stay printable as the run's JSON line


def test_a_driver_that_ends_before_its_warm_up_reports_no_step(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text('print(\'{"event": "done"}\')\n')
    scale = saturation.Scale((1_000,), step_s=1.0, warm_up_s=0.5)

    figures = saturation.ramp(no_nodes(tmp_path), (sys.executable, str(driver)), scale)

    assert figures == {"warm_up_step": None, "steps": [], "sustainable_msgs_per_s": 0.0}


def test_each_step_counts_the_cpu_of_the_brokers_and_of_the_load_client(tmp_path):
    """Per step: CPU per message and cores of the ``servers`` given and of the driver."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        COLD_FIRST_STEP_DRIVER.replace(
            "for i, (rate, seconds) in enumerate(steps):",
            "import time\nfor i, (rate, seconds) in enumerate(steps):\n"
            "    spent = time.process_time()\n"
            "    while time.process_time() - spent < 0.2: pass  # the client's work",
        )
    )
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        scale = saturation.Scale((1_000,), step_s=1.0, warm_up_s=0.5)
        figures = saturation.ramp(
            no_nodes(tmp_path), (sys.executable, str(driver)), scale, "", lambda: [spinner.pid]
        )
    finally:
        spinner.kill()
        spinner.wait()

    (step,) = figures["steps"]
    assert step["cpu_us_per_msg"]["client"] * step["sent"] >= 0.15e6  # its 0.2 s, at least
    assert step["cpu_us_per_msg"]["server"] > 0 and step["cpu_cores"]["server"] > 0
    assert figures["warm_up_step"]["cpu_us_per_msg"]["client"] > 0


def test_a_step_below_the_top_that_did_not_keep_up_ends_the_sustainable_rate():
    def step(rate: float, acked_share: float) -> dict:
        return {
            "rate": rate,
            "sent": 1000,
            "acked": int(1000 * acked_share),
            "errors": {},
            "publish_ms": {"p99": 5.0},
            "backlog": 0,
        }

    steps = [step(1_000, 1.0), step(2_000, 0.9), step(3_000, 1.0)]
    assert saturation.sustainable_rate(steps) == 1_000


def test_a_ramp_given_a_name_server_hands_the_driver_that_address(tmp_path):
    """``--peer apache``: the broker's name server, not the (empty) plan's nodes."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        COLD_FIRST_STEP_DRIVER.replace(
            "import json, sys",
            f"import json, sys; open({str(tmp_path / 'asked')!r}, 'w').write(sys.argv[1])",
        )
    )
    scale = saturation.Scale((1_000,), step_s=1.0, warm_up_s=0.5)

    figures = saturation.ramp(
        no_nodes(tmp_path), (sys.executable, str(driver)), scale, "127.0.0.1:9876"
    )

    assert (tmp_path / "asked").read_text() == "127.0.0.1:9876"
    assert figures["sustainable_msgs_per_s"] == 1_000


def test_the_apache_ramp_gives_the_broker_the_send_queue_wait_asked_for(monkeypatch):
    """``--apache-send-queue-wait-ms``: the broker starts with it (200 is Apache's own)."""
    started = []

    class Broker:
        namesrv = "127.0.0.1:9876"

        def create_topic(self, topic, queues):
            assert (topic, queues) == ("saturation", saturation.QUEUES)

    def start_one_broker(registry, java, lib, root, settings):
        started.append(settings)
        return Broker()

    monkeypatch.setattr(saturation, "start_one_broker", start_one_broker)
    monkeypatch.setattr(saturation.jvm, "resolve", lambda name, artifacts: "lib")
    monkeypatch.setattr(saturation.jvm, "find_java", lambda: "java")
    monkeypatch.setattr(saturation.load_driver, "argv", lambda: ["driver"])
    monkeypatch.setattr(
        saturation, "ramp", lambda plan, argv, scale, namesrv, servers: {"asked": namesrv}
    )

    shipped = saturation.run_apache("smoke", 0, send_queue_wait_ms=200)
    default = saturation.run_apache("smoke", 0)

    assert started == [{"waitTimeMillsInSendQueue": "200"}, {}]
    assert shipped["apache_send_queue_wait_ms"] == 200 and shipped["asked"] == Broker.namesrv
    assert "apache_send_queue_wait_ms" not in default


def test_a_run_that_may_fill_the_disk_is_refused_before_anything_starts(monkeypatch):
    """A step answered DISK_FULL measures a full disk, not a broker: an 80,000 msgs/s
    step did, on a disk filled by earlier runs' leftovers. Every run now checks first."""
    scale = saturation.scale_of("quick", (10_000,))
    needed = saturation.disk_needed_bytes(scale, 3)
    at_least = 3 * (10_000 * scale.step_s + saturation.WARM_UP_RATE * scale.warm_up_s)
    assert needed >= at_least * (saturation.SIZE + 256)  # every message on every replica
    with pytest.raises(SystemExit, match=r"may write 3\.9 GiB under /x, which has 3\.9 GiB free"):
        saturation.check_free_disk(needed, "/x", free=needed - 1)
    saturation.check_free_disk(needed, "/x", free=needed)

    class Full:
        free = 1 << 20

    monkeypatch.setattr(saturation.shutil, "disk_usage", lambda directory: Full)
    monkeypatch.setattr(saturation, "start_cluster", lambda *args: pytest.fail("started"))
    with pytest.raises(SystemExit, match="GiB free"):
        saturation.run("smoke", 3, 0, 0, None, client="sdk")
    with pytest.raises(SystemExit, match="GiB free"):
        saturation.run_peer("kafka", 3, "smoke", 0, False, (), lambda *a: pytest.fail("started"))
    monkeypatch.setattr(Full, "free", saturation.disk_needed_bytes(scale, 1) + 1)
    with pytest.raises(SystemExit, match="GiB free"):  # the ramp fits; its soak's do not
        saturation.run("quick", 1, 0, 10, 10_000, rates=(10_000,))


# Both load drivers for real, each with its client against a real broker at a rate any
# broker here keeps up with: each step's every send is answered and every message read.
@pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)
@pytest.mark.parametrize("peer, client", [("ferrymq", "java"), ("ferrymq", "sdk"), ("kafka", "")])
def test_the_load_driver_counts_every_send_and_every_arrival_of_a_step(peer, client):
    rates = (300, 600)
    if peer == "kafka":
        figures = saturation.run_kafka("smoke", 1, 0, rates=rates)
        assert figures["kafka_version"] and figures["kafka_client"].startswith("org.apache")
    else:
        figures = saturation.run("smoke", 1, 0, 0, None, rates=rates, client=client)
        assert figures["client"] == client

    assert figures["peer"] == peer and figures["nodes"] == 1
    assert figures["warm_up_step"]["rate"] == saturation.WARM_UP_RATE
    steps = figures["steps"]
    assert [step["rate"] for step in steps] == list(rates)
    for step in steps:
        assert step["sent"] == step["rate"] * saturation.SCALES["smoke"].step_s
        assert step["acked"] == step["sent"] and step["errors"] == {}
        assert step["backlog"] < step["rate"]
        assert 0 < step["publish_ms"]["p50"] <= step["publish_ms"]["p99"]
        assert step["end_to_end_ms"]["p50"] > 0 and step["end_to_end_ms"]["max"] > 0
        # The brokers' processes (a node with its routing host; Kafka's JVM) and the client's.
        assert step["cpu_us_per_msg"]["server"] > 0 and step["cpu_us_per_msg"]["client"] > 0
    # A step counts what arrives while it runs (a message still on its way arrives in the
    # next): every acknowledged message arrived, or is the last step's backlog.
    every = [figures["warm_up_step"], *steps]
    assert sum(s["received"] for s in every) + steps[-1]["backlog"] == sum(
        s["acked"] for s in every
    )
    assert figures["sustainable_msgs_per_s"] == rates[-1]
