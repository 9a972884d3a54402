"""A node with auth on, as the security tests configure it: its cluster secret, the
bootstrap admin (``root``), an application user's keys, and signed call metadata."""

from __future__ import annotations

from ferrymq.client import ClientSecurity
from node.authentication import signature_headers

CLUSTER_SECRET = "security-test-cluster-secret"
ROOT = ClientSecurity("root", "root-secret-key")
APP = ClientSecurity("app", "app-secret-key")
AUTH_TOML = f"""
[cluster]
secret = "{CLUSTER_SECRET}"
[security]
auth = true
clock_skew_s = 120
admin_access_key = "root"
admin_secret_key = "root-secret-key"
"""


def signed(security: ClientSecurity, client_id: str) -> tuple[tuple[str, str], ...]:
    """The metadata of a call signed with ``security``'s keys, naming ``client_id``."""
    headers = signature_headers(security.access_key, security.secret_key)
    return (*headers, ("x-mq-client-id", client_id))


def grant_app(address: str, topics: list[str], groups: list[str], rules: list) -> None:
    """On an auth-on node: create ``topics`` (one queue each) and ``groups``, the user
    ``APP``, and grant it ``rules`` (``AclRule``s)."""
    from ferrymq.client import Admin

    with Admin(address, security=ROOT) as admin:
        for topic in topics:
            admin.create_topic(topic, 1)
        for group in groups:
            admin.create_group(group)
        admin.create_user(APP.access_key, APP.secret_key)
        for rule in rules:
            admin.grant(APP.access_key, rule)
