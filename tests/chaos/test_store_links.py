"""Link proxies put between each process of a real local cluster and its PostgreSQL store: every process comes back
behind its own proxy and reaches the store through it, and cutting the active controller's link alone hands the
lease to the other controller, which serves writes while the first still runs; once the link heals, the first
stays a standby and nothing written meanwhile is lost. A controller started while its link resets every connection
waits for the store (``[store] startup_timeout_ms``) instead of exiting, and starts once the link heals.

One real cluster on the suite's PostgreSQL server (1 broker, 2 controllers, the fast timings of
``tests.support.live_cluster``: a 1.5 s lease).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chaos.store_links import StoreLinks, insert_store_proxies, store_address, through
from orchestrator.errors import InvalidReplicationFactor
from orchestrator.local import cluster as lc
from orchestrator.local.settings_files import read_toml
from orchestrator.local.state import LocalClusterState
from tests.support.live_cluster import LiveCluster, wait_until
from tests.support.postgres_server import PostgresServer

CONTROLLERS = (lc.CONTROLLER_ID_BASE, lc.CONTROLLER_ID_BASE + 1)


def _create(cluster: LiveCluster, name: str) -> None:
    """Create a topic of one partition once the active controller counts the broker as unfenced: a controller that
    just became active (or restarted) learns that from the broker's next heartbeat, and refuses to place a replica
    until then (INVALID_REPLICATION_FACTOR); any other error fails the test."""

    def created() -> bool:
        try:
            cluster.call(lambda c: c.create_topic(name, partitions=1))
        except InvalidReplicationFactor:
            return False
        return True

    wait_until(f"{name} created", created, timeout_s=30, interval_s=0.2)


@pytest.mark.unit
def test_a_url_is_pointed_at_a_proxy_by_its_host_and_port_alone() -> None:
    url = "postgresql://postgres@db.example:6543/chaos_7?sslmode=disable"
    assert through(url, 40001) == "postgresql://postgres@127.0.0.1:40001/chaos_7?sslmode=disable"
    assert through("postgresql://db.example/x", 40001) == "postgresql://127.0.0.1:40001/x"
    assert store_address(url) == ("db.example", 6543)
    assert store_address("postgresql://postgres@10.0.0.5/x") == ("10.0.0.5", 5432)
    with pytest.raises(ValueError, match="names no host"):
        store_address("postgresql:///x")


@pytest.fixture
def store_linked(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[tuple[LiveCluster, StoreLinks]]:
    name = postgres_server.create_database()
    url = f"postgresql://postgres:{postgres_server.password}@127.0.0.1:{postgres_server.port}/{name}"
    cluster: LiveCluster | None = None
    links: StoreLinks | None = None
    try:
        cluster = LiveCluster(tmp_path / "cluster", brokers=1, controllers=2, store=url)
        links = insert_store_proxies(cluster.dir)
        yield cluster, links
    finally:
        if cluster is not None:
            cluster.close()  # first: without the proxies its processes could not reach the store to shut down
        if links is not None:
            links.close()
        postgres_server.drop_database(name)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_every_process_reaches_the_store_through_its_own_proxy(
    store_linked: tuple[LiveCluster, StoreLinks], postgres_server: PostgresServer
) -> None:
    cluster, links = store_linked
    state = LocalClusterState.load(cluster.dir)
    assert set(links.links) == {("controller", c) for c in CONTROLLERS} | {("broker", 1)}
    for (role, ident), link in links.links.items():
        config = read_toml(Path(str(state.find(role, ident).config)))
        assert store_address(config[role]["metadata_store"]) == ("127.0.0.1", link.port), (role, ident)
        assert link.target == ("127.0.0.1", postgres_server.port)
    relayed = {key: link.bytes_relayed for key, link in links.links.items()}
    # every controller polls the lease, the broker reads the metadata log: each link carries its process's traffic
    wait_until(
        "traffic on every store link",
        lambda: all(link.bytes_relayed > relayed[key] for key, link in links.links.items()),
        timeout_s=20,
    )
    _create(cluster, "through-proxies")
    assert "through-proxies" in {t["name"] for t in cluster.call(lambda c: c.metadata())["topics"]}


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_active_controller_cut_off_from_the_store_alone_hands_over_and_stays_a_standby_once_healed(
    store_linked: tuple[LiveCluster, StoreLinks],
) -> None:
    cluster, links = store_linked
    first = wait_until("an active controller", cluster.maybe_active_controller, timeout_s=20)
    other = next(c for c in CONTROLLERS if c != first.id)
    links.links[("controller", first.id)].set_mode("drop")

    def taken_over() -> bool:
        active = cluster.maybe_active_controller()
        return active is not None and active.id == other

    wait_until(f"controller {other} active", taken_over, timeout_s=30, interval_s=0.2)
    assert lc.is_ours(cluster.process("controller", first.id)), "the cut-off controller still runs"
    _create(cluster, "while-cut-off")

    links.links[("controller", first.id)].set_mode("pass")
    log = Path(str(cluster.process("controller", first.id).log))
    wait_until(
        f"controller {first.id} to step down",
        lambda: (
            '"controller.step_down"' in log.read_text(errors="replace")
            or '"controller.deposed"' in log.read_text(errors="replace")
        ),
        timeout_s=30,
        interval_s=0.2,
    )
    _create(cluster, "after-healing")
    # On a busy machine the holder may renew its lease late, and status shows no active controller for a moment.
    active = wait_until("an active controller", cluster.maybe_active_controller, timeout_s=20)
    assert active.id == other, "the healed controller did not take the lease back from the one that holds it"
    names = {t["name"] for t in cluster.call(lambda c: c.metadata())["topics"]}
    assert {"while-cut-off", "after-healing"} <= names


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_controller_started_while_its_store_link_resets_waits_for_the_store_and_starts_once_it_heals(
    store_linked: tuple[LiveCluster, StoreLinks],
) -> None:
    cluster, links = store_linked
    ident = CONTROLLERS[1]
    p = cluster.process("controller", ident)
    log = Path(str(p.log))
    retries_before = log.read_text(errors="replace").count('"metadata.store.open_retry"')
    lc.stop_process(p, timeout_s=10)
    links.links[("controller", ident)].set_mode("reset")  # every connection to the store reset as it is made
    with ThreadPoolExecutor(1) as pool:
        restarting = pool.submit(lc.restart, cluster.dir, "controller", ident, timeout_s=60)
        wait_until(
            f"controller {ident} to wait for its store",
            lambda: log.read_text(errors="replace").count('"metadata.store.open_retry"') > retries_before,
            timeout_s=30,
            interval_s=0.1,
        )
        assert not restarting.done(), "it is still starting, not gone"
        links.links[("controller", ident)].set_mode("pass")
        restarted = restarting.result(timeout=60)
    assert lc.is_ours(restarted)
    _create(cluster, "after-the-wait")
