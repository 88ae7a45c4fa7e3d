"""``python -m chaos``: run chaos scenarios and print what they found (``make chaos SEEDS=200``).

``python -m chaos --seeds 200`` runs seeds 1..200 (``--first`` moves the start; ``--seed N`` runs one) and prints a
table: scenarios, operations, faults injected by kind, crash points hit, violations, time. A violation prints its
seed, the fault schedule and the history excerpt that shows it, keeps the run's directory (logs, history, the
cluster's files), and the command exits 1. Exit 0 means no violation in any seed. ``--secure`` runs every seed on
a cluster with TLS, SCRAM logins and ACLs (``make chaos SECURE=1``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import click
from rich.console import Console
from rich.table import Table

from chaos.report import violation_report
from chaos.runner import run_seed
from orchestrator import crash_points
from orchestrator.local.security import LocalSecurity
from orchestrator.logging import configure_logging

console = Console(stderr=False)


@click.command()
@click.option("--seeds", type=click.IntRange(1), default=20, show_default=True, help="How many seeds to run.")
@click.option("--first", type=int, default=1, show_default=True, help="The first seed.")
@click.option("--seed", "one", type=int, default=None, help="Run this one seed (overrides --seeds/--first).")
@click.option("--operations", type=click.IntRange(1), default=20, show_default=True, help="Operations per scenario.")
@click.option("--brokers", type=click.IntRange(1), default=3, show_default=True)
@click.option("--fault-rate", type=click.FloatRange(0, 1), default=0.35, show_default=True)
@click.option("--keep", is_flag=True, help="Keep every run's directory, not only those with violations.")
@click.option("--secure", is_flag=True, help="Run each seed on a cluster with TLS, SCRAM logins and ACLs.")
def main(
    seeds: int, first: int, one: int | None, operations: int, brokers: int, fault_rate: float, keep: bool, secure: bool
) -> None:
    configure_logging("cli", level=logging.WARNING)  # the run's own clients: their debug lines are noise here
    chosen = [one] if one is not None else list(range(first, first + seeds))
    started = time.monotonic()
    faults: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    ops = failed = violations = 0
    bad: list[int] = []
    incomplete: list[int] = []  # seeds whose log the run could not read whole: checked on what it saw
    for n, seed in enumerate(chosen, 1):
        security = LocalSecurity(tls=True, sasl=True, acls=True) if secure else LocalSecurity()
        result = run_seed(
            seed, operations=operations, brokers=brokers, fault_rate=fault_rate, keep=keep, security=security
        )
        faults.update(result.faults)
        hits.update(result.crash_points_hit)
        ops += result.operations
        failed += result.operations_failed
        violations += len(result.violations)
        state = "[green]ok[/]" if not result.violations else f"[red]{len(result.violations)} violation(s)[/]"
        if result.incomplete:
            incomplete.append(seed)
            state += f" [yellow](not all seen: {'; '.join(v.message for v in result.incomplete)})[/]"
        injected = len(result.scenario.faults)
        console.print(
            f"[{n}/{len(chosen)}] seed {seed}: {state}, {result.operations} operations "
            f"({result.operations_failed} refused or failed), {injected} faults, "
            f"crash points hit {result.crash_points_hit or 'none'}, {result.seconds:.1f}s"
        )
        if result.violations:
            bad.append(seed)
            console.print(violation_report(result), markup=False, highlight=False)
    table = Table(title=f"chaos: seeds {chosen[0]}..{chosen[-1]}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("scenarios", str(len(chosen)))
    table.add_row("operations (refused or failed)", f"{ops} ({failed})")
    for kind, n in sorted(faults.items()):
        table.add_row(f"faults: {kind}", str(n))
    for point in sorted(set(crash_points.POINTS) - crash_points.STOP_ONLY):
        table.add_row(f"crash point {point}", f"{hits.get(point, 0)} hit(s)")
    table.add_row("violations", str(violations))
    table.add_row("seeds with violations", ", ".join(map(str, bad)) or "none")
    table.add_row("seeds not seen whole (log gap)", ", ".join(map(str, incomplete)) or "none")
    table.add_row("time", f"{time.monotonic() - started:.0f} s")
    console.print(table)
    raise SystemExit(1 if violations else 0)


if __name__ == "__main__":
    main()
