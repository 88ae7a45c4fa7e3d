"""What a chaos run with violations says: its seed, its fault schedule, each violation with its evidence and the
shortest history excerpt that shows it, where its files are kept, and how to keep the seed as a regression test.
The same text is printed by ``python -m chaos`` and by the fixed-seed tests when they fail."""

from __future__ import annotations

from chaos import checker as ck
from chaos.runner import RunResult


def violation_report(result: RunResult) -> str:
    factor = result.scenario.replication_factor
    on = result.store if factor == 1 else f"{result.store}, replication factor {factor}"
    lines = [f"seed {result.seed} (on {on}): {len(result.violations)} violation(s)", "fault schedule:"]
    lines += [f"  {line}" for line in result.scenario.schedule()] or ["  (no faults)"]
    lines += ["operations:"] + [f"  {op.describe()}" for op in result.scenario.ops]
    for v in result.violations:
        lines.append(str(v))
        lines += [f"    {line}" for line in v.evidence]
        lines.append("  history excerpt:")
        lines += [f"    {dict(event)}" for event in ck.excerpt(result.history, v)]
    lines.append(f"the run's files are kept in {result.directory}")
    size = f"({result.seed}, {result.operations}, {result.scenario.brokers})"
    if factor > 1:
        replicated = f"({result.seed}, {result.operations}, {result.scenario.brokers}, {factor})"
        lines.append(
            f"to keep it as a regression test: add {replicated} to REPLICATED_REGRESSION_SEEDS in "
            "tests/chaos/test_seeds.py"
        )
    elif result.store != "postgresql server":
        lines.append(f"to keep it as a regression test: add {size} to REGRESSION_SEEDS in tests/chaos/test_seeds.py")
    else:  # its schedule has the server's faults: it replays only on a server the run controls
        lines.append(
            f"to keep it as a regression test: run {size} on the suite's PostgreSQL server as STORE_FAULT_RUN is "
            "run in tests/chaos/test_seeds.py"
        )
    return "\n".join(lines)
