"""The endpoints routes give a broker group (``node/route_endpoints.py``), and the same
routing state seen through the remoting NameServer role (``node/remoting/name_server.py``):
both name the same master first, so a 5.x and a 4.x client of one cluster write to the
same node, and a direct route costs no hop."""

from __future__ import annotations

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.grpc.route_endpoints import group_endpoints, one_address, takes_one_address
from node.remoting.name_server import broker_addresses
from routing.metadata import BrokerGroup, Member
from routing.state import RoutingState


def state_of(master: str | None, alive: dict[str, bool], host: str = "127.0.0.1") -> RoutingState:
    state = RoutingState()
    for number, node_id in enumerate(sorted(alive), start=1):
        state.members[node_id] = Member(
            node_id,
            "g",
            f"{host}:{8080 + number}",
            "",
            "",
            alive=alive[node_id],
            remoting_address=f"{host}:{9870 + number}",
        )
    in_sync = frozenset(n for n, up in alive.items() if up)
    state.broker_groups["g"] = BrokerGroup("g", master, 3, in_sync)
    return state


def addresses(endpoints: pb.Endpoints) -> list[str]:
    return [f"{a.host}:{a.port}" for a in endpoints.addresses]


def test_the_master_comes_first_then_live_nodes_then_the_rest():
    state = state_of("n2", {"n1": False, "n2": True, "n3": True})
    endpoints = group_endpoints(state, "g")
    assert endpoints.scheme == pb.IPv4
    assert addresses(endpoints) == ["127.0.0.1:8082", "127.0.0.1:8083", "127.0.0.1:8081"]


def test_a_group_between_masters_keeps_every_node_in_its_routes():
    endpoints = group_endpoints(state_of(None, {"n1": True, "n2": True}), "g")
    assert addresses(endpoints) == ["127.0.0.1:8081", "127.0.0.1:8082"]


def test_host_names_give_the_master_alone_since_clients_take_one_such_address():
    state = state_of("n3", {"n1": True, "n2": True, "n3": True}, host="broker.example")
    endpoints = group_endpoints(state, "g")
    assert endpoints.scheme == pb.DOMAIN_NAME
    assert addresses(endpoints) == ["broker.example:8083"]


def test_grpc_routes_and_remoting_routes_name_the_same_master_and_live_slaves():
    for master in ("n1", "n2", "n3"):
        state = state_of(master, {"n1": True, "n2": True, "n3": False})
        grpc_nodes = [
            node_id
            for address in addresses(group_endpoints(state, "g"))
            for node_id, member in state.members.items()
            if member.grpc_address == address
        ]
        remoting = broker_addresses(state, "g")
        remoting_nodes = {
            broker_id: node_id
            for broker_id, address in remoting.items()
            for node_id, member in state.members.items()
            if member.remoting_address == address
        }
        assert grpc_nodes[0] == remoting_nodes["0"] == master
        live_slaves = {n for n in ("n1", "n2") if n != master}
        assert set(remoting_nodes.values()) - {master} == live_slaves
        assert set(grpc_nodes[1 : 1 + len(live_slaves)]) == live_slaves


def test_a_client_that_takes_one_address_gets_the_node_it_asked():
    """rocketmq-client-nodejs 1.0.x (``x-mq-language: HTTP``) resolves several addresses as
    one DNS name: it gets the answering node of the group (which forwards to the master),
    the master of a group that node is not in."""
    state = state_of("n2", {"n1": True, "n2": True, "n3": True})
    state.members["other"] = Member("other", "h", "127.0.0.1:7001", "", "", alive=True)
    state.broker_groups["h"] = BrokerGroup("h", "other", 1, frozenset({"other"}))
    assert takes_one_address("HTTP") and not takes_one_address("JAVA")
    for asked in ("n1", "n2", "n3"):
        endpoints = one_address(state, "g", asked)
        assert endpoints.scheme == pb.IPv4
        assert addresses(endpoints) == [state.members[asked].grpc_address]
    assert addresses(one_address(state, "h", "n1")) == ["127.0.0.1:7001"]
    assert one_address(state, "missing", "n1") is None
