"""``python -m chaos``: run chaos scenarios and print what they found (``make chaos SEEDS=200``).

``python -m chaos --seeds 200`` runs seeds 1..200 (``--first`` moves the start; ``--seed N`` runs one) and prints a
table: scenarios, operations, violations, time, and the coverage (:mod:`chaos.coverage`: how often each fault kind
and crash point was hit, one column per store and security the run used). A violation prints its seed, the fault
schedule and the history excerpt that shows it, keeps the run's directory (logs, history, the cluster's files), and
the command exits 1. Exit 0 means no violation in any seed.

``--secure`` runs every seed on a cluster with TLS, SCRAM logins and ACLs (``make chaos SECURE=1``); ``--security all``
runs each seed both ways. ``--store postgresql`` keeps the metadata in PostgreSQL (``make chaos STORE=postgresql``): a
throwaway server (:mod:`chaos.store_server`) is started once for the run and stopped at its end, whatever happens
(Ctrl-C included), each seed gets a database of its own, and the server's pauses and restarts join the faults drawn;
``--store all`` runs each seed on SQLite and on PostgreSQL. ``--replication-factor 3`` (``make chaos RF=3``) creates
every topic of the workload with 3 replicas (at most ``--brokers``) and ``min.insync.replicas=2``; the table's columns
name the factor. ``--disk-faults`` (``make chaos DISK=1``, as root) makes brokers' data directories read-only, full or
fail with EIO too (:mod:`chaos.disk`, :mod:`chaos.io_errors`), and, with replicas, lost. ``--operations``,
``--topics``, ``--controllers`` and ``--brokers`` size each scenario (``make chaos OPS=100 TOPICS=10 CONTROLLERS=3
BROKERS=4``). ``--matrix`` (``make chaos MATRIX=1``) deals the seeds round the full matrix in turn: SQLite and
PostgreSQL, plain and secure, replication factor 1 and 3, all with disk faults, a column each. Ctrl-C stops the run
after cleaning up the seed it was in, and prints the table of the seeds done (exit 130); SIGTERM (a cancelled CI job,
``kill``) does the same, and so does SIGINT sent to a run started in the background, whose shell ignores it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections.abc import Iterator

import click
from rich.console import Console
from rich.table import Table

from chaos.coverage import Config, Coverage
from chaos.report import violation_report
from chaos.runner import RunResult, run_seed
from chaos.scenario import MAX_TOPICS
from chaos.store_server import ChaosPostgres, chaos_postgres
from orchestrator import crash_points
from orchestrator.local.security import LocalSecurity
from orchestrator.logging import configure_logging
from tests.support.postgres_server import PostgresUnavailable

# The table is read back from logs and CI output: never wrapped to a pipe's 80 columns.
console = Console(stderr=False, width=None if sys.stdout.isatty() else 200)
STORES = {"sqlite": ("sqlite",), "postgresql": ("postgresql",), "all": ("sqlite", "postgresql")}
SECURITIES = {"plain": (False,), "secure": (True,), "all": (False, True)}
INTERRUPTED = "interrupted: the seed under way was stopped and removed; the table covers the seeds done"


@click.command()
@click.option("--seeds", type=click.IntRange(1), default=20, show_default=True, help="How many seeds to run.")
@click.option("--first", type=int, default=1, show_default=True, help="The first seed.")
@click.option("--seed", "one", type=int, default=None, help="Run this one seed (overrides --seeds/--first).")
@click.option("--operations", type=click.IntRange(1), default=20, show_default=True, help="Operations per scenario.")
@click.option("--brokers", type=click.IntRange(1), default=3, show_default=True)
@click.option("--controllers", type=click.IntRange(1), default=2, show_default=True)
@click.option(
    "--topics",
    type=click.IntRange(1, MAX_TOPICS),
    default=3,
    show_default=True,
    help="How many topic names the workload draws from (chaos-0 ...).",
)
@click.option("--fault-rate", type=click.FloatRange(0, 1), default=0.35, show_default=True)
@click.option("--keep", is_flag=True, help="Keep every run's directory, not only those with violations.")
@click.option(
    "--store",
    type=click.Choice(sorted(STORES)),
    default="sqlite",
    show_default=True,
    help="Where the cluster keeps its metadata (postgresql: a throwaway server, a database per seed; all: both).",
)
@click.option(
    "--security",
    type=click.Choice(sorted(SECURITIES)),
    default="plain",
    show_default=True,
    help="secure: TLS, SCRAM logins and ACLs on every Kafka port; all: each seed both ways.",
)
@click.option("--secure", is_flag=True, help="The same as --security secure.")
@click.option(
    "--replication-factor",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Of every topic the workload creates (at most --brokers); from 3, min.insync.replicas=2.",
)
@click.option(
    "--disk-faults",
    is_flag=True,
    help="Brokers' data directories turn read-only or full (mounts: needs root) or fail with EIO too, and with "
    "replicas are lost (emptied while the broker is dead); a broker halts on its failed disk.",
)
@click.option(
    "--matrix",
    is_flag=True,
    help="The full matrix: SQLite and PostgreSQL, plain and secure, replication factor 1 and 3, with disk faults "
    "(as root); the seeds are dealt round the eight in turn, so --seeds 200 gives each 25.",
)
def main(
    seeds: int,
    first: int,
    one: int | None,
    operations: int,
    brokers: int,
    controllers: int,
    topics: int,
    fault_rate: float,
    keep: bool,
    store: str,
    security: str,
    secure: bool,
    replication_factor: int,
    disk_faults: bool,
    matrix: bool,
) -> None:
    configure_logging("cli", level=logging.WARNING)  # the run's own clients: their debug lines are noise here
    if secure and security != "plain":
        raise click.UsageError("--secure is --security secure: give one of them")
    chosen = [one] if one is not None else list(range(first, first + seeds))
    factor = min(replication_factor, brokers)  # the scenario's cap, so the table says what ran
    securities = SECURITIES["secure" if secure else security]
    if matrix:
        factors = sorted({1, min(3, brokers)})
        configs = [Config(s, sec, f, True) for s in STORES["all"] for sec in SECURITIES["all"] for f in factors]
        runs = [(configs[k % len(configs)], seed) for k, seed in enumerate(chosen)]
        configs = list(dict.fromkeys(c for c, _ in runs))  # fewer seeds than configs: only those dealt one
    else:
        configs = [Config(s, sec, factor, disk_faults) for s in STORES[store] for sec in securities]
        runs = [(c, seed) for c in configs for seed in chosen]
    summary = _Summary()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_stopped_by_signals())
        postgres: ChaosPostgres | None = None
        if any(c.store == "postgresql" for c in configs):
            try:
                postgres = stack.enter_context(chaos_postgres())
            except PostgresUnavailable as exc:
                raise click.ClickException(f"--store postgresql needs a PostgreSQL server: {exc}") from None
            console.print(f"PostgreSQL server for the run: pid {postgres.server.pid}, port {postgres.server.port}")
        total = len(runs)
        try:
            for n, (config, seed) in enumerate(runs, 1):
                result = run_seed(
                    seed,
                    operations=operations,
                    brokers=brokers,
                    controllers=controllers,
                    topics=topics,
                    fault_rate=fault_rate,
                    keep=keep,
                    postgres=postgres if config.store == "postgresql" else None,
                    security=LocalSecurity(tls=True, sasl=True, acls=True) if config.secure else LocalSecurity(),
                    replication_factor=config.replication_factor,
                    disk_faults=config.disk,
                )
                summary.add(config, result)
                where = f" ({config.label})" if len(configs) > 1 else ""
                console.print(f"[{n}/{total}] seed {seed}{where}: {_seed_line(result)}")
                if result.violations:
                    console.print(violation_report(result), markup=False, highlight=False)
        except KeyboardInterrupt:
            summary.interrupted = True
            console.print(f"[yellow]{INTERRUPTED}[/]")
    console.print(summary.render(configs))
    raise SystemExit(130 if summary.interrupted else 1 if summary.violations else 0)


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM, and SIGINT even where the shell ignored it, stop the run as Ctrl-C does (the seed under way cleaned
    up, the table printed), instead of leaving its cluster's processes and mounts behind."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _seed_line(result: RunResult) -> str:
    state = "[green]ok[/]" if not result.violations else f"[red]{len(result.violations)} violation(s)[/]"
    if result.incomplete:
        state += f" [yellow](not all seen: {'; '.join(v.message for v in result.incomplete)})[/]"
    return (
        f"{state}, {result.operations} operations ({result.operations_failed} refused or failed), "
        f"{len(result.scenario.faults)} faults, crash points hit {result.crash_points_hit or 'none'}, "
        f"{result.seconds:.1f}s"
    )


class _Summary:
    """What the seeds done add up to, and the tables that say it."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.coverage = Coverage()
        self.seeds: list[tuple[Config, int]] = []
        self.ops = self.failed = self.violations = 0
        self.bad: list[str] = []
        self.incomplete: list[str] = []  # seeds whose log the run could not read whole: checked on what it saw
        self.interrupted = False

    def add(self, config: Config, result: RunResult) -> None:
        self.coverage.add(config, result.faults, result.crash_points_hit)
        self.seeds.append((config, result.seed))
        self.ops += result.operations
        self.failed += result.operations_failed
        self.violations += len(result.violations)
        name = f"{result.seed} ({config.label})"
        if result.violations:
            self.bad.append(name)
        if result.incomplete:
            self.incomplete.append(name)

    def render(self, configs: list[Config]) -> Table:
        seeds = sorted({s for _, s in self.seeds})
        span = f"seeds {seeds[0]}..{seeds[-1]}" if seeds else "no seed done"
        title = f"chaos: {span} on {', '.join(c.label for c in configs)}"
        table = Table(title=title)
        header, rows = self.coverage.table(sorted(set(crash_points.POINTS) - crash_points.STOP_ONLY))
        if len(header) < 2:  # no seed done: an empty column, so the figures below still have their value's
            header, rows = [*header, ""], [[*row, ""] for row in rows]
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        table.add_section()
        blank = [""] * (len(header) - 2)
        figures = [
            ("scenarios run", str(len(self.seeds))),
            ("operations (refused or failed)", f"{self.ops} ({self.failed})"),
            ("violations", str(self.violations)),
            ("seeds with violations", ", ".join(self.bad) or "none"),
            ("seeds not seen whole (log gap)", ", ".join(self.incomplete) or "none"),
            ("time", f"{time.monotonic() - self.started:.0f} s"),
        ]
        for name, value in figures:
            table.add_row(name, value, *blank)
        return table


if __name__ == "__main__":
    main()
