"""The fault suite in ``make test``: a few fixed seeds at a small size, each a real cluster under the seed's faults,
healed and checked (:mod:`chaos.runner`). ``make chaos SEEDS=200`` runs the long version.

A seed that once showed a violation joins ``REGRESSION_SEEDS`` once the defect is fixed, so it stays fixed. A failure
prints the seed, its fault schedule and the history excerpt of each violation; the run's files are kept."""

from __future__ import annotations

import pytest

from chaos.report import violation_report
from chaos.runner import run_seed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FIXED_SEEDS = (1, 2, 3)
REGRESSION_SEEDS: tuple[int, ...] = ()
OPERATIONS = 12


@pytest.mark.parametrize("seed", FIXED_SEEDS + REGRESSION_SEEDS)
def test_a_seeded_run_under_faults_keeps_every_invariant(seed: int) -> None:
    result = run_seed(seed, operations=OPERATIONS, brokers=2, controllers=2, fault_rate=0.5)
    assert not result.violations, violation_report(result)
    assert sum(result.faults.values()) > 0, "the seed injected faults"
