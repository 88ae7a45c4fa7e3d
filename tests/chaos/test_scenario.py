"""The fault schedule drawn from a seed: the PostgreSQL server's faults are drawn only for a run that controls the
server, they cover pauses (and cuts of one process's link to it) both under and beyond the controllers' lease, and
adding them left every SQLite seed's scenario as it was (a regression seed replays only the schedule it was found
with)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from chaos import scenario as scenario_module
from chaos.rig import CONTROLLER_SETTINGS, FAST_BROKER, REPLICA_LAG_MS, Rig
from chaos.scenario import (
    DISK_EIO,
    DISK_FAULT_KINDS,
    DISK_LOST,
    LEASE_S,
    LINK_MODES,
    S3_READ_TIMEOUT_S,
    STORE_FAULT_KINDS,
    Scenario,
    generate,
)
from orchestrator import crash_points

pytestmark = pytest.mark.unit

POINTS = sorted(set(crash_points.POINTS) - crash_points.STOP_ONLY)
SEEDS = range(1, 201)


def test_a_run_on_sqlite_draws_no_store_fault() -> None:
    for seed in SEEDS:
        kinds = {f.kind for f in generate(seed, crash_points=POINTS).faults}
        assert not kinds & set(STORE_FAULT_KINDS), seed


def test_disk_faults_are_drawn_only_when_asked_on_a_broker_for_a_few_seconds_and_never_on_one_already_down() -> None:
    drawn = 0
    for seed in SEEDS:
        assert not {f.kind for f in generate(seed, crash_points=POINTS).faults} & set(DISK_FAULT_KINDS), seed
        scenario = generate(seed, crash_points=POINTS, disk_faults=True)
        for f in scenario.faults:
            if f.kind in DISK_FAULT_KINDS:
                drawn += 1
                assert f.role == "broker" and 1 <= f.target <= scenario.brokers
                assert 0.5 <= f.args["duration_s"] <= 3.0
                killed = [k for k in scenario.faults if k.kind == "kill" and k.role == "broker" and k.at < f.at]
                assert all(k.at + k.args["restart_after"] <= f.at for k in killed), (seed, f)
    assert drawn >= len(SEEDS) // 4  # they are drawn at all
    assert set(DISK_FAULT_KINDS) == {"disk_readonly", "disk_full", "disk_eio"}
    kinds = {f.kind for seed in SEEDS for f in generate(seed, crash_points=POINTS, disk_faults=True).faults}
    assert set(DISK_FAULT_KINDS) <= kinds, "every kind is drawn"


def test_io_errors_take_the_place_of_read_only_disks_and_nothing_else_in_the_schedule_moves() -> None:
    """disk_eio replaces about half the read-only draws (its own random stream decides); every other fault, and
    every operation, is what the seed drew before the kind existed."""
    replaced = kept = 0
    for seed in SEEDS:
        scenario = generate(seed, crash_points=POINTS, disk_faults=True)
        as_before = [replace(f, kind="disk_readonly") if f.kind == DISK_EIO else f for f in scenario.faults]
        before = _without_io_errors(seed)
        assert as_before == list(before.faults) and scenario.ops == before.ops, seed
        replaced += sum(f.kind == DISK_EIO for f in scenario.faults)
        kept += sum(f.kind == "disk_readonly" for f in scenario.faults)
    assert replaced and kept, (replaced, kept)


def test_lost_disks_are_drawn_only_with_disk_faults_and_replicas_on_one_broker_at_a_time() -> None:
    drawn = 0
    for seed in SEEDS:
        for rf, disk in ((1, True), (3, False)):
            kinds = {
                f.kind for f in generate(seed, crash_points=POINTS, replication_factor=rf, disk_faults=disk).faults
            }
            assert DISK_LOST not in kinds, (seed, rf, disk)
        scenario = generate(seed, crash_points=POINTS, replication_factor=3, disk_faults=True)
        for f in scenario.faults:
            if f.kind != DISK_LOST:
                continue
            drawn += 1
            assert f.role == "broker" and 1 <= f.target <= scenario.brokers and f.args["restart_after"] in (0, 1, 2)
            down = [
                k
                for k in scenario.faults
                if k.kind in ("kill", DISK_LOST) and k.role == "broker" and k.at < f.at and k is not f
            ]
            assert all(k.at + k.args["restart_after"] <= f.at for k in down), (seed, f)
    assert drawn >= len(SEEDS) // 4


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
    server_faults = ("postgres_pause", "postgres_restart")
    assert all(f.role == "" and f.target == -1 for f in faults if f.kind in server_faults)


def test_a_run_on_its_own_postgresql_server_draws_cuts_of_one_process_link_to_it_within_and_beyond_the_lease() -> None:
    scenarios = [generate(seed, crash_points=POINTS, store_faults=True) for seed in SEEDS]
    drawn = [(s, f) for s in scenarios for f in s.faults if f.kind == "postgres_link"]
    assert len(drawn) > 20
    for s, f in drawn:
        if f.role == "controller":
            assert -1 <= f.target < s.controllers, f
        else:
            assert f.role == "broker" and 1 <= f.target <= s.brokers, f
        assert f.args["mode"] in LINK_MODES and 0.3 <= f.args["duration_s"] <= LEASE_S * 4, f
        assert ("delay_s" in f.args) == (f.args["mode"] == "delay"), f
    durations = [f.args["duration_s"] for _, f in drawn]
    assert min(durations) < LEASE_S < max(durations), "links cut within the lease and beyond it"
    cut = {(f.role, f.target == -1) for _, f in drawn if f.args["mode"] in ("drop", "drop_in", "drop_out")}
    assert {("controller", True), ("broker", False)} <= cut, "the active controller's link and a broker's are cut"


def test_the_store_faults_are_drawn_from_the_seed_alone() -> None:
    first = generate(42, operations=12, brokers=2, fault_rate=0.5, crash_points=POINTS, store_faults=True)
    again = generate(42, operations=12, brokers=2, fault_rate=0.5, crash_points=POINTS, store_faults=True)
    assert first == again


def test_the_lease_the_pauses_are_drawn_against_is_the_runs_lease() -> None:
    assert CONTROLLER_SETTINGS["controller"]["lease_ttl_ms"] == LEASE_S * 1000


def test_a_replication_factor_draws_the_same_scenario_and_is_capped_at_the_broker_count() -> None:
    for seed in (1, 2, 3, 104):
        plain = generate(seed, operations=12, brokers=3, fault_rate=0.5, crash_points=POINTS)
        replicated = generate(seed, operations=12, brokers=3, fault_rate=0.5, crash_points=POINTS, replication_factor=3)
        assert (replicated.ops, replicated.faults) == (plain.ops, plain.faults), seed
        assert (plain.replication_factor, replicated.replication_factor) == (1, 3)
    assert generate(1, brokers=2, replication_factor=3).replication_factor == 2
    with pytest.raises(ValueError, match="at least 1"):
        generate(1, replication_factor=0)


def test_topics_require_two_in_sync_replicas_from_factor_3_only() -> None:
    assert generate(1, brokers=3, replication_factor=3).topic_configs() == {"min.insync.replicas": "2"}
    assert generate(1, brokers=5, replication_factor=5).topic_configs() == {"min.insync.replicas": "2"}
    assert generate(1, brokers=3, replication_factor=2).topic_configs() == {}
    assert generate(1, brokers=2, replication_factor=3).topic_configs() == {}, "capped at 2 brokers: factor 2"
    assert generate(1, brokers=3).topic_configs() == {}


def test_brokers_drop_a_lagging_follower_within_the_runs_pauses_only_with_replicas(tmp_path: Path) -> None:
    single = Rig(tmp_path, generate(1, brokers=3)).broker_settings()
    assert single["broker"] == FAST_BROKER["broker"], "RF 1 runs as it always ran"
    replicated = Rig(tmp_path, generate(1, brokers=3, replication_factor=3)).broker_settings()
    assert replicated["broker"] == {**FAST_BROKER["broker"], "replica_lag_time_max_ms": REPLICA_LAG_MS}


def test_an_s3_hang_holds_requests_past_the_read_timeout_the_runs_brokers_are_given(tmp_path: Path) -> None:
    settings = Rig(tmp_path, generate(1, brokers=3)).broker_settings()
    assert settings["s3"] == {"read_timeout_s": S3_READ_TIMEOUT_S}
    hangs = [
        f
        for seed in SEEDS
        for f in generate(seed, crash_points=POINTS).faults
        if f.kind == "s3" and f.args["fault"] == "hang"
    ]
    assert len(hangs) > 10
    assert all(S3_READ_TIMEOUT_S < f.args["delay_s"] <= S3_READ_TIMEOUT_S * 3 for f in hangs)


def test_a_long_scenario_draws_from_its_own_topic_names_and_three_are_the_names_every_seed_drew() -> None:
    long = generate(7, operations=100, brokers=4, controllers=3, crash_points=POINTS, topics=10)
    assert long.topic_names == tuple(f"chaos-{i}" for i in range(10))
    used = {op.topic for op in long.ops if op.topic}
    assert used <= set(long.topic_names) and len(used) > 3, "more names than a default run has"
    assert all(f.target < 3 for f in long.faults if f.role == "controller")
    assert generate(7, crash_points=POINTS, topics=3) == generate(7, crash_points=POINTS)
    for bad in (0, 11):
        with pytest.raises(ValueError, match="1 to 10 topics"):
            generate(7, topics=bad)


def _without_io_errors(seed: int) -> Scenario:
    """The scenario as drawn with the main random stream alone (the second stream never says EIO)."""
    real = random.Random

    def stream(key: object) -> object:
        return mock.Mock(random=lambda: 1.0) if isinstance(key, str) and key.endswith(DISK_EIO) else real(key)

    with mock.patch.object(scenario_module.random, "Random", stream):
        return generate(seed, crash_points=POINTS, disk_faults=True)
