"""The faults of a chaos run, injected and lifted, and the control of its processes: who is down, paused or armed.

:meth:`FaultInjector.inject` applies one :class:`~chaos.scenario.Fault`: a SIGKILL (the process is restarted once the
run reaches the operation its ``restart_after`` names), a SIGSTOP (continued by a timer after ``duration_s``), a crash
point (every process of the role restarted armed with it), an S3 fault rule on the proxy or a mode on a link (each
lifted by a timer), a broker's data directory made read-only or full (:mod:`chaos.disk`) or failing with EIO
(:mod:`chaos.io_errors`), made whole again by a timer, or
lost (the broker SIGKILLed and its data directory emptied, restarted like a kill), or, when the store is the run's
PostgreSQL server (:mod:`chaos.store_server`), that server paused or stopped (continued or started again by a timer) or
one process's link to it faulted (:mod:`chaos.store_links`, passed again by a timer). :meth:`FaultInjector.revive`,
called around every operation and while healing, restarts what died at a crash point or is due back, and reports one
dead for no reason the run knows as an *unexpected exit* (a violation). :meth:`FaultInjector.lift_all` and
:meth:`FaultInjector.disarm` are healing's part.

Invariants:

* A process is restarted unarmed unless a crash point is being armed; the armed set is what still carries one.
* A crash point's record line is read only after its process was seen dead (it writes the line first, then dies),
  so a death at a crash point is never taken for an unexpected exit.
* The paused set and the S3 rules are changed under one lock: the timers that lift faults run on their own threads.
* A store fault asked while the server is still paused or down from another is skipped: recorded as such, and
  counted under ``<kind> skipped``, not as injected.
* Every timer started is cancelled by :meth:`FaultInjector.cancel_timers` (healing and the run's close call it); a
  pause lifted by healing is not lifted again by its timer.
* A disk fault (or a lost disk) due on a broker whose disk another fault still holds waits for that fault's timer to
  lift it, then is injected (``fault_waited`` in the history): the schedule a seed draws is what it runs, whatever the
  wall-clock time of the operations between. It is skipped only when the lift does not come within
  :data:`DISK_LIFT_GRACE_S` of its due time.
* A broker whose disk is read-only, full or failing is not restarted until the disk is back; one that died meanwhile
  and logged ``log_dir.failed`` halted as it must (counted as ``<kind> halted``, e.g. ``disk_eio halted``), not an
  unexpected exit. Every mount is
  released by healing and by :meth:`FaultInjector.release_disks` (the run's close), whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos import checker as ck
from chaos.disk import Ballast, DiskFaultRefused, ReadOnlyMount, empty_directory
from chaos.history import History
from chaos.io_errors import IoErrors
from chaos.link_proxy import LinkProxy
from chaos.rig import Rig
from chaos.s3_proxy import S3Fault
from chaos.scenario import DISK_EIO, DISK_FAULT_KINDS, DISK_LOST, STORE_FAULT_KINDS, Fault
from chaos.store_server import StoreFaultRefused
from orchestrator import crash_points
from orchestrator.errors import TieredError
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState, is_ours
from tests.support.postgres_server import PostgresUnavailable

DISK_LIFT_GRACE_S = 10.0  # how long past its due time a disk fault's lift is awaited by the next fault on that disk


class FaultInjector:
    def __init__(self, rig: Rig, history: History, crash_record: Path) -> None:
        self.rig = rig
        self.history = history
        self.crash_record = crash_record
        self.injected: Counter[str] = Counter()  # by kind (S3 faults served are counted by the proxy)
        self.unexpected: list[ck.Violation] = []
        self.crash_points_hit: list[str] = []
        self.op_index = 0  # the operation the run is at: a killed process is restarted this many operations on
        self._down: dict[tuple[str, int], int] = {}  # (role, id) -> op index from which it is restarted
        self._paused: set[tuple[str, int]] = set()
        self._armed: set[tuple[str, int]] = set()
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._s3_rules: dict[int, S3Fault] = {}
        self._crash_lines_seen = 0
        self._crashed_pids: set[int] = set()
        self._slots = 0
        # Brokers whose data directory is faulted now: (the fault's kind, what lifts it, when its timer lifts it, on
        # the monotonic clock); and those whose fault is being lifted (taken out of _disks, not released yet).
        self._disks: dict[tuple[str, int], tuple[str, ReadOnlyMount | Ballast | IoErrors, float]] = {}
        self._disks_releasing: set[tuple[str, int]] = set()
        self._disk_lifted = threading.Condition(self._lock)
        self._disk_pids: dict[int, str] = {}  # processes that ran on a faulted disk (may halt) -> the fault's kind

    # -- injecting ------------------------------------------------------------------------------------------------

    def _later(self, seconds: float, fn: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, fn)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def cancel_timers(self) -> None:
        for t in self._timers:
            t.cancel()

    def inject(self, f: Fault) -> None:
        self.injected[f.kind] += 1
        self.history.record("fault", kind=f.kind, role=f.role, target=f.target, **f.args)
        if f.kind in ("kill", "pause"):
            ident = self.rig.controller_id(f.target) if f.role == "controller" else f.target
            key = (f.role, ident)
            p = self.rig.process(*key)
            if not is_ours(p) or key in self._paused:
                return
            if f.kind == "kill":
                lc.kill_process(p)
                self._down[key] = self.op_index + f.args["restart_after"]
            else:
                os.kill(p.pid, signal.SIGSTOP)
                with self._lock:
                    self._paused.add(key)
                self._later(f.args["duration_s"], lambda: self._resume(key, p.pid))
        elif f.kind == "crash_point":
            point = f"{f.args['point']}@{f.args['hit']}"
            # Every process of the role is armed: which one reaches the moment first is up to the cluster.
            scenario = self.rig.scenario
            targets = (
                [("controller", lc.CONTROLLER_ID_BASE + i) for i in range(scenario.controllers)]
                if f.role == "controller"
                else [("broker", b) for b in range(1, scenario.brokers + 1)]
            )
            for key in targets:
                if key in self._paused or key in self._down or key in self._disks:
                    continue
                self._restart(key, armed=point)
        elif f.kind == "s3":
            proxy = self.rig.proxy
            assert proxy is not None
            rule = S3Fault(
                f.args["fault"],
                operation=f.args["operation"],
                probability=f.args["probability"],
                delay_s=f.args.get("delay_s", 0.0),
            )
            with self._lock:
                self._slots += 1
                slot = self._slots
                self._s3_rules[slot] = rule
                proxy.set_faults(list(self._s3_rules.values()))
            self._later(f.args["duration_s"], lambda: self._lift_s3(slot))
        elif f.kind == "link":
            link = self._link(f.args)
            link.set_mode(f.args["mode"], delay_s=f.args.get("delay_s", 0.0))
            self._later(f.args["duration_s"], lambda: link.set_mode("pass"))
        elif f.kind == "postgres_link":
            store_links = self.rig.store_links
            assert store_links is not None, "store link faults are drawn only when the run controls the server"
            ident = self.rig.controller_id(f.target) if f.role == "controller" else f.target
            store_link = store_links.links[(f.role, ident)]
            store_link.set_mode(f.args["mode"], delay_s=f.args.get("delay_s", 0.0))
            self._later(f.args["duration_s"], lambda: store_link.set_mode("pass"))
        elif f.kind in STORE_FAULT_KINDS:
            self._store_fault(f)
        elif f.kind in DISK_FAULT_KINDS:
            self._disk_fault(f)
        elif f.kind == DISK_LOST:
            self._lose_disk(f)

    def _lose_disk(self, f: Fault) -> None:
        """The broker killed and every file under its data directory deleted (the directory itself stays: it may be
        the mount point of the disk a ``disk_full`` run gave it); it is restarted ``restart_after`` operations on."""
        key = ("broker", f.target)
        directory = self.rig.cluster_dir / "data" / f"broker-{f.target}"
        why = self._await_disk(key)
        if why is None and key in self._paused:
            why = "it is paused"
        if why is None and not directory.is_dir():
            why = f"{directory} does not exist yet"
        if why is not None:
            self.injected[f.kind] -= 1
            self.injected[f"{f.kind} skipped"] += 1
            self.history.record("fault_skipped", kind=f.kind, why=why)
            return
        p = self.rig.process(*key)
        if is_ours(p):
            lc.kill_process(p)
        removed = empty_directory(directory)
        self.history.record("disk_wiped", role="broker", id=f.target, entries=removed)
        self._down[key] = self.op_index + f.args["restart_after"]

    def _disk_fault(self, f: Fault) -> None:
        key = ("broker", f.target)
        directory = self.rig.cluster_dir / "data" / f"broker-{f.target}"
        why = self._await_disk(key)
        if why is None and not directory.is_dir():
            why = f"{directory} does not exist yet"
        sized = self.rig.sized_disks.get(f.target)
        if why is None and f.kind == "disk_full" and sized is None:
            why = f"broker {f.target}'s data directory is not on a disk of its own (the run did not size it)"
        if why is None and f.kind == DISK_EIO and self.rig.io_errors_refused is not None:
            why = f"the cluster's processes run without the I/O error library: {self.rig.io_errors_refused}"
        # Whether the broker runs is looked at before its disk turns: one that halts at once on the fault (within
        # milliseconds, a write in flight) still ran on the faulted disk, and its exit is that fault's.
        p = self.rig.process(*key)
        running = is_ours(p)
        fault: ReadOnlyMount | Ballast | IoErrors | None = None
        if why is None:
            try:
                if f.kind == DISK_EIO:
                    fault = IoErrors(directory)
                elif f.kind == "disk_full" and sized is not None:
                    fault = Ballast(sized)
                else:
                    fault = ReadOnlyMount(directory)
            except (DiskFaultRefused, OSError) as exc:
                why = str(exc)
        if fault is None:
            self.injected[f.kind] -= 1
            self.injected[f"{f.kind} skipped"] += 1
            self.history.record("fault_skipped", kind=f.kind, why=why)
            return
        with self._lock:
            self._disks[key] = (f.kind, fault, time.monotonic() + f.args["duration_s"])
            if running:
                self._disk_pids[p.pid] = f.kind
        self._later(f.args["duration_s"], lambda: self._lift_disk(key))

    def _await_disk(self, key: tuple[str, int]) -> str | None:
        """Wait until no fault holds ``key``'s disk (its timer lifts it); None once free, else why the next fault on
        it is skipped (the lift did not come within :data:`DISK_LIFT_GRACE_S` of its due time)."""
        with self._lock:
            if key not in self._disks and key not in self._disks_releasing:
                return None
            held = self._disks.get(key)
            kind = held[0] if held is not None else "being lifted"
            deadline = (held[2] if held is not None else time.monotonic()) + DISK_LIFT_GRACE_S
            started = time.monotonic()
            while key in self._disks or key in self._disks_releasing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"its disk is faulted already ({kind}) and the fault was not lifted in time"
                self._disk_lifted.wait(left)
        self.history.record(
            "fault_waited", role=key[0], id=key[1], behind=kind, seconds=round(time.monotonic() - started, 2)
        )
        return None

    def _store_fault(self, f: Fault) -> None:
        postgres = self.rig.postgres
        assert postgres is not None, "store faults are drawn only when the run controls a PostgreSQL server"
        try:
            if f.kind == "postgres_pause":
                stopped = postgres.pause()
                self.history.record("store_paused", pids=stopped)
                self._later(f.args["duration_s"], self._resume_store)
            else:
                postgres.stop()
                self.history.record("store_stopped")
                self._later(f.args["down_s"], self._start_store)
        except StoreFaultRefused as exc:
            self.injected[f.kind] -= 1
            self.injected[f"{f.kind} skipped"] += 1
            self.history.record("fault_skipped", kind=f.kind, why=str(exc))

    def paused(self) -> set[tuple[str, int]]:
        """The processes paused now, as (role, id)."""
        with self._lock:
            return set(self._paused)

    def brokers_held_back(self) -> bool:
        """Whether the run keeps a broker from serving now: down until a later operation, paused, or on a faulted
        disk (a broker merely restarting, after a crash point, say, is not held back)."""
        with self._lock:
            held = {*self._down, *self._paused, *self._disks}
        return any(role == "broker" for role, _ in held)

    def decommission(self, broker: int, dead_for: int) -> None:
        """Kill a broker about to be decommissioned; it comes back ``dead_for`` operations on."""
        p = self.rig.process("broker", broker)
        if is_ours(p):
            lc.kill_process(p)
            self.history.record("fault", kind="kill", role="broker", id=broker, why="decommission")
        self._down[("broker", broker)] = self.op_index + dead_for

    def _link(self, args: dict[str, Any]) -> LinkProxy:
        links = self.rig.links
        assert links is not None
        if args["link"] == "to_broker":
            return links.to_broker[args["broker"]]
        return links.to_controller[(args["broker"], lc.CONTROLLER_ID_BASE + args["controller"])]

    # -- lifting --------------------------------------------------------------------------------------------------

    def _lift_s3(self, slot: int) -> None:
        proxy = self.rig.proxy
        assert proxy is not None
        with self._lock:
            self._s3_rules.pop(slot, None)
            proxy.set_faults(list(self._s3_rules.values()))

    def _resume(self, key: tuple[str, int], pid: int) -> None:
        with self._lock:
            if key not in self._paused:
                return
            self._paused.discard(key)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self.history.record("fault_lifted", kind="pause", role=key[0], id=key[1])

    def _lift_disk(self, key: tuple[str, int]) -> None:
        with self._lock:
            faulted = self._disks.pop(key, None)
            if faulted is not None:
                self._disks_releasing.add(key)
        if faulted is None:
            return
        kind, fault, _ = faulted
        try:
            fault.release()
            self.history.record("fault_lifted", kind=kind, role=key[0], id=key[1])
        finally:
            with self._lock:  # the next fault on this disk waits for the release itself, not just the timer
                self._disks_releasing.discard(key)
                self._disk_lifted.notify_all()

    def release_disks(self) -> None:
        """Every faulted data directory made whole again (writable, its ballast deleted): healing, and the run's
        close whatever happened."""
        with self._lock:
            keys = list(self._disks)
        for key in keys:
            self._lift_disk(key)

    def _halted_on_disk(self, p: Any) -> bool:
        """Whether ``p`` (dead) ran while its disk was faulted and halted for it, as it must; counted once, under
        the fault's kind."""
        if p.pid not in self._disk_pids or not p.log:
            return False
        if "log_dir.failed" not in Path(p.log).read_text(errors="replace"):
            return False
        kind = self._disk_pids.pop(p.pid)
        self.injected[f"{kind} halted"] += 1
        self.history.record("disk_halt", role=p.role, id=p.id, pid=p.pid)
        return True

    def _resume_store(self) -> None:
        assert self.rig.postgres is not None
        self.rig.postgres.resume()
        self.history.record("fault_lifted", kind="postgres_pause")

    def _start_store(self) -> None:
        assert self.rig.postgres is not None
        try:
            self.rig.postgres.start()
        except PostgresUnavailable as exc:  # healing starts it again
            self.history.record("restart_failed", role="postgres", error=str(exc)[:500])
        else:
            self.history.record("fault_lifted", kind="postgres_restart", pid=self.rig.postgres.server.pid)

    def lift_all(self) -> None:
        """Every fault lifted at once: timers cancelled, the PostgreSQL server continued or started again, S3 rules
        cleared, links passed, paused processes continued (the dead and the armed are :meth:`revive`'s and
        :meth:`disarm`'s)."""
        self.cancel_timers()
        self.release_disks()
        if self.rig.postgres is not None:
            self.rig.postgres.heal()
        proxy, links = self.rig.proxy, self.rig.links
        assert proxy is not None and links is not None
        with self._lock:
            self._s3_rules.clear()
            proxy.clear()
            paused, self._paused = set(self._paused), set()
        store_links = self.rig.store_links.all() if self.rig.store_links is not None else []
        for link in [*links.all(), *store_links]:
            link.set_mode("pass")
        for key in paused:
            p = self.rig.process(*key)
            if is_ours(p):
                os.kill(p.pid, signal.SIGCONT)

    def disarm(self) -> list[tuple[str, int]]:
        """Restart unarmed every process still armed with a crash point; which ones were."""
        still_armed = sorted(self._armed)
        for key in still_armed:
            self._restart(key)
        return still_armed

    # -- the processes --------------------------------------------------------------------------------------------

    def _restart(self, key: tuple[str, int], *, armed: str | None = None) -> None:
        """Start (or kill and start again) one process, armed with a crash point or not."""
        p = self.rig.process(*key)
        if is_ours(p):
            lc.kill_process(p)
        env = {}
        if armed:
            env = {crash_points.ENV_VAR: armed, crash_points.RECORD_ENV_VAR: str(self.crash_record)}
            self._armed.add(key)
        else:
            self._armed.discard(key)
        try:
            p = lc.restart(self.rig.cluster_dir, key[0], key[1], env=env)
            self.history.record("restart", role=key[0], id=key[1], armed=armed)
            if key in self._disks:  # started on a disk still faulted: it may halt as well
                self._disk_pids[p.pid] = self._disks[key][0]
            links = self.rig.links
            link = links.to_broker.get(key[1]) if links is not None and key[0] == "broker" else None
            if link is not None and link.target[1] != p.port:  # its old port was taken: it came back on another
                link.target = ("127.0.0.1", p.port)
                self.history.record("moved", role=key[0], id=key[1], port=p.port)
        except TieredError as exc:  # died before it was ready (a crash point reached early): the next look restarts
            self.history.record("restart_failed", role=key[0], id=key[1], armed=armed, error=str(exc)[:500])

    def _crashes(self) -> list[dict[str, Any]]:
        if not self.crash_record.exists():
            return []
        lines = self.crash_record.read_text().splitlines()
        new = [json.loads(line) for line in lines[self._crash_lines_seen :] if line.strip()]
        self._crash_lines_seen = len(lines)
        return new

    def read_crashes(self) -> None:
        for c in self._crashes():
            self._crashed_pids.add(c["pid"])
            self.crash_points_hit.append(c["point"])
            self.history.record("crash_point_hit", point=c["point"], pid=c["pid"], hit=c.get("hit"))

    def revive(self, *, healing: bool = False) -> None:
        """Restart what died at a crash point or is due back; report what died for no reason the run knows."""
        state = LocalClusterState.load(self.rig.cluster_dir)
        for p in state.processes:
            key = (p.role, p.id)
            if p.role == "s3" or is_ours(p) or key in self._paused or key in self._disks:
                continue
            due = self._down.get(key)
            if due is not None and due > self.op_index and not healing:
                continue
            self.read_crashes()  # read after the process was seen dead: its record line, written first, is there
            if due is None and p.pid not in self._crashed_pids and not self._halted_on_disk(p):
                tail = "\n".join(Path(p.log).read_text(errors="replace").splitlines()[-12:]) if p.log else ""
                why = f"{p.role} {p.id} (pid {p.pid}) exited, killed by no fault of the run"
                self.unexpected.append(ck.Violation("process", why, None, (tail,)))
                self.history.record("unexpected_exit", role=p.role, id=p.id, pid=p.pid, log_tail=tail)
            self._down.pop(key, None)
            self._restart(key)
