"""The failover, topics and backlog parts of bench.peers (and bench.spark's Kafka source)
without a JVM or a broker: the drill bookkeeping on synthetic timelines, the drill loop on
a fake system, the RocketMQ remoting calls against a fake server, page-cache eviction on
real files, the growth loops on a fake peer, the configurations, the part selection and
the report."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from bench.peers import drills, growth, pagecache, remoting, report, rocketmq_apache
from bench.peers.run import PARTS, PEERS, select
from ferrymq.codec.remoting import encode


# ---- drill bookkeeping ------------------------------------------------------------------
def test_first_ack_after_skips_what_the_dead_master_may_have_answered():
    killed = 100.0
    acks = [
        (1, 99.0, 99.5),  # before the kill
        (2, 99.9, 100.02),  # in flight at the kill, answered within the window: old master
        (3, 99.95, 101.4),  # in flight at the kill, answered long after: a retry, new master
        (4, 100.5, 101.2),  # started after the kill
    ]
    assert drills.first_ack_after(acks, killed) == 101.2
    assert drills.first_ack_after(acks[:2], killed) is None
    assert drills.first_ack_after(acks[:3], killed) == 101.4


def test_a_client_process_timeline_round_trips_through_its_lines():
    timeline = drills.Timeline()
    for line in (
        drills.event_line("A", 7, 10.5, 10.75),
        drills.event_line("F", 11.0, "DEADLINE_EXCEEDED"),
        drills.event_line("R", 7),
        drills.event_line("E", "producer: boom"),
        "receive: some log line",
        "A not-a-number",
    ):
        timeline.apply_line(line + "\n")
    assert timeline.acks == [(7, 10.5, 10.75)]
    assert timeline.failures == [(11.0, "DEADLINE_EXCEEDED")]
    assert timeline.received == {7}
    assert timeline.errors == ["producer: boom"]
    assert timeline.failures_between(10.0, 12.0) == 1
    assert timeline.failures_between(12.0, 13.0) == 0


def test_summarize_counts_the_loss_and_the_percentiles():
    figures = drills.FailoverFigures("x")
    figures.drills = [
        drills.Drill("a", 1200.0, 3),
        drills.Drill("b", 800.0, 1),
        drills.Drill("c", None, 9),
    ]
    drills.summarize(figures, acked={1, 2, 3, 4, 5}, read={1, 2, 4, 99})
    assert figures.not_recovered == 1
    assert figures.unavailable_ms_p50 == 1200.0  # of the two that recovered
    assert figures.unavailable_ms_max == 1200.0
    assert (figures.acknowledged, figures.read_back, figures.lost) == (5, 3, 2)
    assert figures.lost_sample == [3, 5]
    assert json.loads(json.dumps(figures.to_json()))["drills"][2]["unavailable_ms"] is None


def test_drill_bodies_carry_their_number_in_1_kib():
    body = drills.drill_body(123456789)
    assert len(body) == 1024 and drills.drill_seq(body) == 123456789


class FakeLoad:
    """Acknowledges a send every 2 ms while the fake master is alive."""

    def __init__(self, system: FakeSystem) -> None:
        self.system = system
        self.timeline = drills.Timeline()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        seq = 0
        while not self.stopped.is_set():
            seq += 1
            started = time.monotonic()
            while self.system.down_until > time.monotonic():
                time.sleep(0.002)
            time.sleep(0.002)
            self.timeline.ack(seq, started, time.monotonic())
            self.timeline.received.add(seq)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)


class FakeSystem:
    name = "fake"
    client = "fake client"
    failover_how = "kill -9 of nothing"

    def __init__(self, outage_s: float, lose: int = 0) -> None:
        self.outage_s, self.lose = outage_s, lose
        self.down_until = 0.0
        self.calls: list[str] = []
        self.load: FakeLoad | None = None

    def failover_prepare(self, topic):
        self.calls.append(f"prepare {topic}")

    def steady_load(self, topic):
        self.load = FakeLoad(self)
        return self.load

    def master_node(self, topic):
        return "n1", "n1 (master)"

    def kill_node(self, key):
        self.calls.append(f"kill {key}")
        self.down_until = time.monotonic() + self.outage_s

    def restart_node(self, key):
        self.calls.append(f"restart {key}")
        self.down_until = 0.0  # back, as a restarted master rejoins

    def wait_rejoined(self, topic):
        self.calls.append("rejoined")

    def read_back(self, topic, expected):
        return set(sorted(expected)[self.lose :])


def test_the_drill_loop_times_the_outage_and_counts_what_the_read_back_misses():
    system = FakeSystem(outage_s=0.3, lose=2)
    figures = drills.run_drills(system, 2, acks_before=20, acks_after=20)
    assert [d.killed for d in figures.drills] == ["n1 (master)", "n1 (master)"]
    for drill in figures.drills:
        assert 280 <= drill.unavailable_ms < 1500
    assert figures.lost == 2 and figures.lost_sample == [1, 2]
    assert figures.acknowledged == figures.read_back + 2
    assert figures.steady_consumer_received == figures.acknowledged
    assert system.calls[0] == "prepare FailoverDrill"
    assert system.calls.count("kill n1") == 2 and system.calls.count("restart n1") == 2
    # every kill waits for the group to be whole again first
    kills = [i for i, c in enumerate(system.calls) if c.startswith("kill")]
    assert all(system.calls[i - 1] == "rejoined" for i in kills)


def test_a_drill_without_recovery_is_counted_not_hung(monkeypatch):
    monkeypatch.setattr(drills, "RECOVERY_TIMEOUT_S", 0.3)
    system = FakeSystem(outage_s=60)
    figures = drills.run_drills(system, 1, acks_before=5)
    assert figures.drills[0].unavailable_ms is None
    assert figures.not_recovered == 1 and figures.unavailable_ms_p50 is None


def test_a_replica_that_does_not_rejoin_after_the_last_drill_keeps_the_drills_figures():
    """rocketmq-shortest: five drills measured, then its SyncStateSet did not come back
    within the wait, and the whole system was reported as not measured."""
    system = FakeSystem(outage_s=0.2, lose=1)
    rejoins = []

    def wait_rejoined(topic):
        rejoins.append(topic)
        if len(rejoins) == 4:  # before the run, before each of two drills, then after
            raise TimeoutError("timed out after 180 s waiting for the SyncStateSet")

    system.wait_rejoined = wait_rejoined
    figures = drills.run_drills(system, 2, acks_before=5, acks_after=5)
    assert len(figures.drills) == 2 and figures.unavailable_ms_p50 is not None
    assert figures.error.startswith("after 2 drill(s): timed out after 180 s")
    assert figures.lost == 1 and figures.acknowledged > 0  # the read-back still ran
    table = "\n".join(report.failover_markdown({"fake": figures.to_json()}, 2))
    assert "| fake | fake client |" in table and "after 2 drill(s)" in table


# ---- the RocketMQ remoting calls ------------------------------------------------------
def test_the_cluster_table_with_bare_integer_keys_names_the_master():
    body = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",'
        b'2:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"C"}},'
        b'"clusterAddrTable":{"C":["broker-a"]}}'
    )
    table = remoting.lenient_json(body)
    assert remoting.broker_addresses(table, "broker-a") == {
        0: "127.0.0.1:10911",
        2: "127.0.0.1:10921",
    }
    assert remoting.broker_addresses(table, "broker-b") == {}


class FakeRemotingServer:
    """Answers each request with ``answer(request) -> (code, remark, body)``."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[tuple[dict, bytes]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                asked = remoting.read_command(connection)
                self.requests.append(asked)
                code, remark, answer = self.answer(asked)
                connection.sendall(encode(asked.reply(code, remark, body=answer)))

    def close(self) -> None:
        self.listener.close()


def test_master_lookup_and_topic_creation_against_a_fake_server():
    def answer(asked):
        if asked.code == remoting.GET_BROKER_CLUSTER_INFO:
            return 0, None, b'{"brokerAddrTable":{"g":{"brokerAddrs":{0:"127.0.0.1:1"}}}}'
        if asked.code == remoting.GET_ROUTEINFO_BY_TOPIC:
            known = asked.ext_fields["topic"] == "T1"
            return (0, None, b"{}") if known else (17, "No topic route info", b"")
        return 0, None, b""

    server = FakeRemotingServer(answer)
    try:
        assert remoting.master_address(server.address, "g") == "127.0.0.1:1"
        assert remoting.has_route(server.address, "T1")
        assert not remoting.has_route(server.address, "T2")
        remoting.create_topics(server.address, ["T1", "T2"], 1)
        asked = server.requests[-1]
        assert asked.code == remoting.UPDATE_AND_CREATE_TOPIC_LIST and asked.language == "PYTHON"
        configs = json.loads(asked.body)["topicConfigList"]
        assert [c["topicName"] for c in configs] == ["T1", "T2"]
        assert all(c["readQueueNums"] == c["writeQueueNums"] == 1 for c in configs)
        assert all(c["perm"] == 6 for c in configs)
    finally:
        server.close()


def test_a_refused_request_raises_with_the_remark():
    server = FakeRemotingServer(lambda asked: (1, "create topic failed", b""))
    try:
        with pytest.raises(remoting.RemotingError, match="create topic failed"):
            remoting.create_topics(server.address, ["T"], 1)
    finally:
        server.close()


# ---- the page cache -------------------------------------------------------------------
def _on_tmpfs(path: str) -> bool:
    best, kind = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            _, point, fs = line.split()[:3]
            if path.startswith(point) and len(point) > len(best):
                best, kind = point, fs
    return kind in ("tmpfs", "ramfs", "overlay")


def test_eviction_without_root_empties_the_page_cache_of_the_files(tmp_path):
    if _on_tmpfs(str(tmp_path)):
        pytest.skip("files in memory: nothing to evict")
    (tmp_path / "a").mkdir()
    for name in ("a/x", "y"):
        with open(tmp_path / name, "wb") as f:
            f.write(os.urandom(2 << 20))
    files = pagecache.data_files([str(tmp_path)])
    assert [os.path.relpath(f, tmp_path) for f in files] == ["a/x", "y"]
    assert pagecache.resident_fraction(files) == 1.0  # just written
    done = pagecache.evict([str(tmp_path)])
    assert done["fadvise_dontneed_files"] == 2 and done["data_bytes"] == 4 << 20
    assert done["resident_after_evict"] <= 0.01
    assert done["drop_caches"] == "not needed"
    with open(tmp_path / "y", "rb") as f:
        f.read()
    assert pagecache.resident_fraction(files) == pytest.approx(0.5, abs=0.01)


def test_drop_caches_that_cannot_be_written_is_one_line(tmp_path):
    reason = pagecache.drop_caches(str(tmp_path / "no" / "such" / "file"))
    assert "not writable here" in reason and "\n" not in reason
    assert pagecache.resident_fraction([]) is None


# ---- how the cost grows ---------------------------------------------------------------
def test_topic_levels_spread_and_batches():
    assert growth.topic_names(0, 3) == ["Spread00000", "Spread00001", "Spread00002"]
    assert growth.topic_names(9998, 10_000)[-1] == "Spread09999"
    assert growth.spread(["a", "b"], 5) == ["a", "b", "a", "b", "a"]
    assert [len(b) for b in growth.batches(growth.topic_names(0, 1200))] == [500, 500, 200]
    assert growth.TOPIC_COUNTS["full"] == (1, 100, 1000, 10_000)
    assert growth.BACKLOG_BYTES["full"] == (1 << 30, 4 << 30)
    assert growth.backlog_messages(16 << 20) == 16 * 1024


class FakeGrowing:
    name = "fake"

    def __init__(self, directory: str, fail_cold: bool = False) -> None:
        self.directory = directory
        self.fail_cold = fail_cold
        self.created: list[str] = []
        self.calls: list[str] = []
        self.up = True

    def create_topics(self, names):
        self.created += names

    def spread_send(self, names, count):
        assert names == growth.topic_names(0, len(names))
        return count / (100_000 / len(names))  # slower with more topics

    def backlog_prepare(self, topic, groups):
        self.calls.append(f"prepare {topic} {','.join(groups)}")
        with open(os.path.join(self.directory, "log"), "wb") as f:
            f.write(os.urandom(1 << 20))

    def fill(self, topic, count):
        return count / 50_000

    def read_all(self, topic, count, group):
        self.calls.append(f"read {group}")
        if group == "backlog-cold" and self.fail_cold:
            raise RuntimeError("read 3 of 16384")
        return count / (200_000 if group == "backlog-hot" else 40_000)

    def stop_nodes(self):
        self.calls.append("stop")
        self.up = False

    def start_nodes(self):
        self.calls.append("start")
        self.up = True

    def data_dirs(self):
        return [self.directory]

    def backlog_cleanup(self, topic):
        self.calls.append(f"cleanup {topic}")


def test_topic_levels_create_only_the_new_topics_and_measure_each_level(tmp_path):
    peer = FakeGrowing(str(tmp_path))
    found = growth.run_topics(peer, (1, 10, 100), 1000)
    assert peer.created == growth.topic_names(0, 100)
    assert [(r["topics"], r["created"]) for r in found["levels"]] == [(1, 1), (10, 9), (100, 90)]
    assert [r["msgs_per_s"] for r in found["levels"]] == [100_000, 10_000, 1000]
    assert report.topic_curves({"fake": found}) == {"fake": ([1, 10, 100], [100_000, 10_000, 1000])}


def test_a_level_not_acknowledged_in_time_is_its_partial_rate_and_the_last_level(tmp_path):
    peer = FakeGrowing(str(tmp_path))

    def spread_send(names, count):
        if len(names) == 100:
            raise growth.PartialLevel(300, 10.0, "sends not acknowledged in time")
        return count / 10_000

    peer.spread_send = spread_send
    found = growth.run_topics(peer, (1, 100, 1000), 1000)
    assert [r["msgs_per_s"] for r in found["levels"]] == [10_000, 30]
    assert "300 acknowledged in 10 s" in found["levels"][1]["partial"]
    assert found["error"].startswith("stopped at 100 topics")
    table = "\n".join(report.topics_markdown({"fake": found}))
    assert "| 100 | 30* (" in table and "not all acknowledged within the wait" in table


def test_the_backlog_is_read_hot_then_cold_after_a_restart_with_its_files_evicted(tmp_path):
    peer = FakeGrowing(str(tmp_path))
    found = growth.run_backlog(peer, (16 << 20,))
    row = found["rows"][0]
    assert peer.calls == [
        "prepare Backlog0 backlog-hot,backlog-cold",
        "read backlog-hot",
        "stop",
        "start",
        "read backlog-cold",
        "cleanup Backlog0",
    ]
    assert (row["hot_msgs_per_s"], row["cold_msgs_per_s"]) == (200_000, 40_000)
    assert row["fill_msgs_per_s"] == 50_000 and row["messages"] == 16 << 10
    assert row["hot_mb_per_s"] == round((16 << 20) / ((16 << 10) / 200_000) / 1e6, 1)
    assert row["evict"]["fadvise_dontneed_files"] == 1
    if not _on_tmpfs(str(tmp_path)):
        assert row["resident_at_cold_start"] <= 0.01 and row["resident_mb_at_cold_start"] < 0.1


def test_a_failed_cold_read_is_recorded_and_leaves_the_nodes_up(tmp_path):
    peer = FakeGrowing(str(tmp_path), fail_cold=True)
    row = growth.run_backlog(peer, (1 << 20,))["rows"][0]
    assert "read 3 of 16384" in row["error"] and "cold_msgs_per_s" not in row
    assert peer.up and peer.calls[-1] == "cleanup Backlog0"


# ---- configurations and selection ------------------------------------------------------
def test_rocketmq_shortest_timeouts_only_in_the_second_configuration():
    args = (10911, 10912, "127.0.0.1:9876", "127.0.0.1:9878", "/tmp/r")
    default = rocketmq_apache.broker_properties(0, *args)
    shortest = rocketmq_apache.broker_properties(0, *args, timeouts="shortest")
    for key in rocketmq_apache.SHORTEST_BROKER:
        assert key in shortest
    assert shortest["controllerHeartBeatTimeoutMills"] == "3000"
    assert "controllerHeartBeatTimeoutMills" not in default
    assert shortest["enableControllerMode"] == "true"  # the rest is the same cluster
    namesrv = rocketmq_apache.namesrv_properties(9876, 9878, "/tmp/r", "shortest")
    assert namesrv["scanNotActiveBrokerInterval"] == "1000"
    assert namesrv["scanInactiveMasterInterval"] == "1000"
    assert "scanNotActiveBrokerInterval" not in rocketmq_apache.namesrv_properties(
        9876, 9878, "/tmp/r"
    )
    proxy = rocketmq_apache.proxy_config("127.0.0.1:9876", 8081, 8080, "shortest")
    assert proxy["topicRouteServiceCacheRefreshSeconds"] == 1
    assert "topicRouteServiceCacheRefreshSeconds" not in rocketmq_apache.proxy_config(
        "127.0.0.1:9876", 8081, 8080
    )
    assert rocketmq_apache.RocketmqApacheShortTimeouts.timeouts == "shortest"


def test_only_selects_parts_and_systems():
    parts, chosen = select("")
    assert parts == PARTS and [p.name for p in chosen] == [p.name for p in PEERS]
    parts, chosen = select("failover")
    assert parts == ("failover",)
    assert [p.name for p in chosen] == [
        "ferrymq",
        "ferrymq-official",
        "kafka",
        "rocketmq",
        "rocketmq-shortest",
    ]
    parts, chosen = select("topics,backlog,kafka")
    assert parts == ("backlog", "topics") and [p.name for p in chosen] == ["kafka"]
    parts, chosen = select("nats")  # a system alone: every part it takes part in
    assert parts == PARTS and [p.name for p in chosen] == ["nats"]
    with pytest.raises(ValueError, match="neither a part"):
        select("failover,kafak")


# ---- the report ------------------------------------------------------------------------
def _result(**parts) -> dict:
    return {
        "peers": {},
        "machine": "test machine",
        "load_average_start": [0.1, 0.1, 0.1],
        "load_average_end": [0.2, 0.2, 0.2],
        "mode": "smoke",
        "seconds": 1.0,
        "started_at": "today",
        "drills": 2,
        **parts,
    }


FAILOVER = {
    "ferrymq": drills.summarize(
        drills.FailoverFigures(
            "ferrymq",
            "ferrymq SDK",
            "kill -9 of the master",
            [drills.Drill("n2 (master)", 1500.0, 0), drills.Drill("n3 (master)", 900.0, 2)],
        ),
        {1, 2, 3},
        {1, 2, 3},
    ).to_json(),
    "rocketmq": {"system": "rocketmq", "available": False, "error": "java not found on PATH"},
    "kafka": {"system": "kafka", "unavailable_ms_p50": 3000.0, "unavailable_ms_p99": 3000.0},
}
TOPICS = {
    "ferrymq": {"levels": [{"topics": 1, "created": 1, "create_s": 0.1, "msgs_per_s": 9000}]},
    "kafka": {
        "levels": [
            {"topics": 1, "created": 1, "create_s": 0.3, "msgs_per_s": 7000},
            {"topics": 10, "created": 9, "create_s": 1.2, "msgs_per_s": 5000},
        ],
        "error": "TimeoutError: leaders",
    },
}
BACKLOG = {
    "kafka": {
        "rows": [
            {
                "bytes": 16 << 20,
                "messages": 16384,
                "fill_msgs_per_s": 30000,
                "hot_msgs_per_s": 90000,
                "hot_mb_per_s": 92.2,
                "cold_msgs_per_s": 40000,
                "cold_mb_per_s": 41.0,
                "resident_at_cold_start": 0.002,
                "resident_mb_at_cold_start": 0.5,
                "evict": {"drop_caches": "not needed"},
            }
        ]
    }
}


def test_the_section_shows_failover_backlog_and_topics():
    text = report.anchors_section(
        _result(failover=FAILOVER, topics=TOPICS, backlog=BACKLOG),
        "python -m bench.peers --smoke",
        "peers-growth.png",
    )
    assert text.startswith(report.ANCHORS_SECTION + "\n")
    assert "| ferrymq | ferrymq SDK | 1,500 | 1,500 | 1,500 | 0 | 3 | **0** | 0 |" in text
    assert "- **rocketmq**: not measured — java not found on PATH" in text
    assert "n2 (master): 1,500 ms, n3 (master): 900 ms" in text
    assert "ferrymq takes writes again sooner): kafka 2.0 (p99 2.0)." in text
    assert report.failover_ratios(FAILOVER)["rocketmq"] == {"ratio_p50": None, "ratio_p99": None}
    assert "| 10 | — | 5,000 (1.2 s) |" in text
    assert "- **kafka** stopped: TimeoutError: leaders" in text
    assert "| kafka | 16 MiB | 30,000 | 90,000 | 92 | 40,000 | 41 | 0.5 (0.002) |" in text
    assert "![failover, topics and backlog side by side](peers-growth.png)" in text


def test_each_section_is_replaced_on_its_own(tmp_path):
    path = str(tmp_path / "RESULTS.md")
    with open(path, "w") as f:
        f.write(f"# R\n\n{report.SECTION}\n\nworkloads table\n\n## Later\n\nkept\n")
    result = _result(failover=FAILOVER)
    report.write_section(path, report.anchors_section(result, "cmd", None))
    report.write_section(path, report.anchors_section(result, "cmd again", None))
    with open(path) as f:
        text = f.read()
    assert text.count(report.ANCHORS_SECTION) == 1 and "cmd again" in text
    assert "workloads table" in text and "## Later\n\nkept" in text


def test_the_growth_chart_is_drawn_only_with_something_to_draw(tmp_path):
    path = str(tmp_path / "growth.png")
    assert report.growth_chart(_result(), path) is False and not os.path.exists(path)
    assert report.growth_chart(_result(failover=FAILOVER, topics=TOPICS, backlog=BACKLOG), path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert report.chart(_result(), str(tmp_path / "peers.png")) is False


# ---- bench.spark's Kafka source --------------------------------------------------------
def test_spark_fetches_its_kafka_source_at_pysparks_version_into_the_cache():
    from importlib.metadata import version

    from bench import spark

    assert spark.kafka_package() == (
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version('pyspark')}"
    )
    tried = spark.kafka_packages()
    assert tried[0] == spark.kafka_package()  # the matching version first
    assert tried[-1].endswith(f":{spark.KAFKA_SOURCE_FALLBACKS[-1]}") and len(set(tried)) == len(
        tried
    )
    config = spark.session_config(spark.kafka_package(), "/cache")
    assert config["spark.jars.packages"] == spark.kafka_package()
    assert config["spark.jars.ivy"] == "/cache/ivy"
    assert "spark.jars.packages" not in spark.session_config("", "/cache")


def test_spark_without_java_for_the_kafka_peer_says_so_in_one_line(tmp_path, monkeypatch):
    from bench import spark

    monkeypatch.setenv("PATH", str(tmp_path))
    found = spark.kafka_read(None, 10, runs=1)
    assert "java not found" in found["kafka_unavailable"]
    assert "\n" not in found["kafka_unavailable"]
