"""The interface NCCL and Gloo talk through on a node of a multi-node job: the one that routes to the
rendezvous address, read from this host's own routing (its loopback, its docker bridge, its main
network), with ``ip route get`` as the oracle; the user's own choice stands."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

import pytest

from conftest import require_service
from madengine.catalog.schema import model_from_entry
from madengine.context.context import Context
from madengine.execution.plan import model_env, plan_launch
from madengine.launch import SOCKET_IFNAME_VARS, rendezvous_interface
from madengine.launch import network
from madengine.launch.network import interface_of, route_interface, source_address


def _ip_route_get(address: str) -> str:
    """The interface ``ip route get`` names for ``address`` (iproute2, the oracle)."""
    words = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True, check=True,
                           timeout=10).stdout.split()
    return words[words.index("dev") + 1]


def _ipv4_networks() -> list[tuple[str, ipaddress.IPv4Interface]]:
    """(interface, address/prefix) of this host's IPv4 addresses, from iproute2."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True,
                         timeout=10).stdout
    return [(line.split()[1], ipaddress.IPv4Interface(line.split()[3])) for line in out.splitlines()]


@pytest.fixture(scope="module")
def networks():
    require_service("iproute2 (the oracle of the routing tests)", shutil.which("ip") is not None,
                    "apt-get install iproute2")
    return _ipv4_networks()


def test_loopback_and_this_hosts_own_addresses(networks):
    assert route_interface("127.0.0.1") == "lo" == route_interface("localhost")
    for name, net in networks:
        # the rendezvous node itself: the interface that holds its address, which the other nodes reach
        # (not 'lo', where the kernel's local table sends a packet to itself, as 'ip route get' says)
        assert interface_of(str(net.ip)) == route_interface(str(net.ip)) == name


def test_another_host_on_each_network_is_reached_through_that_networks_interface(networks):
    others = [(name, net) for name, net in networks if name != "lo" and net.network.num_addresses > 2]
    assert others, f"this host has no network beside its loopback: {networks}"
    for name, net in others:  # a neighbour on each network (docker0, eth0, ...), not this host itself
        neighbour = next(str(a) for a in net.network.hosts() if a != net.ip)
        assert route_interface(neighbour) == _ip_route_get(neighbour) == name


def test_an_address_beyond_every_network_takes_the_default_route(networks):
    far = "198.51.100.7"  # TEST-NET-2: on no network of a test host; the default route, when there is one
    oracle = subprocess.run(["ip", "route", "get", far], capture_output=True, text=True, timeout=10)
    expected = oracle.stdout.split()[oracle.stdout.split().index("dev") + 1] if oracle.returncode == 0 else None
    assert route_interface(far) == expected


def test_what_cannot_be_told_is_none():
    assert source_address("no-such-host.invalid") is None
    assert route_interface("no-such-host.invalid") is None
    assert interface_of("not an address") is None
    assert interface_of("203.0.113.250") is None  # TEST-NET-3: no interface of a test host holds it


def test_the_users_choice_stands_whole():
    assert rendezvous_interface("127.0.0.1") == "lo"
    assert rendezvous_interface("127.0.0.1", {"NCCL_SOCKET_IFNAME": "ib0"}) == ""
    assert rendezvous_interface("127.0.0.1", {}, {"GLOO_SOCKET_IFNAME": "eth9"}) == ""
    assert rendezvous_interface("127.0.0.1", {"NCCL_SOCKET_IFNAME": ""}) == "lo"  # set but empty: not a choice
    assert rendezvous_interface("no-such-host.invalid") == ""


def test_a_name_only_this_host_maps_to_its_loopback_is_left_to_nccl(monkeypatch):
    """Debian writes '127.0.1.1 <hostname>' into /etc/hosts: on the rendezvous node its own name is
    loopback, while the other nodes reach it on a real network; 'lo' there would strand them."""
    resolve = network.source_address
    monkeypatch.setattr(network, "source_address",  # what such a resolver answers for this node's own name
                        lambda address: "127.0.0.1" if address == "node0" else resolve(address))
    assert rendezvous_interface("node0") == ""
    assert rendezvous_interface("localhost") == rendezvous_interface("127.0.0.1") == "lo"


# -- a node of a multi-node job ------------------------------------------------------------------
MODEL = model_from_entry({"name": "ddp", "dockerfile": "docker/none", "scripts": "run.sh", "n_gpus": "0",
                          "distributed": {"launcher": "torchrun", "nnodes": 2}}, source="models.json")
NODE = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
        "MAD_NODE_HOSTS": "127.0.0.1,127.0.0.1"}


def _env(environ: dict[str, str], context: Context) -> dict[str, str]:
    launch = plan_launch(MODEL, context, [], "/myworkspace", environ)
    return model_env(MODEL, context, [], "run", "local", environ, launch)


def test_a_node_talks_through_the_interface_to_its_rendezvous():
    env = _env(NODE, Context({}))
    assert [env[name] for name in SOCKET_IFNAME_VARS] == [route_interface("127.0.0.1")] * 2 == ["lo", "lo"]


def test_a_node_keeps_the_interface_the_user_chose():
    env = _env({**NODE, "NCCL_SOCKET_IFNAME": "ib0"}, Context({}))
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and "GLOO_SOCKET_IFNAME" not in env
    env = _env(NODE, Context({"docker_env_vars": {"GLOO_SOCKET_IFNAME": "eth7"}}))
    assert env["GLOO_SOCKET_IFNAME"] == "eth7" and "NCCL_SOCKET_IFNAME" not in env


def test_a_one_node_job_leaves_the_interface_to_nccl_and_gloo():
    model = model_from_entry({"name": "one", "dockerfile": "docker/none", "scripts": "run.sh", "n_gpus": "0",
                              "distributed": {"launcher": "torchrun"}}, source="models.json")
    launch = plan_launch(model, Context({}), [], "/myworkspace", {})
    assert not set(SOCKET_IFNAME_VARS) & set(launch.env)

