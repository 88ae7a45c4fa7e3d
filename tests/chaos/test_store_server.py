"""The PostgreSQL server's faults as a chaos run injects them, on the suite's real server: paused, every process
of it answers nothing and then everything again; stopped and started again, it is back on the same port with the
same data, and the fixture that owns it still stops the new process; a fault asked while another holds the server
is refused."""

from __future__ import annotations

import os

import psycopg
import pytest

from chaos.store_server import DOWN, PAUSED, UP, ChaosPostgres, StoreFaultRefused
from tests.support.live_cluster import wait_until
from tests.support.postgres_server import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _stopped(pid: int) -> bool:
    """Stopped, or ended while the signal came (a zombie its stopped postmaster cannot reap)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "Z")


def test_a_paused_server_answers_nothing_until_it_is_resumed(postgres_server: PostgresServer) -> None:
    store = ChaosPostgres(postgres_server)
    try:
        stopped = store.pause()
        assert store.state == PAUSED
        assert stopped[0] == postgres_server.pid and len(stopped) > 1, "the postmaster and its processes"
        # SIGSTOP is delivered when the process is next scheduled, not by kill() itself.
        wait_until("every process of the server to be stopped", lambda: all(_stopped(pid) for pid in stopped), 10, 0.02)
        assert not store.answers()
        with pytest.raises(StoreFaultRefused):
            store.stop()
    finally:
        store.resume()
    assert store.state == UP and store.answers()


def test_a_restarted_server_keeps_its_port_and_data(postgres_server: PostgresServer) -> None:
    store = ChaosPostgres(postgres_server)
    name = store.create_database()
    try:
        with psycopg.connect(store.url(name), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        port, old_pid = postgres_server.port, postgres_server.pid
        store.stop()
        assert store.state == DOWN and not store.answers()
        assert not os.path.exists(f"/proc/{old_pid}"), "the old postmaster was reaped"
        store.start()
        assert store.state == UP and postgres_server.port == port and postgres_server.pid != old_pid
        with psycopg.connect(store.url(name)) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [(7,)]
    finally:
        store.heal()
        store.drop_database(name)
