"""Fixtures the official-client tests share: the module's node (``module_node``, from
tests/conftest.py; a module that needs another configuration overrides it), a home for
the client's files, and gRPC stubs to that node for the test's own setup and checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.rpc import stubs


@pytest.fixture(scope="module")
def client_home(tmp_path_factory):
    """Where the client process keeps its files and logs, one per module."""
    return tmp_path_factory.mktemp("client-home")


@pytest.fixture
def grpc_stubs(module_node) -> Iterator[tuple]:
    """(MessagingService stub, Admin stub) to ``module_node``."""
    channel, messaging, admin = stubs(module_node.address)
    yield messaging, admin
    channel.close()
