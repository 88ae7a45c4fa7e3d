"""Named crash points: what the environment arms (and the clear refusal of a typo), hit counting, and, in real
subprocesses, that an armed point is a SIGKILL at exactly its N-th hit with its record line on disk first, while an
unarmed process runs through every point untouched."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orchestrator import crash_points
from orchestrator.errors import SettingsError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "orchestrator", ROOT / "remote_storage", ROOT / "policies"]
POINT = "broker.mid_delete_batch"
OTHER = "controller.after_epoch_bump"


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    crash_points.disarm()
    yield
    crash_points.disarm()


def _run(script: str, env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter with ``env`` added to this one's environment (minus any arming of ours)."""
    ours = (crash_points.ENV_VAR, crash_points.STOP_ENV_VAR, crash_points.RECORD_ENV_VAR)
    base = {k: v for k, v in os.environ.items() if k not in ours}
    command = [sys.executable, "-c", script]
    return subprocess.run(command, env=base | env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


# -- what the environment arms ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "armed"),
    [
        ("", {}),
        (POINT, {POINT: 1}),
        (f"{POINT}@3", {POINT: 3}),
        (f" {POINT} @ 2 , {OTHER}", {POINT: 2, OTHER: 1}),
        (f"{POINT},,{OTHER}@7,", {POINT: 1, OTHER: 7}),
    ],
)
@pytest.mark.unit
def test_the_variable_names_points_each_with_the_hit_that_fires_it(value: str, armed: dict[str, int]) -> None:
    assert crash_points.parse(value) == armed


@pytest.mark.unit
def test_an_unknown_point_is_refused_with_every_known_one_named() -> None:
    with pytest.raises(SettingsError) as caught:
        crash_points.parse(f"{POINT},broker.mid_delete_bach@2")
    message = str(caught.value)
    assert "'broker.mid_delete_bach'" in message and crash_points.ENV_VAR in message
    assert all(name in message for name in crash_points.POINTS)


@pytest.mark.unit
@pytest.mark.parametrize("hit", ["0", "-1", "two", "", "1.5"])
def test_a_hit_that_is_not_a_whole_number_from_one_is_refused(hit: str) -> None:
    with pytest.raises(SettingsError, match="whole number >= 1"):
        crash_points.parse(f"{POINT}@{hit}")


@pytest.mark.unit
def test_a_point_named_twice_is_refused() -> None:
    with pytest.raises(SettingsError, match="named twice"):
        crash_points.parse(f"{POINT},{OTHER},{POINT}@2")


@pytest.mark.unit
def test_arming_from_the_environment_replaces_what_was_armed_and_says_so_in_the_log(tmp_path: Path) -> None:
    crash_points.arm({OTHER: 1})
    record = tmp_path / "crashes.jsonl"
    env = {crash_points.ENV_VAR: f"{POINT}@4", crash_points.RECORD_ENV_VAR: str(record)}
    with capture_logs() as logs:
        assert crash_points.arm_from_env(env) == {POINT: 4}
    assert [e["event"] for e in logs] == ["fault.crash_points_armed"] and logs[0]["points"] == {POINT: 4}
    crash_points.reached(OTHER)  # no longer armed: returns
    assert crash_points.hits(OTHER) == 0
    with capture_logs() as logs:
        assert crash_points.arm_from_env({}) == {}
    assert logs == []


# -- reaching a point ---------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_reaching_an_armed_point_counts_its_hits_until_the_one_that_fires() -> None:
    crash_points.arm({POINT: 5})
    for _ in range(4):
        crash_points.reached(POINT)
        crash_points.reached(OTHER)  # not armed: not counted
    assert crash_points.hits(POINT) == 4 and crash_points.hits(OTHER) == 0
    crash_points.arm({POINT: 5})  # arming again starts the count again
    assert crash_points.hits(POINT) == 0


@pytest.mark.unit
def test_an_undeclared_point_is_a_programming_error_armed_or_not() -> None:
    with pytest.raises(ValueError, match=r"undeclared crash point 'broker\.nowhere'"):
        crash_points.reached("broker.nowhere")
    with pytest.raises(SettingsError):
        crash_points.arm({"broker.nowhere": 1})


@pytest.mark.unit
def test_every_declared_point_is_placed_in_the_code_and_every_placed_one_is_declared() -> None:
    text = "\n".join(p.read_text() for root in SOURCES for p in root.rglob("*.py") if p.name != "crash_points.py")
    placed = set(re.findall(r'(?:reached\(|crash_point=)"([a-z_]+\.[a-z_]+)"', text))
    assert placed == set(crash_points.POINTS)
    for name in set(crash_points.POINTS) - crash_points.STOP_ONLY:
        assert name.split(".", 1)[0] in ("controller", "broker"), "the chaos runner picks the role from the prefix"
    assert set(crash_points.POINTS) >= crash_points.STOP_ONLY


# -- in a real process ----------------------------------------------------------------------------------------------

_REACH_FIVE_TIMES = f"""
import os, sys
from orchestrator import crash_points
crash_points.arm_from_env(os.environ)
print("pid", os.getpid(), flush=True)
for i in range(1, 6):
    print("before", i, flush=True)
    crash_points.reached({POINT!r})
    crash_points.reached({OTHER!r})
print("finished", flush=True)
"""


@pytest.mark.integration
def test_an_armed_point_kills_the_process_at_its_nth_hit_after_appending_its_record(tmp_path: Path) -> None:
    record = tmp_path / "crashes.jsonl"
    record.write_text('{"point": "an earlier line", "pid": 1, "hit": 1, "time_ms": 0}\n')
    env = {crash_points.ENV_VAR: f"{POINT}@3", crash_points.RECORD_ENV_VAR: str(record)}
    proc = _run(_REACH_FIVE_TIMES, env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    out = proc.stdout.splitlines()
    pid = next(int(line.split()[1]) for line in out if line.startswith("pid "))
    assert "before 3" in out and "before 4" not in out and "finished" not in out
    lines = record.read_text().splitlines()
    assert len(lines) == 2, "appended to what was there"
    entry = json.loads(lines[1])
    assert entry["point"] == POINT and entry["pid"] == pid and entry["hit"] == 3 and entry["time_ms"] > 0
    assert re.search(r"fault\.crash_point\b(?!s)", proc.stdout), "logged before the kill"


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.integration
def test_a_point_armed_to_stop_freezes_the_process_there_until_sigcont(tmp_path: Path) -> None:
    record = tmp_path / "crashes.jsonl"
    ours = (crash_points.ENV_VAR, crash_points.STOP_ENV_VAR, crash_points.RECORD_ENV_VAR)
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env |= {crash_points.STOP_ENV_VAR: f"{POINT}@2", crash_points.RECORD_ENV_VAR: str(record)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _REACH_FIVE_TIMES], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        while "before 2" not in seen and len(seen) < 20:  # then it stops (log lines come between)
            seen.append(proc.stdout.readline().strip())
        assert [line for line in seen if line.startswith("before")] == ["before 1", "before 2"]
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # the event: the child stopped
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP, "stopped at its second hit"
        assert _process_state(proc.pid) == "T"
        entry = json.loads(record.read_text())
        assert (entry["point"], entry["hit"], entry["action"]) == (POINT, 2, "stop")
        os.kill(proc.pid, signal.SIGCONT)
        rest = [line for line in proc.stdout.read().splitlines() if line.startswith(("before", "finished"))]
        assert proc.wait(timeout=60) == 0
        assert rest == ["before 3", "before 4", "before 5", "finished"], "went on from the point"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.unit
def test_a_point_cannot_be_armed_both_to_kill_and_to_stop() -> None:
    with pytest.raises(SettingsError, match="both to kill and to stop"):
        crash_points.arm({POINT: 1}, stops={POINT: 2})
    with pytest.raises(SettingsError, match=crash_points.STOP_ENV_VAR):
        crash_points.arm_from_env({crash_points.STOP_ENV_VAR: "broker.nowhere"})


@pytest.mark.unit
def test_a_call_sites_detail_is_asked_for_only_by_the_hit_that_fires() -> None:
    asked: list[int] = []

    def detail() -> dict[str, object]:
        asked.append(1)
        return {"segments": ["a"]}

    crash_points.reached(POINT, detail)  # unarmed
    crash_points.arm({POINT: 3})
    crash_points.reached(POINT, detail)
    crash_points.reached(POINT, detail)
    assert asked == [] and crash_points.hits(POINT) == 2


@pytest.mark.integration
def test_the_record_line_carries_what_the_call_site_was_working_on(tmp_path: Path) -> None:
    script = f"""
import os
from orchestrator import crash_points
crash_points.arm_from_env(os.environ)
for i in range(3):
    crash_points.reached({POINT!r}, lambda i=i: {{"batch": i, "segments": [f"s{{i}}a", f"s{{i}}b"]}})
"""
    record = tmp_path / "crashes.jsonl"
    proc = _run(script, {crash_points.ENV_VAR: f"{POINT}@2", crash_points.RECORD_ENV_VAR: str(record)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    [line] = record.read_text().splitlines()
    entry = json.loads(line)
    assert (entry["hit"], entry["detail"]) == (2, {"batch": 1, "segments": ["s1a", "s1b"]})


@pytest.mark.integration
def test_the_record_file_is_created_owner_only_when_missing(tmp_path: Path) -> None:
    record = tmp_path / "crashes.jsonl"
    proc = _run(_REACH_FIVE_TIMES, {crash_points.ENV_VAR: POINT, crash_points.RECORD_ENV_VAR: str(record)})
    assert proc.returncode == -signal.SIGKILL
    assert json.loads(record.read_text())["hit"] == 1
    assert record.stat().st_mode & 0o077 == 0


@pytest.mark.integration
def test_a_process_armed_without_a_record_file_still_dies_at_the_point(tmp_path: Path) -> None:
    proc = _run(_REACH_FIVE_TIMES, {crash_points.ENV_VAR: f"{OTHER}@2"})
    assert proc.returncode == -signal.SIGKILL
    assert "before 2" in proc.stdout.splitlines() and "before 3" not in proc.stdout


@pytest.mark.integration
def test_an_unarmed_process_runs_through_every_point(tmp_path: Path) -> None:
    record = tmp_path / "crashes.jsonl"
    proc = _run(_REACH_FIVE_TIMES, {crash_points.RECORD_ENV_VAR: str(record)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "finished"
    assert not record.exists()


@pytest.mark.integration
def test_threads_racing_to_a_point_kill_the_process_exactly_once_at_the_nth_hit(tmp_path: Path) -> None:
    script = f"""
import os, threading
from orchestrator import crash_points
crash_points.arm_from_env(os.environ)
go = threading.Barrier(8)
def reach():
    go.wait()
    for _ in range(100):
        crash_points.reached({POINT!r})
threads = [threading.Thread(target=reach) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("finished", flush=True)
"""
    record = tmp_path / "crashes.jsonl"
    proc = _run(script, {crash_points.ENV_VAR: f"{POINT}@500", crash_points.RECORD_ENV_VAR: str(record)})
    assert proc.returncode == -signal.SIGKILL and "finished" not in proc.stdout
    [line] = record.read_text().splitlines()
    assert json.loads(line)["hit"] == 500


@pytest.mark.integration
@pytest.mark.parametrize("role", ["controller", "broker"])
def test_a_typo_in_the_variable_stops_a_controller_or_broker_before_it_reads_its_settings(
    role: str, tmp_path: Path
) -> None:
    settings = tmp_path / "settings.toml"  # empty: never read, the arming is checked first
    settings.write_text("")
    script = "from orchestrator.cli import main; main()"
    env = {crash_points.ENV_VAR: "controller.after_epoch_bum"}
    base = {k: v for k, v in os.environ.items() if k != crash_points.ENV_VAR}
    command = [sys.executable, "-c", script, role, "start", "--config", str(settings)]
    proc = subprocess.run(command, env=base | env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "INVALID_SETTINGS" in proc.stderr and "'controller.after_epoch_bum'" in proc.stderr, proc.stderr
    assert "controller.after_epoch_bump" in proc.stderr, "the message names the known points"
