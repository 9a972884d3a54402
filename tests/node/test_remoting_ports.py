"""Where the remoting port is: a node's default, the command-line override, and a local
cluster whose first node answers RocketMQ's usual namesrvAddr, 127.0.0.1:9876."""

from __future__ import annotations

from dataclasses import replace

from ferrymq.launcher.cluster import node_toml, plan_cluster
from node.config import load_node_config, parse_node_config


def test_a_nodes_default_ports_leave_9876_to_the_remoting_port_of_a_local_cluster():
    ports = parse_node_config("").ports
    assert (ports.grpc, ports.remoting, ports.replication, ports.raft) == (8081, 10911, 10912, 8876)
    assert parse_node_config("[ports]\nremoting = 0\n").ports.remoting == 0
    assert load_node_config(None, remoting_port=0).ports.remoting == 0


def test_make_ups_first_node_is_the_name_server_4x_clients_look_for(tmp_path):
    plan = plan_cluster(str(tmp_path), 3)
    assert [n.remoting for n in plan.nodes] == [f"127.0.0.1:{9876 + i}" for i in range(3)]
    assert [n.raft for n in plan.nodes] == [f"127.0.0.1:{8876 + i}" for i in range(3)]
    assert plan.namesrv_addr == "127.0.0.1:9876;127.0.0.1:9877;127.0.0.1:9878"
    config = parse_node_config(node_toml(plan, plan.nodes[0]))
    assert config.ports.remoting == 9876 and config.ports.raft == 8876
    # A cluster.json written before the remoting port: its nodes take any free port.
    older = replace(plan.nodes[1], remoting="")
    assert parse_node_config(node_toml(plan, older)).ports.remoting == 0
