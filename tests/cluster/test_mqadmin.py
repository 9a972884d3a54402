"""RocketMQ's own ``mqadmin`` (rocketmq-tools 5.3.3) against a 3-node cluster, every
node's remoting address in its ``-n``: topics and groups it creates and deletes are the
Admin service's (the routing state every node serves), and it finds messages by key and
by id (the 4.x offset id, which names the remoting address of the node that stored it,
and the unique id). One JVM runs every command."""

from __future__ import annotations

import json
import re

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.cluster import cluster_up
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.cluster import SMALL_STORE, master_of, stop_all, topics_on
from tests.support.remoting_client import RemotingClient, pull_fields, send_v2

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)
CLIENT_ID = "127.0.0.1@mqadmin-test"
HEARTBEAT = json.dumps(
    {
        "clientID": CLIENT_ID,
        "consumerDataSet": [
            {
                "groupName": "readers",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{"topic": "found", "subString": "shared || sdk"}],
            }
        ],
        "producerDataSet": [{"groupName": "writers"}],
    }
).encode()


@pytest.fixture
def three(tmp_path):
    plan = cluster_up(str(tmp_path / "cluster"), nodes=3, auto_ports=True, settings=SMALL_STORE)
    yield plan
    stop_all(plan)


def test_mqadmin_manages_topics_and_groups_and_finds_messages(three, tmp_path):
    mqadmin = clients.required("mqadmin")
    plan = three
    master = master_of(plan)
    with Admin(master.grpc) as admin:
        admin.create_topic("found", queue_count=2)
        admin.create_group("readers")
    until(lambda: all("found" in topics_on(n) for n in plan.nodes), 20, "the topic everywhere")
    with Producer(master.grpc) as producer:
        by_sdk = producer.send(Message("found", b"sdk", keys=["shared", "sdk-key"]))
    with RemotingClient(master.remoting) as client:
        sent = send_v2(client, "found", b"remoting", 1, UNIQ_KEY="U-REM", KEYS="shared")
        committed = client.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "readers", "topic": "found", "queueId": "1", "commitOffset": "1"},
        )
        assert committed.code == ResponseCode.SUCCESS, committed
    offset_id = sent.ext_fields["msgId"]
    # A 4.x client of group "readers" (and producer group "writers") connected to the
    # master while mqadmin runs: what consumerConnection and producerConnection list.
    connected = RemotingClient(master.remoting)
    beat = connected.call(RequestCode.HEART_BEAT, body=HEARTBEAT)
    assert beat.code == ResponseCode.SUCCESS, beat
    client_address = "{}:{}".format(*connected.socket.getsockname()[:2])
    commands = [
        ["updateTopic", "-c", "DefaultCluster", "-t", "made", "-r", "3", "-w", "3"],
        ["topicRoute", "-t", "made"],
        ["topicList"],
        ["clusterList"],
        ["brokerStatus", "-c", "DefaultCluster"],
        ["updateSubGroup", "-c", "DefaultCluster", "-g", "made-group", "-r", "4"],
        ["updateSubGroup", "-c", "DefaultCluster", "-g", "made-group", "-r", "1"],  # in place
        ["queryMsgByKey", "-t", "found", "-k", "shared"],
        ["queryMsgById", "-t", "found", "-i", offset_id],
        ["queryMsgById", "-t", "found", "-i", by_sdk.message_id],
        ["consumerProgress", "-g", "readers"],
        ["deleteTopic", "-c", "DefaultCluster", "-t", "made"],
        ["topicList"],
        ["topicStatus", "-t", "found"],
        ["consumerConnection", "-g", "readers"],
        ["producerConnection", "-g", "writers", "-t", "found"],
        ["getBrokerConfig", "-b", master.remoting],
        ["consumerConnection", "-g", "made-group"],  # nobody connected: refused
    ]
    namesrv = ";".join(node.remoting for node in plan.nodes)
    try:
        run = clients.run(mqadmin, {"namesrv": namesrv, "commands": commands}, tmp_path / "mq", 240)
    finally:
        connected.close()
    outputs = [e for e in run.of("command")]
    assert len(outputs) == len(commands), run.explain()
    failed = [(e["argv"][0], e["output"][-4000:]) for e in outputs[:-1] if e["error"]]
    # As text: pytest shortens a long list's repr, and with it the stack trace.
    assert not failed, "\n\n".join(f"{command}:\n{output}" for command, output in failed)
    (update, route, listed, cluster, status, group, regroup, by_key, by_offset_id,
     by_unique_id, progress, delete, listed_after, topic_status, consumers, producers,
     broker_config, offline) = [e["output"] for e in outputs]  # fmt: skip
    assert f"create topic to {master.remoting} success" in update
    assert '"readQueueNums":3' in route and master.remoting in route
    assert "made" in listed.split() and "found" in listed.split()
    # clusterList: one broker group, its master (BID 0) and both slaves, all active.
    rows = [line.split() for line in cluster.splitlines()[1:] if line.strip()]
    assert sorted((row[2], row[3]) for row in rows) == sorted(
        [("0", master.remoting)]
        + [(str(i), n.remoting) for i, n in enumerate(sorted(
            (n for n in plan.nodes if n.id != master.id), key=lambda n: n.id), start=1)]
    )  # fmt: skip
    assert all(row[-1] == "true" for row in rows)
    assert "brokerRole                      : SYNC_MASTER" in status
    assert f"create subscription group to {master.remoting} success" in group
    assert f"create subscription group to {master.remoting} success" in regroup
    with Admin(master.grpc) as admin:
        made_group = next(g for g in admin.list_groups() if g.name == "made-group")
    # Created with retryMaxTimes 4 (5 attempts, then the DLQ), then updated in place to 1.
    assert made_group.max_delivery_attempts == 2
    found = {line.split()[0] for line in by_key.splitlines()[1:] if line.strip()}
    assert found == {"U-REM", by_sdk.message_id}, by_key
    # (mqadmin writes a body to a file of its own and prints the rest.)
    assert f"OffsetID:            {offset_id}" in by_offset_id
    assert "Topic:               found" in by_offset_id and "UNIQ_KEY=U-REM" in by_offset_id
    assert f"UNIQ_KEY={by_sdk.message_id}" in by_unique_id
    assert "KEYS=shared sdk-key" in by_unique_id
    # consumerProgress: each queue of the group's topic, its broker and committed offsets.
    progress_rows = {
        tuple(line.split()[:5]) for line in progress.splitlines() if line.startswith("found ")
    }
    assert progress_rows == {
        ("found", master.group, "0", "1", "0"),
        ("found", master.group, "1", "1", "1"),
    }, progress
    assert "Consume Diff Total: 1" in progress and "Consume Inflight Total: 0" in progress
    assert "delete topic [made] from cluster [DefaultCluster] success" in delete
    assert "made" not in listed_after.split()
    until(lambda: all("made" not in topics_on(n) for n in plan.nodes), 20, "made deleted")
    # topicStatus: each queue of the topic, its min and max offset, from the master.
    # (The SDK's message went to either queue, the remoting one to queue 1.)
    status_rows = [
        line.split()[:4] for line in topic_status.splitlines() if line.startswith(master.group)
    ]
    assert sorted(row[1] for row in status_rows) == ["0", "1"], topic_status
    assert all(row[2] == "0" for row in status_rows), topic_status
    assert sum(int(row[3]) for row in status_rows) == 2, topic_status
    # consumerConnection: the heartbeat's client, its address, language, version, settings.
    assert f"{CLIENT_ID}" in consumers and client_address in consumers, consumers
    assert "JAVA" in consumers and "V4_9_7" in consumers
    assert "ConsumeType: CONSUME_PASSIVELY" in consumers
    assert "MessageModel: CLUSTERING" in consumers
    assert "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET" in consumers
    assert "found" in consumers and "shared || sdk" in consumers
    assert CLIENT_ID in producers and client_address in producers, producers
    # getBrokerConfig: the node's settings under RocketMQ's names.
    settings = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in broker_config.splitlines())
        if value
    )
    assert settings["brokerName"] == master.group, broker_config
    assert settings["brokerId"] == "0" and settings["brokerRole"] == "SYNC_MASTER"
    assert settings["listenPort"] == master.remoting.rpartition(":")[2]
    assert outputs[-1]["error"] and "206" in offline, offline  # CONSUMER_NOT_ONLINE


@pytest.mark.parametrize("tools", clients.MQADMIN_FAMILIES, ids=["tools-5.3.3", "tools-4.9.8"])
def test_status_commands_print_figures_with_the_4_9_and_5_tools(three, tmp_path, tools):
    """clusterList (base and -m), brokerStatus, topicStatus and consumerProgress: every
    node's row with figures, no ``null`` and no exception (4.9's clusterList threw a
    NullPointerException on the missing ``putTps``)."""
    mqadmin = clients.required(tools)
    plan = three
    master = master_of(plan)
    with Admin(master.grpc) as admin:
        admin.create_topic("figures", queue_count=1)
        admin.create_group("counters")
    with Producer(master.grpc) as producer:
        for n in range(20):
            producer.send(Message("figures", b"%d" % n))
    with RemotingClient(master.remoting) as client:
        committed = client.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "counters", "topic": "figures", "queueId": "0", "commitOffset": "5"},
        )
        assert committed.code == ResponseCode.SUCCESS, committed
        pulled = client.call(RequestCode.PULL_MESSAGE, pull_fields("counters", "figures"))
        assert pulled.code == ResponseCode.SUCCESS, pulled  # 20 delivered, none committed
    commands = [
        ["clusterList"],
        ["clusterList", "-m"],
        ["brokerStatus", "-c", "DefaultCluster"],
        ["topicStatus", "-t", "figures"],
        ["consumerProgress", "-g", "counters"],
    ]
    namesrv = ";".join(node.remoting for node in plan.nodes)
    run = clients.run(mqadmin, {"namesrv": namesrv, "commands": commands}, tmp_path / "mq", 240)
    outputs = run.of("command")
    assert len(outputs) == len(commands), run.explain()
    for command, event in zip(commands, outputs, strict=True):
        assert not event["error"], (command, event["output"][-1500:])
        assert "null" not in event["output"], (command, event["output"][-1500:])
    cluster, more, status, topic_status, progress = (e["output"] for e in outputs)
    lines = [line for line in cluster.splitlines()[1:] if line.strip()]
    assert len(lines) == 3, cluster
    # The version, "<in tps>(<send queue>,<head wait>ms)" and the same out (5.x adds
    # " | <ack queue>,<head wait>ms").
    figures = r"V4_9_7\s+\d+\.\d\d\(\d+,\d+ms\)\s+\d+\.\d\d\(\d+,\d+ms( ?\| ?\d+,\d+ms)?\)"
    assert all(re.search(figures, line) for line in lines), cluster
    rows = [line.split() for line in lines]
    master_row = next(row for row in rows if row[3] == master.remoting)
    assert float(master_row[5].split("(")[0]) > 0  # 20 sends within the last 10 s
    # -m: each node's puts today (#InTotalToday): the master stored the 20 sends.
    in_today = [int(line.split()[4]) for line in more.splitlines()[1:] if line.strip()]
    assert len(in_today) == 3 and max(in_today) == 20, more
    assert status.count("putTps") == 3 and "msgPutTotalTodayNow" in status, status
    queue_row = next(line.split() for line in topic_status.splitlines() if line.startswith("group"))
    assert queue_row[:4] == [master.group, "0", "0", "20"], topic_status
    assert "Diff Total: 15" in progress, progress  # 5.x: "Consume Diff Total"
    # The group's rate of the last minute: 20 delivered. (5.3.3's topicStatus prints a
    # "Topic Put TPS" it never reads from the brokers: 0.0 against any broker.)
    assert float(re.search(r"Consume TPS: ([\d.]+)", progress).group(1)) > 0, progress
