"""Every run's durations report: what it holds, how old ones go, and the list of the slowest."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.durations import (
    KEEP,
    CpuTimes,
    DurationsReport,
    ReferenceSampler,
    Timed,
    busy_fraction,
    parse_proc_stat,
    reference_summary,
    reference_workload,
    render,
    reports,
    slowest,
    write_report,
)

pytestmark = pytest.mark.unit


def _report(**times: float) -> dict[str, object]:
    tests = [{"nodeid": n, "outcome": "passed", "worker": "gw0", "total_s": s} for n, s in times.items()]
    return {"started_at": "2026-11-28T00:00:00Z", "wall_s": 12.5, "workers": 2, "exit_status": 0, "tests": tests}


def test_a_tests_phases_add_up_and_the_worst_outcome_is_its_outcome() -> None:
    timed = Timed("tests/x.py::t", "gw1")
    timed.add("setup", 1.5, "passed")
    timed.add("call", 2.25, "failed")
    timed.add("teardown", 0.25, "passed")
    assert timed.as_json() == {
        "nodeid": "tests/x.py::t",
        "outcome": "failed",
        "worker": "gw1",
        "setup_s": 1.5,
        "call_s": 2.25,
        "teardown_s": 0.25,
        "total_s": 4.0,
    }


def test_a_skip_in_setup_is_the_outcome_of_a_test_that_never_ran() -> None:
    timed = Timed("tests/x.py::t")
    timed.add("setup", 0.0, "skipped")
    timed.add("teardown", 0.0, "passed")
    assert timed.as_json()["outcome"] == "skipped"


def test_the_slowest_come_first_and_ties_in_name_order() -> None:
    report = _report(a=1.0, b=3.0, c=3.0, d=0.5)
    assert [t["nodeid"] for t in slowest(report, 3)] == ["b", "c", "a"]


def test_the_listing_says_the_run_and_one_line_per_test() -> None:
    lines = render(_report(a=1.0, b=3.0), 1).splitlines()
    assert lines[0] == (
        "run of 2026-11-28T00:00:00Z: 2 tests, 12.5 s wall clock, 4.0 s of test time, 2 worker(s), exit status 0"
    )
    assert lines[2] == "     3.00  gw0     b" and len(lines) == 3


def test_reports_are_named_by_start_time_kept_apart_in_the_same_second_and_the_oldest_go(tmp_path: Path) -> None:
    fields = {"wall_s": 1.0, "args": [], "workers": 0, "exit_status": 0, "tests": []}
    first = write_report(tmp_path, started_wall=1_764_288_000.0, **fields)
    again = write_report(tmp_path, started_wall=1_764_288_000.0, **fields)
    assert (first.name, again.name) == ("durations-20251128T000000Z.json", "durations-20251128T000000Z-2.json")
    assert json.loads(first.read_text())["started_at"] == "2025-11-28T00:00:00Z"
    for n in range(KEEP + 3):
        write_report(tmp_path, started_wall=1_764_288_001.0 + n, **fields)
    kept = reports(tmp_path)
    newest = time.strftime("durations-%Y%m%dT%H%M%SZ.json", time.gmtime(1_764_288_001 + KEEP + 2))
    assert len(kept) == KEEP and first not in kept and kept[-1].name == newest


PROC_STAT_FIRST_LINE = "cpu  4705 150 1120 16250 520 0 45 0 0 0\ncpu0 2350 75 560 8125 260 0 22 0 0 0\n"


def test_the_machines_cpu_times_are_read_from_proc_stats_first_line_idle_and_iowait_counting_as_idle() -> None:
    assert parse_proc_stat(PROC_STAT_FIRST_LINE) == CpuTimes(total=4705 + 150 + 1120 + 16250 + 520 + 45, idle=16770)
    with pytest.raises(ValueError, match="not /proc/stat"):
        parse_proc_stat("intr 1 2 3\n")


def test_busy_is_the_share_of_the_cores_time_not_idle_and_nothing_when_no_time_passed() -> None:
    before = CpuTimes(total=1000, idle=600)
    assert busy_fraction(before, CpuTimes(total=1400, idle=700)) == 0.75
    assert busy_fraction(before, before) is None


def test_the_listing_says_how_busy_the_cpus_were_when_the_report_knows() -> None:
    report = {**_report(a=1.0), "cpu_busy": 0.671}
    assert render(report, 1).splitlines()[0].endswith("2 worker(s), CPU 67% busy, exit status 0")


def test_the_reference_workload_is_fixed_so_references_compare_across_runs() -> None:
    assert reference_workload(1000) == 738677  # a changed workload makes older reports' references meaningless
    assert reference_workload() == 849698


def test_the_reference_is_sampled_at_the_start_and_at_the_end_with_the_seconds_into_the_run() -> None:
    ticks = iter([100.0, 100.0, 160.5])  # the start; the first sample; the last one
    measured = iter([0.05, 0.08])
    sampler = ReferenceSampler(every_s=3600, measure=lambda: next(measured), clock=lambda: next(ticks))
    assert sampler.stop() == [[0.0, 0.05], [60.5, 0.08]]


def test_the_listing_says_how_fast_the_machine_was_when_the_report_knows() -> None:
    report = {**_report(a=1.0), "reference_cpu_s": [[0.0, 0.05], [30.0, 0.09], [61.2, 0.06]]}
    first = render(report, 1).splitlines()[0]
    assert "2 worker(s), reference 0.060 s CPU (median of 3; 0.050-0.090), exit status 0" in first
    assert reference_summary([[0.0, 0.1]]) == "reference 0.100 s CPU (median of 1; 0.100-0.100)"


def test_a_session_that_ran_nothing_writes_no_report_and_still_ends_the_reference_thread(tmp_path: Path) -> None:
    plugin = DurationsReport([], directory=tmp_path)
    assert plugin.reference.running
    plugin.pytest_sessionfinish(session=None, exitstatus=5)  # --collect-only, or nothing selected
    assert not plugin.reference.running
    assert list(tmp_path.iterdir()) == []
