"""Options from ``FERRYMQ_<SECTION>__<OPTION>`` environment variables (node/config.py): how a
container image's one ``node.toml`` becomes each node's configuration."""

from __future__ import annotations

import re

import pytest

from ha.options import ReplicationMode
from node.config import ConfigError, load_node_config, parse_node_config
from store.config import FlushMode

FILE = """
[node]
id = "node-1"
host = "127.0.0.1"

[ports]
grpc = 8081

[cluster]
voters = ["127.0.0.1:8876"]
secret = "from-the-file-secret"
"""


def test_the_environment_wins_over_the_file_and_keeps_each_option_type():
    config = parse_node_config(
        FILE,
        {
            "FERRYMQ_NODE__ID": "node-2",
            "FERRYMQ_NODE__GROUP": "group-2",
            "FERRYMQ_PORTS__GRPC": "18082",
            "FERRYMQ_CLUSTER__SECRET": "1234567890",  # a string option: digits stay text
            "FERRYMQ_CLUSTER__VOTERS": '["127.0.0.1:8876", "127.0.0.2:8876", "127.0.0.3:8876"]',
            "FERRYMQ_REPLICATION__MODE": "ASYNC",
            "FERRYMQ_STORE__FLUSH_MODE": "SYNC_FLUSH",
            "FERRYMQ_MESSAGES__AUTO_CREATE_GROUPS": "false",
            "FERRYMQ_STORE__DISK_HIGH_WATER_RATIO": "0.9",
            "FERRYMQ_ACCESS_KEY": "the CLI's, not an option",
            "HOME": "/root",
        },
    )
    assert (config.id, config.group, config.host) == ("node-2", "group-2", "127.0.0.1")
    assert config.ports.grpc == 18082 and config.ports.raft == 8876
    assert config.cluster.secret == "1234567890"
    assert len(config.cluster.voters) == 3 and config.is_voter
    assert config.replication.mode is ReplicationMode.ASYNC
    assert config.store_config().flush_mode is FlushMode.SYNC_FLUSH
    assert config.store_config().disk_high_water_ratio == 0.9
    assert config.messages.auto_create_groups is False


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("FERRYMQ_NODES__ID", "node-2", "no section [nodes]"),
        ("FERRYMQ_PORTS__GPRC", "1", "no option 'gprc' in [ports]"),
        ("FERRYMQ_PORTS__GRPC", "eighty", "ports.grpc must be an integer"),
        ("FERRYMQ_CLUSTER__VOTERS", '["a:1",', "FERRYMQ_CLUSTER__VOTERS is not a TOML value"),
        ("FERRYMQ_STORE__FLUSH_MODE", "SOMETIMES", "store.flush_mode must be"),
    ],
)
def test_a_wrong_variable_is_an_error_that_names_it(variable, value, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        parse_node_config(FILE, {variable: value})


def test_load_reads_the_process_environment_and_the_command_line_wins(tmp_path, monkeypatch):
    path = tmp_path / "node.toml"
    path.write_text(FILE)
    monkeypatch.setenv("FERRYMQ_NODE__ID", "node-3")
    monkeypatch.setenv("FERRYMQ_PORTS__GRPC", "18083")
    config = load_node_config(str(path), grpc_port=18084)
    assert (config.id, config.ports.grpc) == ("node-3", 18084)
    assert load_node_config(str(path), environment={}).id == "node-1"
