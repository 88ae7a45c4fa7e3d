"""What a run with violations says: a replicated run names its replication factor, and the regression list that
replays it at that factor."""

from __future__ import annotations

from collections import Counter

import pytest

from chaos import checker as ck
from chaos.report import violation_report
from chaos.runner import RunResult
from chaos.scenario import generate

pytestmark = pytest.mark.unit


def result(replication_factor: int) -> RunResult:
    scenario = generate(323, operations=12, brokers=3, fault_rate=0.5, replication_factor=replication_factor)
    violation = ck.Violation("8", "2 offset(s) of T-0 acknowledged twice", "T")
    return RunResult(323, scenario, [violation], Counter(), [], 12, 0, 1.0, None, [])


def test_a_replicated_run_names_its_factor_and_the_replicated_regression_list() -> None:
    report = violation_report(result(3))
    assert report.startswith("seed 323 (on sqlite, replication factor 3): 1 violation(s)")
    assert "add (323, 12, 3, 3) to REPLICATED_REGRESSION_SEEDS in tests/chaos/test_seeds.py" in report


def test_a_run_with_one_replica_reads_as_it_always_did() -> None:
    report = violation_report(result(1))
    assert report.startswith("seed 323 (on sqlite): 1 violation(s)")
    assert "add (323, 12, 3) to REGRESSION_SEEDS in tests/chaos/test_seeds.py" in report
