"""The coverage table of ``python -m chaos``: one row per fault kind and crash point, one column per store and
security that ran, with hit counts; what never happened shows as 0, what cannot happen as ``-``."""

from __future__ import annotations

from collections import Counter

import pytest

from chaos.coverage import NOT_APPLICABLE, Config, Coverage, fault_rows
from chaos.scenario import DISK_FAULT_KINDS, DISK_LOST, FAULT_KINDS, STORE_FAULT_KINDS

pytestmark = pytest.mark.unit

SQLITE, POSTGRES_SECURE = Config("sqlite", secure=False), Config("postgresql", secure=True)
POINTS = ["broker.before_disable_ack", "controller.mid_snapshot"]


def rows_of(coverage: Coverage) -> tuple[list[str], dict[str, list[str]]]:
    header, rows = coverage.table(POINTS)
    return header, {row[0]: row[1:] for row in rows}


def test_counts_add_up_per_configuration_with_one_column_each() -> None:
    coverage = Coverage()
    coverage.add(SQLITE, Counter(kill=2, **{"s3 slowdown served": 5}), ["controller.mid_snapshot"])
    coverage.add(SQLITE, Counter(kill=1), [])
    coverage.add(
        POSTGRES_SECURE, Counter(postgres_pause=2, postgres_restart=1, postgres_link=3), ["controller.mid_snapshot"] * 2
    )
    header, rows = rows_of(coverage)
    assert header == ["fault", "postgresql secure RF 1 (1 seeds)", "sqlite plain RF 1 (2 seeds)"]
    assert rows["kill"] == ["0", "3"]
    assert rows["s3 slowdown served"] == ["0", "5"]
    assert rows["postgres_pause"] == ["2", NOT_APPLICABLE]
    assert rows["postgres_restart"] == ["1", NOT_APPLICABLE]
    assert rows["postgres_restart skipped"] == ["0", NOT_APPLICABLE]
    assert rows["postgres_link"] == ["3", NOT_APPLICABLE] and "postgres_link skipped" not in rows
    assert rows["crash point controller.mid_snapshot"] == ["2", "1"]
    assert rows["crash point broker.before_disable_ack"] == ["0", "0"]


def test_each_replication_factor_run_is_a_column_of_its_own_that_names_it() -> None:
    coverage = Coverage()
    replicated = Config("sqlite", secure=False, replication_factor=3)
    coverage.add(SQLITE, Counter(kill=1), [])
    coverage.add(replicated, Counter(kill=2, pause=1), [])
    header, rows = rows_of(coverage)
    assert header == ["fault", "sqlite plain RF 1 (1 seeds)", "sqlite plain RF 3 (1 seeds)"]
    assert rows["kill"] == ["1", "2"] and rows["pause"] == ["0", "1"]


def test_every_known_fault_and_crash_point_has_a_row_even_if_never_hit() -> None:
    coverage = Coverage()
    coverage.add(SQLITE, Counter(), [])
    _, rows = rows_of(coverage)
    assert set(fault_rows()) | {f"crash point {p}" for p in POINTS} == set(rows)
    assert {*FAULT_KINDS, *STORE_FAULT_KINDS, *DISK_FAULT_KINDS} <= set(rows)
    not_here = (*STORE_FAULT_KINDS, *DISK_FAULT_KINDS, DISK_LOST)  # on SQLite, in a run without disk faults
    assert all(cells == ["0"] for kind, cells in rows.items() if not kind.startswith(not_here))
    assert all(cells == ["-"] for kind, cells in rows.items() if kind.startswith(not_here))


def test_disk_faults_are_counted_only_in_a_run_that_had_them_and_its_column_says_so() -> None:
    coverage = Coverage()
    disk = Config("sqlite", False, 1, True)
    coverage.add(SQLITE, Counter(kill=1), [])
    coverage.add(
        disk,
        Counter({"disk_readonly": 2, "disk_readonly skipped": 1, "disk_readonly halted": 1, "disk_full": 1}),
        [],
    )
    header, rows = rows_of(coverage)
    assert header[1:] == ["sqlite plain RF 1 (1 seeds)", "sqlite plain RF 1 disk (1 seeds)"]
    assert rows["disk_readonly"] == ["-", "2"] and rows["disk_readonly skipped"] == ["-", "1"]
    assert rows["disk_readonly halted"] == ["-", "1"] and rows["kill"] == ["1", "0"]
    assert rows["disk_full"] == ["-", "1"] and rows["disk_full halted"] == ["-", "0"]


def test_lost_disks_are_counted_only_in_a_run_with_disk_faults_and_replicas() -> None:
    coverage = Coverage()
    coverage.add(Config("sqlite", False, 1, True), Counter(), [])
    coverage.add(Config("sqlite", False, 3, True), Counter({"disk_lost": 2}), [])
    _, rows = rows_of(coverage)
    assert rows["disk_lost"] == ["-", "2"] and rows["disk_lost skipped"] == ["-", "0"]


def test_a_fault_or_crash_point_this_module_does_not_know_still_gets_a_row() -> None:
    coverage = Coverage()
    coverage.add(SQLITE, Counter(clock_jump=3), ["broker.new_point"])
    _, rows = rows_of(coverage)
    assert rows["clock_jump"] == ["3"]
    assert rows["crash point broker.new_point"] == ["1"]


def test_nothing_run_is_a_table_without_columns() -> None:
    header, rows = Coverage().table(POINTS)
    assert header == ["fault"]
    assert all(len(row) == 1 for row in rows)
