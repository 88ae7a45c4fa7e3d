"""The fault injector's rules for one broker's disk, on a stand-in rig (no cluster: the disk fault is the I/O error
switch file, which needs no root and no process): a fault due while another holds the disk waits for that one's
timer and is injected, so the schedule a seed draws is the one it runs; a lift that never comes skips it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaos import fault_injection
from chaos.fault_injection import FaultInjector
from chaos.history import History
from chaos.io_errors import switch_file
from chaos.scenario import DISK_EIO, Fault
from orchestrator.local.state import ProcessInfo

pytestmark = pytest.mark.unit


@dataclass
class StandInRig:
    cluster_dir: Path
    sized_disks: dict[int, object] = field(default_factory=dict)
    io_errors_refused: str | None = None

    def process(self, role: str, ident: int) -> ProcessInfo:
        return ProcessInfo(role, ident, pid=0, port=0, config=None, log="")  # not running: nothing to kill


@pytest.fixture
def injector(tmp_path: Path) -> FaultInjector:
    (tmp_path / "data" / "broker-1").mkdir(parents=True)
    rig = StandInRig(tmp_path)
    return FaultInjector(rig, History(), tmp_path / "crash-points.jsonl")  # type: ignore[arg-type]


def _eio(at: int, duration_s: float) -> Fault:
    return Fault(at, DISK_EIO, "broker", 1, {"duration_s": duration_s})


def test_a_disk_fault_due_while_another_holds_the_disk_waits_for_its_lift_and_is_injected(
    injector: FaultInjector, tmp_path: Path
) -> None:
    switch = switch_file(tmp_path / "data" / "broker-1")
    injector.inject(_eio(1, 0.2))
    assert switch.exists()
    injector.inject(_eio(2, 0.2))  # returns once the first is lifted and the second in place
    types = [e["type"] for e in injector.history.events]
    assert types == ["fault", "fault", "fault_lifted", "fault_waited"], types
    assert injector.injected[DISK_EIO] == 2 and injector.injected[f"{DISK_EIO} skipped"] == 0
    assert switch.exists(), "the second fault holds the disk"
    injector.release_disks()
    assert not switch.exists()


def test_a_disk_fault_whose_lift_never_comes_makes_the_next_one_skipped_naming_why(
    injector: FaultInjector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fault_injection, "DISK_LIFT_GRACE_S", 0.05)
    monkeypatch.setattr(injector, "_later", lambda seconds, fn: None)  # no timer: the lift never comes
    injector.inject(_eio(1, 0.0))
    injector.inject(_eio(2, 0.0))
    skipped = injector.history.of_type("fault_skipped")
    why = f"its disk is faulted already ({DISK_EIO}) and the fault was not lifted in time"
    assert [s["why"] for s in skipped] == [why]
    assert injector.injected[DISK_EIO] == 1 and injector.injected[f"{DISK_EIO} skipped"] == 1
    injector.release_disks()


def test_a_broker_that_halts_the_moment_its_disk_faults_is_counted_as_halted_by_that_fault(
    injector: FaultInjector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matrix seed 22: broker 3 halted 19 ms after its disk turned read-only, before the injector looked whether it
    ran, and its exit was reported as killed by no fault of the run."""
    log = tmp_path / "broker-1.log"
    log.write_text('{"event": "log_dir.failed", "broker_id": 1}\n')
    broker = ProcessInfo("broker", 1, pid=4242, port=0, config="broker-1.toml", log=str(log))
    monkeypatch.setattr(injector.rig, "process", lambda role, ident: broker)
    switch = switch_file(tmp_path / "data" / "broker-1")
    monkeypatch.setattr(fault_injection, "is_ours", lambda p: not switch.exists())  # it halts as the fault lands
    injector.inject(_eio(1, 0.2))
    assert injector._halted_on_disk(broker)
    assert injector.injected[f"{DISK_EIO} halted"] == 1
    injector.release_disks()
