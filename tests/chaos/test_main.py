"""``python -m chaos``'s own decisions, without running a seed: a PostgreSQL run without the server's binaries ends
at once with an error naming what is missing, contradictory options are refused, and the replication factor asked
reaches every seed and the table's columns."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import chaos.__main__ as cli
from chaos.runner import RunResult
from chaos.scenario import generate
from tests.support.postgres_server import PostgresUnavailable

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _logging_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` configures structlog for the process (level WARNING): in the suite's process that would leave later
    tests' log capture without their info events."""
    monkeypatch.setattr(cli, "configure_logging", lambda *_, **__: None)


def test_without_postgresql_binaries_a_postgresql_run_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def missing() -> Iterator[None]:
        raise PostgresUnavailable("the PostgreSQL server binaries (initdb and postgres) were not found (...)")
        yield

    def no_seed(*_: object, **__: object) -> None:
        raise AssertionError("no seed runs without its store")

    monkeypatch.setattr(cli, "chaos_postgres", missing)
    monkeypatch.setattr(cli, "run_seed", no_seed)
    result = CliRunner().invoke(cli.main, ["--store", "postgresql", "--seeds", "1"])
    assert result.exit_code == 1, result.output
    assert "--store postgresql needs a PostgreSQL server" in result.output
    assert "initdb and postgres" in result.output


def test_secure_and_another_security_are_refused() -> None:
    result = CliRunner().invoke(cli.main, ["--secure", "--security", "all"])
    assert result.exit_code == 2 and "--secure is --security secure" in result.output


def test_the_replication_factor_reaches_every_seed_capped_at_the_brokers_and_names_its_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def fake_seed(seed: int, *, brokers: int, replication_factor: int, **_: object) -> RunResult:
        asked.append(replication_factor)
        scenario = generate(seed, brokers=brokers, replication_factor=replication_factor)
        return RunResult(seed, scenario, [], Counter(kill=1), [], 20, 0, 0.1, None, [])

    monkeypatch.setattr(cli, "run_seed", fake_seed)
    result = CliRunner().invoke(cli.main, ["--seeds", "2", "--replication-factor", "3"])
    assert result.exit_code == 0, result.output
    assert asked == [3, 3]
    assert "sqlite plain RF 3 (2 seeds)" in result.output
    capped = CliRunner().invoke(cli.main, ["--seed", "1", "--brokers", "2", "--replication-factor", "3"])
    assert capped.exit_code == 0, capped.output
    assert asked[-1] == 2 and "sqlite plain RF 2 (1 seeds)" in capped.output


def test_the_matrix_deals_the_seeds_round_every_store_security_and_factor_with_disk_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[object, ...]] = []

    @contextlib.contextmanager
    def server() -> Iterator[object]:
        yield type("Server", (), {"server": type("Proc", (), {"pid": 1, "port": 2})()})()

    def fake_seed(seed: int, *, brokers: int, replication_factor: int, **kw: object) -> RunResult:
        ran.append((seed, kw["postgres"] is not None, kw["security"].tls, replication_factor, kw["disk_faults"]))  # type: ignore[attr-defined]
        scenario = generate(seed, brokers=brokers, replication_factor=replication_factor)
        return RunResult(seed, scenario, [], Counter(kill=1), [], 20, 0, 0.1, None, [])

    monkeypatch.setattr(cli, "chaos_postgres", server)
    monkeypatch.setattr(cli, "run_seed", fake_seed)
    result = CliRunner().invoke(cli.main, ["--matrix", "--seeds", "16", "--first", "5"])
    assert result.exit_code == 0, result.output
    assert [seed for seed, *_ in ran] == list(range(5, 21)), "each seed once"
    configs = [tuple(r[1:]) for r in ran]
    assert len(set(configs)) == 8 and all(configs.count(c) == 2 for c in configs), "the eight dealt in turn"
    assert all(disk for *_, disk in configs) and {f for *_, f, _ in configs} == {1, 3}
    assert result.output.count("(postgresql secure RF 3 disk): ok") == 2


def test_a_matrix_of_fewer_seeds_than_configurations_starts_no_server_it_does_not_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_server() -> None:
        raise AssertionError("a PostgreSQL server was started for SQLite seeds only")

    def fake_seed(seed: int, *, brokers: int, replication_factor: int, **kw: object) -> RunResult:
        assert kw["postgres"] is None
        scenario = generate(seed, brokers=brokers, replication_factor=replication_factor)
        return RunResult(seed, scenario, [], Counter(kill=1), [], 20, 0, 0.1, None, [])

    monkeypatch.setattr(cli, "chaos_postgres", no_server)
    monkeypatch.setattr(cli, "run_seed", fake_seed)
    result = CliRunner().invoke(cli.main, ["--matrix", "--seeds", "2"])
    assert result.exit_code == 0, result.output
    assert "postgresql" not in result.output, "the table has a column for each configuration dealt a seed only"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_or_background_interrupted_run_stops_as_ctrl_c_does_and_restores_the_handlers(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    """SIGTERM (a cancelled CI job), and SIGINT sent to a run whose shell ignored it (started with ``&``), stop the
    run with the table of the seeds done and exit 130, as ^C does; the handlers are the caller's again after."""
    started: list[int] = []

    def fake_seed(seed: int, *, brokers: int, replication_factor: int, **kw: object) -> RunResult:
        started.append(seed)
        if seed == 2:
            os.kill(os.getpid(), signum)
            threading.Event().wait(5)  # the handler interrupts this wait; 5 s only bounds a broken handler
        scenario = generate(seed, brokers=brokers, replication_factor=replication_factor)
        return RunResult(seed, scenario, [], Counter(kill=1), [], 20, 0, 0.1, None, [])

    monkeypatch.setattr(cli, "run_seed", fake_seed)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job's shell leaves it
    try:
        result = CliRunner().invoke(cli.main, ["--seeds", "5"])
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)
    assert result.exit_code == 130, result.output
    assert started == [1, 2], "no seed after the signal"
    assert cli.INTERRUPTED in result.output and "1 seeds" in result.output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_that_comes_while_a_seed_is_closed_is_held_then_stops_the_run(signum: signal.Signals) -> None:
    """A SIGTERM that came while a finished seed was being closed was lost (the clean-up ignored both signals), and
    the run went on to the next seed: it is held until the clean-up ends, then stops the run."""
    from chaos.runner import stop_signals_held

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_signals_held() as held:
        os.kill(os.getpid(), signum)  # its Python handler runs right after the call returns: it only notes it
        body_finished = True
    assert body_finished and held == [signum]
    assert {s: signal.getsignal(s) for s in before} == before
