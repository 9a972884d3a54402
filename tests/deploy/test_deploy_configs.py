"""The example cluster configurations in ``deploy/`` are valid node configurations that
describe the layouts they claim (and refuse to run with their placeholder secret)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from node.config import ConfigError, parse_node_config
from tests.support import ROOT

DEPLOY = Path(ROOT) / "deploy"


def layout(name: str):
    configs = []
    for path in sorted((DEPLOY / name).glob("node-*.toml")):
        text = path.read_text().replace("CHANGE-ME-to-the-cluster-secret", "s3cret-for-tests")
        text = text.replace("CHANGE-ME-to-the-admin-secret-key", "admin-s3cret-for-tests")
        text = text.replace("CHANGE-ME-to-the-metrics-token", "metrics-token-for-tests")
        configs.append(parse_node_config(text))
    return configs


@pytest.mark.parametrize(("name", "nodes", "groups"), [("cluster-3", 3, 1), ("cluster-6", 6, 2)])
def test_example_layouts_parse_and_agree(name, nodes, groups):
    configs = layout(name)
    assert len(configs) == nodes
    assert len({c.id for c in configs}) == nodes and len({c.host for c in configs}) == nodes
    assert len({c.group for c in configs}) == groups
    voters = {c.cluster.voters for c in configs}
    assert len(voters) == 1  # every node names the same voters
    (voter_list,) = voters
    assert len(voter_list) == 3 and sum(c.is_voter for c in configs) == 3
    # Voters spread over the broker groups.
    assert len({c.group for c in configs if c.is_voter}) == groups
    # The production layouts run with authentication and TLS (docs/security.md).
    assert all(c.security.auth and c.security.tls and c.security.admin_access_key for c in configs)
    # Prometheus scrapes from another machine, with the token (docs/security.md).
    assert all(c.metrics.host == c.host and c.metrics.bearer_token for c in configs)


def test_the_placeholder_admin_secret_is_refused():
    text = (DEPLOY / "cluster-3" / "node-1.toml").read_text()
    text = text.replace("CHANGE-ME-to-the-cluster-secret", "s3cret-for-tests")
    text = text.replace("CHANGE-ME-to-the-metrics-token", "metrics-token-for-tests")
    with pytest.raises(ConfigError, match="admin_secret_key is still the placeholder"):
        parse_node_config(text)


def test_the_placeholder_metrics_token_is_refused():
    text = (DEPLOY / "cluster-3" / "node-1.toml").read_text()
    text = text.replace("CHANGE-ME-to-the-cluster-secret", "s3cret-for-tests")
    text = text.replace("CHANGE-ME-to-the-admin-secret-key", "admin-s3cret-for-tests")
    with pytest.raises(ConfigError, match=r"metrics\.bearer_token is still the placeholder"):
        parse_node_config(text)


def test_the_placeholder_secret_is_refused():
    text = (DEPLOY / "cluster-3" / "node-1.toml").read_text()
    with pytest.raises(ConfigError, match="placeholder"):
        parse_node_config(text)


def test_voters_must_be_odd_and_have_a_secret():
    base = parse_node_config("")
    assert dataclasses.replace(base).cluster.standalone
    with pytest.raises(ConfigError, match="odd"):
        parse_node_config('[cluster]\nvoters = ["a:1", "b:2"]\nsecret = "long-enough"\n')
    with pytest.raises(ConfigError, match="secret"):
        parse_node_config('[cluster]\nvoters = ["a:1"]\n')
    with pytest.raises(ConfigError, match="host:port"):
        parse_node_config('[cluster]\nvoters = ["nowhere"]\nsecret = "long-enough"\n')
