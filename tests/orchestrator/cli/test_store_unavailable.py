"""CLI commands against a local cluster whose metadata store is paused end with STORE_UNAVAILABLE, naming the store
and what to do, exit status 1, instead of hanging; ``cluster status`` still lists the processes.

Paused for real: every process of a PostgreSQL server of the test's own SIGSTOPped (it accepts connections in the
kernel and answers nothing), or, on SQLite, the file's write lock held by another connection (``BEGIN IMMEDIATE``,
as a process paused inside a write holds it). Each command runs as a subprocess with a timeout that fails the test
if it hangs; no duration is asserted. The commands that only read run side by side, each a process of its own
answered and checked on its own: each waits out its own request timeout and store probe, so together they take the
time of one. The commands run while the store is paused have a request timeout of 5 s (``TIEREDCTL_REQUEST_TIMEOUT_S``)
instead of 30 s: the same path (the request unanswered for one timeout, the store probed, STORE_UNAVAILABLE), waited
out sooner."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli.context import REQUEST_TIMEOUT_ENV
from orchestrator.errors import StoreUnavailable
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from orchestrator.local.store_probe import store_problem
from orchestrator.metadata.open import PASSWORD_ENV
from tests.support.live_cluster import FAST_BROKER, FAST_CONTROLLER, wait_until
from tests.support.postgres_server import running_postgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FAST = {"broker_overrides": FAST_BROKER, "controller_overrides": FAST_CONTROLLER}
COMMAND_BOUND_S = 150  # a command not ended by then hangs (two request timeouts, a last attempt, the probe)
PAUSED_REQUEST_TIMEOUT = {REQUEST_TIMEOUT_ENV: "5"}  # the request timeout of the commands run while it is paused


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def _environment(paused: bool) -> dict[str, str]:
    dropped = ("TIEREDCTL_BOOTSTRAP_SERVER", PASSWORD_ENV, REQUEST_TIMEOUT_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **(PAUSED_REQUEST_TIMEOUT if paused else {})}


def _tieredctl(cwd: Path, *args: str, paused: bool = False) -> subprocess.CompletedProcess[str]:
    env = _environment(paused)
    return subprocess.run(_command(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_BOUND_S)


def _tieredctl_side_by_side(cwd: Path, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Each of ``commands`` run as by :func:`_tieredctl` while the store is paused, all started at once; their
    outcomes, in their order."""
    env = _environment(paused=True)
    procs: list[subprocess.Popen[str]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    _command(*args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
        outcomes = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=COMMAND_BOUND_S)  # a hang fails the test
            outcomes.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
        return outcomes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)


def _processes_of(pid: int) -> list[int]:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid, *(int(c) for c in children)]


@pytest.fixture(scope="module")
def sqlite_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One local cluster on SQLite for the module's two SQLite tests: the probe's first (it only reads and holds
    the lock for a moment), then the lock's, which frees the lock and waits for commands to work again."""
    workdir = tmp_path_factory.mktemp("store")
    directory = workdir / "var" / "cluster"  # where the CLI run in workdir looks for it
    lc.up(directory, brokers=1, controllers=1, **FAST)
    try:
        yield workdir
    finally:
        lc.down(directory, purge=True, timeout_s=20)


def _stepped_down(workdir: Path) -> bool:
    """The cluster's one controller logged that it stepped down (it could not renew its lease)."""
    log = workdir / "var" / "cluster" / "logs" / "controller-3000.log"
    return any('"controller.step_down"' in line for line in log.read_text().splitlines())


def test_the_store_probe_says_nothing_of_a_store_that_answers(sqlite_cluster: Path) -> None:
    state = LocalClusterState.load(sqlite_cluster / "var" / "cluster")
    assert store_problem(state) is None
    with sqlite3.connect(state.metadata_store, isolation_level=None) as holder:
        holder.execute("BEGIN IMMEDIATE")
        # The probe tries the lock for half the bound and must report within the whole: 0.2 s left 0.1 s for a
        # thread to start, connect and raise, which a full run on a busy machine once overran ("did not answer").
        problem = store_problem(state, timeout_s=2.0)
        holder.execute("ROLLBACK")
    assert isinstance(problem, StoreUnavailable) and "is locked" in problem.message


def test_on_sqlite_a_write_lock_held_elsewhere_makes_commands_say_the_store_is_locked(sqlite_cluster: Path) -> None:
    cwd = sqlite_cluster
    assert _tieredctl(cwd, "topic", "create", "before", "--partitions", "1").returncode == 0
    store = cwd / "var" / "cluster" / "metadata.db"
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # as a process paused inside a write holds it
    try:
        failed = wait_until(
            "a command to fail once the controller cannot renew its lease",
            lambda: (
                (p := _tieredctl(cwd, "topic", "create", "during", "--partitions", "1", paused=True)).returncode and p
            ),
            COMMAND_BOUND_S,
            0.5,
        )
        assert failed.returncode == 1
        assert failed.stderr.startswith("error: STORE_UNAVAILABLE: "), failed.stderr
        assert f"the metadata store {store} is locked" in failed.stderr and f"fuser {store}" in failed.stderr
        # The reads below fail once the controller has given up its lease (until then it answers them from its
        # image, which is right); a create that ends after a short request timeout can end before that.
        wait_until("the controller to step down", lambda: _stepped_down(cwd), COMMAND_BOUND_S, 0.2)
        reads = (["topic", "list"], ["tiering", "status"])
        *listings, status = _tieredctl_side_by_side(cwd, *reads, ["cluster", "status"])
        for command, listing in zip(reads, listings, strict=True):
            assert listing.returncode == 1 and "STORE_UNAVAILABLE" in listing.stderr, (command, listing.stderr)
        assert status.returncode == 0 and "controller" in status.stdout
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_until("commands to work again", lambda: _tieredctl(cwd, "topic", "list").returncode == 0, COMMAND_BOUND_S, 0.5)


def test_on_postgresql_a_paused_server_makes_commands_end_with_store_unavailable_not_hang(tmp_path: Path) -> None:
    directory = tmp_path / "var" / "cluster"
    with running_postgres() as server:
        os.environ[PASSWORD_ENV] = server.password  # kept by cluster up in its 0600 file; later commands read that
        try:
            url = f"postgresql://postgres@127.0.0.1:{server.port}/{server.create_database()}"
            lc.up(directory, brokers=1, controllers=1, store=url, **FAST)
        finally:
            del os.environ[PASSWORD_ENV]
        paused: list[int] = []
        try:
            assert _tieredctl(tmp_path, "topic", "create", "before", "--partitions", "1").returncode == 0
            paused = _processes_of(server.pid)
            for pid in paused:
                os.kill(pid, signal.SIGSTOP)
            reads = (["topic", "list"], ["tiering", "status"])
            *endings, status = _tieredctl_side_by_side(tmp_path, *reads, ["cluster", "status"])
            for command, ended in zip(reads, endings, strict=True):
                assert ended.returncode == 1, (command, ended.stdout, ended.stderr)
                assert ended.stderr.startswith("error: STORE_UNAVAILABLE: the metadata store user=postgres"), (
                    command,
                    ended.stderr,
                )
                assert f"port={server.port}" in ended.stderr and "pg_isready" in ended.stderr
                assert server.password not in ended.stderr
            assert status.returncode == 0 and "cannot be read" in status.stdout, status.stdout
            assert "controller" in status.stdout and "alive" in status.stdout
        finally:
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
            lc.down(directory, purge=True, timeout_s=20)
