"""``make demo`` end to end, as a newcomer runs it: ``python -m orchestrator.demo`` in a fresh directory with
nothing in the environment but HOME and PATH (no AWS_* variables: the local cluster's embedded S3 takes its own key
pair), its stdout a pipe. It starts a real local cluster (separate processes) and a local Spark, and must stop every
process it started; the test purges the cluster whatever happened.

The demo has no size of its own to shrink: ``make test`` and ``make soak`` (soak marker) run it whole, as
``make demo`` runs it."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from tests.support.newcomer_home import newcomer_home

pytestmark = [pytest.mark.spark, pytest.mark.soak, pytest.mark.timeout(600)]

DEMO_TIMEOUT_S = 540
SCAN_TOTALS = re.compile(r"^\d+ objects, [\d.]+ \S+; reclaimable [\d.]+ \S+ \(.+\); \d+ malformed inventory rows; ")


def _printed_commands(lines: list[str]) -> list[str]:
    return [line.split("$ tieredctl ", 1)[1].strip() for line in lines if "$ tieredctl " in line]


def _after_demo_commands(stdout: str) -> list[str]:
    """The commands the demo prints for after it ends: 'cluster up' of its directory, then the reclaim dry run."""
    printed = _printed_commands(stdout.splitlines())
    reclaim = next(i for i, c in enumerate(printed) if c.startswith("reclaim "))
    assert printed[reclaim - 1].startswith("cluster up "), printed
    return printed[reclaim - 1 : reclaim + 1]


def test_make_demo_runs_end_to_end_with_a_clean_environment(tmp_path: Path) -> None:
    home = newcomer_home(tmp_path / "home")
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    demo_dir = tmp_path / "var" / "demo"
    try:
        command = [sys.executable, "-m", "orchestrator.demo"]
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S)
        state = LocalClusterState.load_if_present(demo_dir)
        left_running = [p for p in state.processes if lc.is_ours(p)] if state is not None else []
        # What the demo says to do afterwards works: resume its cluster, then reclaim what the scan found.
        tieredctl = [sys.executable, "-m", "orchestrator.cli"]
        after = [
            subprocess.run([*tieredctl, *shlex.split(c)], cwd=tmp_path, env=env, capture_output=True, text=True)
            for c in _after_demo_commands(proc.stdout)
        ]
    finally:
        if LocalClusterState.load_if_present(demo_dir) is not None:
            lc.down(demo_dir, purge=True)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout[-4000:]}\nstderr: {proc.stderr[-4000:]}"
    assert "demo complete" in lines[-1]

    # The scan's totals, one line: "211 objects, 1.1 MiB; reclaimable 454.2 KiB (...); 0 malformed inventory rows; ..."
    totals = [line for line in lines if SCAN_TOTALS.match(line)]
    assert len(totals) == 1, proc.stdout
    reclaimable = re.search(r"reclaimable ([\d.]+) ", totals[0])
    assert reclaimable and float(reclaimable.group(1)) > 0

    reports = [line.split("HTML report with the chart: ", 1)[1].strip() for line in lines if "HTML report" in line]
    assert len(reports) == 1 and (tmp_path / reports[0]).is_file(), reports

    # Every command the demo prints is whole on its line and is a real tieredctl command line.
    commands = _printed_commands(lines)
    assert any(c.startswith("scan run ") and "--grace" in c for c in commands), commands
    for printed in commands:
        result = CliRunner().invoke(cli, [*shlex.split(printed), "--help"])
        assert result.exit_code == 0, f"the demo prints 'tieredctl {printed}': {result.output}"
    assert state is not None and left_running == []  # the demo stopped its own cluster (and kept its data)
    assert [r.returncode for r in after] == [0, 0], [r.stderr for r in after]
    would_delete = re.search(r"would delete (\d+) objects", after[1].stdout)
    assert would_delete and int(would_delete.group(1)) > 0, after[1].stdout  # the restart kept the scanned objects as
    # they were (same bytes, same time): reclaim finds them unchanged since the scan
