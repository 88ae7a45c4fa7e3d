"""The fault schedule drawn from a seed: the PostgreSQL server's faults are drawn only for a run that controls the
server, they cover pauses both under and beyond the controllers' lease, and adding them left every SQLite seed's
scenario as it was (a regression seed replays only the schedule it was found with)."""

from __future__ import annotations

import pytest

from chaos.rig import CONTROLLER_SETTINGS
from chaos.scenario import LEASE_S, STORE_FAULT_KINDS, generate
from orchestrator import crash_points

pytestmark = pytest.mark.unit

POINTS = sorted(set(crash_points.POINTS) - crash_points.STOP_ONLY)
SEEDS = range(1, 201)


def test_a_run_on_sqlite_draws_no_store_fault() -> None:
    for seed in SEEDS:
        kinds = {f.kind for f in generate(seed, crash_points=POINTS).faults}
        assert not kinds & set(STORE_FAULT_KINDS), seed


def test_the_schedule_of_a_regression_seed_on_sqlite_is_the_one_it_was_found_with() -> None:
    # Seed 104 at make chaos's size (REGRESSION_SEEDS in test_seeds.py): pinned, so a change of the drawing that
    # would make it replay something else fails here, not silently there.
    scenario = generate(104, operations=20, brokers=3, controllers=2, fault_rate=0.35, crash_points=POINTS)
    assert scenario.schedule() == [
        "before #10 crash_point broker:1 hit=1 point=broker.after_upload_before_rlmm",
        "before #11 kill controller:active restart_after=0",
        "before #12 crash_point controller:active hit=1 point=controller.mid_snapshot",
        "before #17 crash_point broker:3 hit=1 point=broker.before_disable_ack",
    ]


def test_a_run_on_its_own_postgresql_server_draws_its_pauses_and_restarts() -> None:
    faults = [f for seed in SEEDS for f in generate(seed, crash_points=POINTS, store_faults=True).faults]
    pauses = [f.args["duration_s"] for f in faults if f.kind == "postgres_pause"]
    restarts = [f.args["down_s"] for f in faults if f.kind == "postgres_restart"]
    assert len(pauses) > 20 and len(restarts) > 20
    assert any(d < LEASE_S for d in pauses) and any(d > LEASE_S for d in pauses), "pauses under and beyond the lease"
    assert all(0.3 <= d <= LEASE_S * 5 for d in pauses)
    assert all(0.2 <= d <= 4.0 for d in restarts)
    assert all(f.role == "" and f.target == -1 for f in faults if f.kind in STORE_FAULT_KINDS)


def test_the_store_faults_are_drawn_from_the_seed_alone() -> None:
    first = generate(42, operations=12, brokers=2, fault_rate=0.5, crash_points=POINTS, store_faults=True)
    again = generate(42, operations=12, brokers=2, fault_rate=0.5, crash_points=POINTS, store_faults=True)
    assert first == again


def test_the_lease_the_pauses_are_drawn_against_is_the_runs_lease() -> None:
    assert CONTROLLER_SETTINGS["controller"]["lease_ttl_ms"] == LEASE_S * 1000
