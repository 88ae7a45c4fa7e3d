"""Link proxies put between the brokers and the controllers of a real local cluster: the brokers come back
registered at their ingress proxies, every link carries traffic, and cutting a broker off from the controllers
gets it fenced (Metadata stops listing it) until the link heals.

One real cluster (2 brokers, 1 controller, the fast timings of ``tests.support.live_cluster``: a 2.5 s session).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.links import Links, insert_link_proxies, registered_ports
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.local.settings_files import read_toml
from orchestrator.local.state import LocalClusterState
from tests.support.live_cluster import LiveCluster, run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONTROLLER = lc.CONTROLLER_ID_BASE


@pytest.fixture
def linked(tmp_path) -> Iterator[tuple[LiveCluster, Links]]:  # type: ignore[no-untyped-def]
    cluster = LiveCluster(tmp_path / "cluster", brokers=2, controllers=1)
    links: Links | None = None
    try:
        links = insert_link_proxies(cluster.dir)
        yield cluster, links
    finally:
        cluster.close()  # the cluster first: without the proxies its brokers could not reach the controller
        if links is not None:
            links.close()


def test_brokers_register_behind_their_ingress_proxies_and_every_link_relays(linked):
    cluster, links = linked
    assert set(links.to_broker) == {1, 2} and set(links.to_controller) == {(1, CONTROLLER), (2, CONTROLLER)}
    state = LocalClusterState.load(cluster.dir)
    assert registered_ports(state) == {1: links.to_broker[1].port, 2: links.to_broker[2].port}
    for b in (1, 2):  # the settings files name the proxies, for every later restart too
        config = read_toml(Path(str(state.find("broker", b).config)))
        assert config["broker"]["controllers"] == f"{CONTROLLER}@127.0.0.1:{links.to_controller[(b, CONTROLLER)].port}"
        assert config["broker"]["advertised_port"] == links.to_broker[b].port

    heartbeats = links.to_controller[(1, CONTROLLER)].bytes_relayed
    wait_until("heartbeats through the link", lambda: links.to_controller[(1, CONTROLLER)].bytes_relayed > heartbeats)

    async def through_broker_1() -> int:
        async with TieredClient(f"127.0.0.1:{links.to_broker[1].port}", timeout_s=10) as c:
            return len((await c.metadata())["brokers"])

    before = links.to_broker[1].bytes_relayed
    assert run(through_broker_1()) == 3  # two brokers and the controller
    assert links.to_broker[1].bytes_relayed > before
    assert all(link.connections >= 1 for link in links.to_controller.values())


def test_a_broker_cut_off_from_the_controllers_is_fenced_and_comes_back_when_the_link_heals(linked):
    cluster, links = linked
    state = LocalClusterState.load(cluster.dir)
    ingress = {b: links.to_broker[b].port for b in (1, 2)}
    links.to_controller[(1, CONTROLLER)].set_mode("drop")
    wait_until("broker 1 fenced", lambda: registered_ports(state) == {2: ingress[2]}, timeout_s=20, interval_s=0.3)
    assert links.to_controller[(1, CONTROLLER)].bytes_dropped > 0

    links.to_controller[(1, CONTROLLER)].set_mode("pass")
    wait_until("broker 1 back", lambda: registered_ports(state) == ingress, timeout_s=20, interval_s=0.3)


def test_a_broker_whose_port_is_taken_while_it_restarts_behind_its_proxy_is_followed_by_the_proxy(
    tmp_path, monkeypatch
):
    # the port a broker stopped on may be taken before it binds again (another program, another test): it comes
    # back on another port, and the proxy in front of it must send clients there, not to the old one
    cluster = LiveCluster(tmp_path / "cluster", brokers=2, controllers=1)
    taken: list[socket.socket] = []
    stop = lc.stop_process

    def stop_and_take(p, **kwargs):  # type: ignore[no-untyped-def]
        stop(p, **kwargs)
        if p.id == 1:
            taken.append(socket.create_server(("127.0.0.1", p.port)))

    monkeypatch.setattr(lc, "stop_process", stop_and_take)
    links: Links | None = None
    try:
        old_port = LocalClusterState.load(cluster.dir).find("broker", 1).port
        links = insert_link_proxies(cluster.dir)
        assert taken and links.to_broker[1].target[1] != old_port

        async def through_broker_1() -> int:
            async with TieredClient(f"127.0.0.1:{links.to_broker[1].port}", timeout_s=10) as c:
                return len((await c.metadata())["brokers"])

        assert run(through_broker_1()) == 3
    finally:
        cluster.close()
        if links is not None:
            links.close()
        for s in taken:
            s.close()
