"""Where a test run's time went: every run writes each test's durations to ``var/test-reports/`` (gitignored), and
``python -m tests.support.durations`` (``make slowest``) lists the slowest tests of the newest report.

The report is JSON, one file per run, named by its UTC start time::

    {"format": 1, "started_at": "2026-11-28T00:05:12Z", "wall_s": 431.2, "args": ["-n", "2", ...],
     "workers": 2, "exit_status": 0,
     "tests": [{"nodeid": "tests/...::test_x", "outcome": "passed", "worker": "gw1",
                "setup_s": 0.01, "call_s": 3.2, "teardown_s": 0.0, "total_s": 3.21}, ...]}

It is written by the process that reports to the terminal (the controller under pytest-xdist, which receives every
worker's reports), so a parallel run makes one report, like a serial one. ``total_s`` is setup + call + teardown:
a session fixture's start-up is charged to the first test that asked for it, as pytest's ``--durations`` does. The
newest ``KEEP`` reports are kept.

``cpu_busy`` is how busy the machine's cores were over the run (from ``/proc/stat``; null where it cannot be read):
well below 1.0 with every worker busy means the tests mostly wait (timeouts, polls, process start-ups), not compute.

``reference_cpu_s`` says how fast the machine was while the run went: the CPU seconds of one fixed pure-Python
workload (:func:`reference_workload`), measured at the start and then every ``REFERENCE_EVERY_S`` until the end,
as ``[seconds into the run, CPU seconds]``. The same suite at the same commit took from 10 to 17 minutes on this
machine: the reference says whether the interpreter itself ran slower (it does not see what leaves a process's CPU
time alone, such as a slow disk). It costs about a twentieth of a second each time, in the reporting process, which
the tests leave nearly idle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tests.support import REPO_ROOT

REPORT_DIR = REPO_ROOT / "var" / "test-reports"
KEEP = 50  # a day of make check runs must not push out the last full run
FORMAT = 1
PHASES = ("setup", "call", "teardown")
PROC_STAT = Path("/proc/stat")


class CpuTimes(NamedTuple):
    """The machine's CPU time so far, in clock ticks: all of it, and the idle part (idle + iowait)."""

    total: int
    idle: int


def parse_proc_stat(text: str) -> CpuTimes:
    """The first line of ``/proc/stat`` (``cpu  user nice system idle iowait irq softirq steal ...``); guest time
    is already inside user and nice, so it is not added again."""
    fields = text.splitlines()[0].split()
    if fields[0] != "cpu":
        raise ValueError(f"not /proc/stat's first line: {text[:60]!r}")
    ticks = [int(v) for v in fields[1:9]]
    return CpuTimes(total=sum(ticks), idle=ticks[3] + ticks[4])


def busy_fraction(before: CpuTimes, after: CpuTimes) -> float | None:
    """The fraction of the cores' time between two readings that was not idle (None: no time passed)."""
    total = after.total - before.total
    return None if total <= 0 else round(1.0 - (after.idle - before.idle) / total, 3)


def read_cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    try:
        return parse_proc_stat(path.read_text())
    except (OSError, ValueError, IndexError):
        return None


REFERENCE_EVERY_S = 30.0
REFERENCE_ROUNDS = 200_000


def reference_workload(rounds: int = REFERENCE_ROUNDS) -> int:
    """A fixed mix of what the tests' Python does most (integer arithmetic, dicts, strings); its result is returned
    so that nothing of it can be skipped."""
    table: dict[int, str] = {}
    acc = 0
    for i in range(rounds):
        acc = (acc * 31 + i) % 1_000_003
        table[acc % 4096] = f"{i}:{acc}"
    return acc + sum(len(v) for v in table.values())


def reference_cpu_s(workload: Callable[[], object] = reference_workload) -> float:
    """The CPU seconds this process spends on ``workload`` now."""
    started = time.process_time()
    workload()
    return round(time.process_time() - started, 4)


class ReferenceSampler:
    """:func:`reference_cpu_s` at the start, then every ``every_s`` (a daemon thread) until :meth:`stop`, which
    takes a last sample; each sample as ``[seconds since the start, CPU seconds]``."""

    def __init__(
        self,
        every_s: float = REFERENCE_EVERY_S,
        measure: Callable[[], float] = reference_cpu_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every_s, self._measure, self._clock = every_s, measure, clock
        self._started = clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.samples: list[list[float]] = []
        self._sample()
        self._thread = threading.Thread(target=self._run, name="durations-reference", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        cpu_s = self._measure()
        with self._lock:
            self.samples.append([round(self._clock() - self._started, 1), cpu_s])

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> list[list[float]]:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()
        with self._lock:
            return list(self.samples)


def reference_summary(samples: list[list[float]]) -> str:
    """``reference 0.104 s CPU (median of 21; 0.098-0.171)``: how fast the machine was over the run."""
    values = [cpu_s for _at, cpu_s in samples]
    median = statistics.median(values)
    return f"reference {median:.3f} s CPU (median of {len(values)}; {min(values):.3f}-{max(values):.3f})"


@dataclass
class Timed:
    nodeid: str
    worker: str = "main"
    outcome: str = "passed"
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float, outcome: str) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        # The worst phase outcome wins: a failed teardown fails a passed test; a skip in setup is the outcome.
        if outcome == "failed" or (outcome == "skipped" and self.outcome == "passed"):
            self.outcome = outcome

    def as_json(self) -> dict[str, Any]:
        times = {f"{phase}_s": round(self.seconds.get(phase, 0.0), 4) for phase in PHASES}
        total = round(sum(self.seconds.values()), 4)
        return {"nodeid": self.nodeid, "outcome": self.outcome, "worker": self.worker, **times, "total_s": total}


class DurationsReport:
    """The pytest plugin (registered by ``tests/conftest.py`` in the reporting process only)."""

    def __init__(self, args: list[str], directory: Path = REPORT_DIR) -> None:
        self.args = args
        self.directory = directory
        self.tests: dict[str, Timed] = {}
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.cpu_at_start = read_cpu_times()
        self.reference = ReferenceSampler()
        self.path: Path | None = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        times = self.tests.get(report.nodeid)
        if times is None:
            worker = getattr(getattr(report, "node", None), "gateway", None)
            times = self.tests[report.nodeid] = Timed(report.nodeid, worker.id if worker is not None else "main")
        times.add(report.when, float(report.duration), report.outcome)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        reference = self.reference.stop()  # whether or not there is a report: its thread ends with the session
        if not self.tests:  # --collect-only, or nothing selected: nothing ran, nothing to report
            return
        start, end = self.cpu_at_start, read_cpu_times()
        self.path = write_report(
            self.directory,
            started_wall=self.started_wall,
            wall_s=time.monotonic() - self.started,
            args=self.args,
            workers=int(getattr(session.config.option, "numprocesses", 0) or 0),
            exit_status=int(exitstatus),
            cpu_busy=busy_fraction(start, end) if start is not None and end is not None else None,
            reference_cpu_s=reference,
            tests=[t.as_json() for t in self.tests.values()],
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.path is not None:
            shown = self.path.relative_to(REPO_ROOT) if self.path.is_relative_to(REPO_ROOT) else self.path
            terminalreporter.write_line(f"durations of every test: {shown} (make slowest lists the 30 slowest)")


def write_report(directory: Path, *, started_wall: float, **fields: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started_wall))
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall))
    path = directory / f"durations-{stamp}.json"
    n = 1
    while path.exists():  # two runs started in the same second (make check beside make test)
        n += 1
        path = directory / f"durations-{stamp}-{n}.json"
    body = {"format": FORMAT, "started_at": started_at, **fields}
    body["wall_s"] = round(body["wall_s"], 2)
    path.write_text(json.dumps(body, indent=1) + "\n")
    for old in reports(directory)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def reports(directory: Path = REPORT_DIR) -> list[Path]:
    """Every report in the directory, oldest first (their names sort by start time)."""
    return sorted(directory.glob("durations-*.json"))


def slowest(report: dict[str, Any], top: int) -> list[dict[str, Any]]:
    return sorted(report["tests"], key=lambda t: (-t["total_s"], t["nodeid"]))[:top]


def render(report: dict[str, Any], top: int) -> str:
    tests = report["tests"]
    total = sum(t["total_s"] for t in tests)
    busy = report.get("cpu_busy")  # older reports have none
    cpu = "" if busy is None else f", CPU {busy:.0%} busy"
    samples = report.get("reference_cpu_s")  # older reports have none
    speed = f", {reference_summary(samples)}" if samples else ""
    lines = [
        f"run of {report['started_at']}: {len(tests)} tests, {report['wall_s']:.1f} s wall clock, "
        f"{total:.1f} s of test time, {report['workers'] or 1} worker(s){cpu}{speed}, "
        f"exit status {report['exit_status']}",
        f"{'seconds':>9}  {'worker':<6}  test",
    ]
    lines += [f"{t['total_s']:9.2f}  {t['worker']:<6}  {t['nodeid']}" for t in slowest(report, top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.durations", description=__doc__.split("\n")[0])
    parser.add_argument("report", nargs="?", type=Path, help="a report file (default: the newest)")
    parser.add_argument("--top", type=int, default=30, help="how many tests to list (default 30)")
    options = parser.parse_args(argv)
    path = options.report
    if path is None:
        found = reports()
        if not found:
            parser.error(f"no report in {REPORT_DIR}: run the tests first")
        path = found[-1]
    print(f"{path}:")
    print(render(json.loads(path.read_text()), options.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
