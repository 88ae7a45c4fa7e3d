"""``tieredctl cluster up --store postgresql://...``: a local cluster whose metadata lives in PostgreSQL.

A real server (``tests.support.postgres_server``), real processes. The password never reaches a settings file or
``cluster status``; a password written in the URL is moved to ``config/store-password`` (mode 0600); the cluster
works (a topic is created and listed); ``down --purge`` leaves the database alone; and a database that already holds
a cluster's metadata is refused by the next ``up`` with another directory.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orchestrator.client import TieredClient
from orchestrator.errors import LocalClusterError
from orchestrator.local import cluster as lc
from orchestrator.local.cluster_store import open_cluster_store
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.open import PASSWORD_ENV
from orchestrator.metadata.postgres import PostgresMetadataStore
from tests.support.live_cluster import FAST_BROKER, FAST_CONTROLLER, run
from tests.support.postgres_server import PostgresServer, running_postgres

pytestmark = pytest.mark.integration

FAST = {"broker_overrides": FAST_BROKER, "controller_overrides": FAST_CONTROLLER}


def test_a_local_cluster_on_postgresql_keeps_the_password_out_of_its_files_and_the_database_after_purge(
    tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    name = postgres_server.create_database()
    password = postgres_server.password
    with_password = f"postgresql://postgres:{password}@127.0.0.1:{postgres_server.port}/{name}"
    directory = tmp_path / "cluster"
    try:
        state = lc.up(directory, brokers=1, controllers=2, store=with_password, **FAST)
        secret = directory / "config" / "store-password"
        assert secret.read_text().strip() == password and stat.S_IMODE(secret.stat().st_mode) == 0o600
        for path in directory.rglob("*"):
            if path.is_file() and path != secret and path.suffix in (".toml", ".json", ".log", ""):
                assert password not in path.read_text(errors="replace"), path
        assert not (directory / "metadata.db").exists()
        status = lc.status(directory)
        assert name in status["store"] and password not in str(status)

        async def create_and_list() -> set[str]:
            async with TieredClient(state.bootstrap_server, timeout_s=10) as c:
                await c.create_topic("on-postgres", partitions=2, replication_factor=1)
                return {t["name"] for t in (await c.metadata())["topics"]}

        assert "on-postgres" in run(create_and_list())
        with PostgresMetadataStore(postgres_server.dsn(name), recover_on_open=False) as store:
            assert any(e.record.name == "TopicRecord" for e in store.read())

        stopped = lc.down(directory, purge=True)
        assert stopped.purged
        assert not directory.exists() or not any(directory.iterdir()), "purge leaves nothing of the cluster"
        with PostgresMetadataStore(postgres_server.dsn(name), recover_on_open=False) as store:
            assert store.end_offset() > 0, "down --purge never drops anything in an external store"

        monkeypatch.setenv(PASSWORD_ENV, password)
        url = f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}"
        with pytest.raises(LocalClusterError, match="already"):
            lc.up(tmp_path / "another", brokers=1, controllers=1, store=url, **FAST)
    finally:
        for d in (directory, tmp_path / "another"):
            if (d / "cluster.json").exists():
                lc.down(d, purge=True)
        postgres_server.drop_database(name)


def test_a_password_given_by_environment_at_up_is_found_later_and_status_lists_the_processes_while_the_store_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server of its own: the end of the test stops it."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    directory = tmp_path / "cluster"
    with running_postgres() as server:
        monkeypatch.setenv(PASSWORD_ENV, server.password)
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{server.create_database()}"
        try:
            lc.up(directory, brokers=1, controllers=1, store=url, **FAST)
            secret = directory / "config" / "store-password"
            assert secret.read_text().strip() == server.password
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
            lc.down(directory)
            monkeypatch.delenv(PASSWORD_ENV)  # a later shell, without it
            with open_cluster_store(LocalClusterState.load(directory)) as store:
                assert store.end_offset() > 0
            state = lc.up(directory, **FAST)  # resumed: the processes read the file too

            async def create() -> None:
                async with TieredClient(state.bootstrap_server, timeout_s=10) as c:
                    await c.create_topic("after-resume", partitions=1, replication_factor=1)

            run(create())
            assert lc.status(directory)["store_error"] is None

            server.stop()  # the store goes away: status still lists every process, and says why it cannot tell more
            down_store = lc.status(directory)
            assert down_store["store_error"] and "KAFKA_STORAGE_ERROR" in down_store["store_error"]
            assert all(p["alive"] for p in down_store["processes"])
            assert [p["active"] for p in down_store["processes"] if p["role"] == "controller"] == [None]
        finally:
            if (directory / "cluster.json").exists():
                lc.down(directory, purge=True)
