"""Named crash points: moments in the controller and the broker where the fault suite kills the process (kill -9)
to show that nothing acknowledged is lost and that the system converges once the process is back (ARCHITECTURE §4
invariant 8, §10).

A process is armed from its environment, by its entry point, before it does anything (:func:`arm_from_env`):
``TIEREDCTL_CRASH_POINT=name`` fires the first time the process reaches that point, ``name@N`` the N-th time;
several points are comma-separated (``controller.after_epoch_bump,broker.mid_delete_batch@2``).
``TIEREDCTL_CRASH_RECORD=path`` names a file to which the point that fires appends one JSON line,
``{"point": ..., "pid": ..., "hit": ..., "time_ms": ...}`` (and ``"action": "stop"`` for a stop point, and
``"detail": {...}`` where the call site says what it was working on), so whoever armed the process knows it died
there and not of something else, and on what. The code marks each moment with ``crash_points.reached("<name>")``.

Invariants:
* Every point is declared in :data:`POINTS`, with what it means. Arming an unknown name, or a count that is not a
  whole number >= 1, is a :class:`~orchestrator.errors.SettingsError` at process start that names the known points:
  a typo stops the process instead of never firing. :func:`reached` with an undeclared name raises ``ValueError``,
  so a call site cannot drift from the list.
* Unarmed, :func:`reached` costs two dict lookups: nothing is counted, nothing written, nothing locked, and a call
  site's ``detail`` (a function) is never called; it is called only by the hit that fires.
* An armed point fires exactly once, at its N-th hit in this process, whichever threads race to it (hits are
  counted under a lock, and the firing happens under it too, so no other armed point gets past it).
* Firing is a real SIGKILL of the whole process, from whatever thread reaches it: no ``finally`` block, atexit
  handler, flush of a buffer or clean shutdown of the process runs after it, exactly as when an operator kills it.
  Only the record line (appended in one write and fsynced) and the ``fault.crash_point`` log line come before it.
  A point armed by ``TIEREDCTL_STOP_POINT`` (same syntax) SIGSTOPs the process there instead: it freezes holding
  whatever it holds, and goes on from the point when it gets SIGCONT.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import structlog

from orchestrator.clock import wall_ms
from orchestrator.errors import SettingsError

log = structlog.get_logger(__name__)

ENV_VAR = "TIEREDCTL_CRASH_POINT"
RECORD_ENV_VAR = "TIEREDCTL_CRASH_RECORD"
# The same points, armed to stop the process (SIGSTOP) instead of killing it: it freezes there, holding whatever it
# holds (a store transaction, a lock), until someone sends SIGCONT; then it goes on from the point.
STOP_ENV_VAR = "TIEREDCTL_STOP_POINT"

POINTS: Mapping[str, str] = MappingProxyType(
    {
        "controller.after_epoch_bump": (
            "the record moving a topic to DISABLING (epoch + 1) is appended; no DisableRemoteTopic sent yet"
        ),
        "controller.before_disable_send": "a DisableRemoteTopic request is about to go to a broker",
        "controller.after_ack_before_disabled": (
            "every required broker acknowledged the epoch; the DISABLED record is not appended yet"
        ),
        "controller.mid_snapshot": (
            "a metadata snapshot is written inside its store transaction, which is not committed yet"
        ),
        "controller.after_topic_removed": (
            "a deleted topic's RemoveTopicRecord and its partitions' DELETE_PARTITION_MARKED are committed; the "
            "deletion is not queued yet and DeleteTopics not answered"
        ),
        "broker.after_upload_before_rlmm": (
            "a segment's objects are uploaded to S3; COPY_SEGMENT_FINISHED is not in the RLMM yet"
        ),
        "broker.mid_delete_batch": (
            "the delete policy deleted one batch's objects from S3; their DELETE_SEGMENT_FINISHED is not written yet"
        ),
        "broker.before_disable_ack": (
            "the policy is applied to the topic; the broker is about to answer DisableRemoteTopic with DONE"
        ),
        "store.mid_rlmm_append": (
            "remote log metadata records are written in the store's transaction, which is not committed yet"
        ),
        "broker.mid_partition_delete": (
            "some segments of a deleted topic's partition are deleted; the partition is not DELETE_PARTITION_FINISHED"
        ),
    }
)

# Points where a frozen process holds something the others need (a store transaction): armed with
# TIEREDCTL_STOP_POINT by the tests of the holes they show. Not in the chaos suite's kill matrix (a kill there is a
# kill mid-transaction, which ``controller.mid_snapshot`` already covers), and reached by whichever process writes.
STOP_ONLY = frozenset({"store.mid_rlmm_append"})

_RECORD_MODE = 0o600  # as every file the processes write (orchestrator.private_files, not importable from here)

_lock = threading.Lock()
_armed: dict[str, int] = {}  # point -> the hit that fires it
_hits: dict[str, int] = {}  # point -> times reached so far (armed points only)
_stopping: set[str] = set()  # armed points that stop the process instead of killing it
_record: Path | None = None


def parse(value: str, *, var: str = ENV_VAR) -> dict[str, int]:
    """``name``, ``name@N`` or a comma-separated list of them, as {point: the hit that fires it}; blank entries are
    skipped. Raises :class:`SettingsError` (naming ``var``) for an unknown point, a bad count or a point named
    twice."""
    armed: dict[str, int] = {}
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        name, at, count = entry.partition("@")
        name = name.strip()
        if name not in POINTS:
            raise SettingsError(f"{var}: unknown crash point {name!r}; known: {', '.join(sorted(POINTS))}")
        hit = 1
        if at:
            try:
                hit = int(count.strip())
            except ValueError:
                hit = 0
            if hit < 1:
                raise SettingsError(f"{var}: {entry!r}: the hit after '@' must be a whole number >= 1")
        if name in armed:
            raise SettingsError(f"{var}: crash point {name!r} is named twice")
        armed[name] = hit
    return armed


def arm(points: Mapping[str, int], *, record: Path | None = None, stops: Mapping[str, int] | None = None) -> None:
    """Arm exactly ``points`` ({point: the hit that fires it}) to kill and ``stops`` to stop, forgetting earlier
    arming and hits; the point that fires appends its line to ``record`` when given. For the entry points (through
    :func:`arm_from_env`) and tests."""
    global _record
    stops = stops or {}
    both = sorted(set(points) & set(stops))
    if both:
        raise SettingsError(f"point(s) {both} are armed both to kill and to stop")
    points = {**points, **stops}
    unknown = sorted(set(points) - set(POINTS))
    if unknown:
        raise SettingsError(f"unknown crash point(s) {unknown}; known: {', '.join(sorted(POINTS))}")
    bad = {name: hit for name, hit in points.items() if hit < 1}
    if bad:
        raise SettingsError(f"a crash point fires at hit 1 or later, got {bad}")
    with _lock:
        _armed.clear()
        _armed.update(points)
        _stopping.clear()
        _stopping.update(stops)
        _hits.clear()
        _record = record


def disarm() -> None:
    """Nothing armed any more (hits forgotten)."""
    arm({})


def arm_from_env(environ: Mapping[str, str]) -> dict[str, int]:
    """Arm what ``environ`` names (:data:`ENV_VAR`, :data:`RECORD_ENV_VAR`); returns what was armed. Called first
    thing by the controller's and the broker's entry points, so a bad value stops the process before it serves."""
    points = parse(environ.get(ENV_VAR, ""))
    stops = parse(environ.get(STOP_ENV_VAR, ""), var=STOP_ENV_VAR)
    record = environ.get(RECORD_ENV_VAR) or None
    arm(points, record=Path(record) if record is not None else None, stops=stops)
    if points or stops:
        log.warning("fault.crash_points_armed", points=points, stops=stops, record=record)
    return {**points, **stops}


def hits(name: str) -> int:
    """How many times this process reached ``name`` while it was armed."""
    with _lock:
        return _hits.get(name, 0)


def reached(name: str, detail: Callable[[], Mapping[str, object]] | None = None) -> None:
    """This process is at crash point ``name``: when it is armed and this is the hit that fires it, log, write the
    record line (with what ``detail`` returns, JSON-ready: what the call site was working on) and SIGKILL the whole
    process; otherwise return at once."""
    if name not in POINTS:
        raise ValueError(f"undeclared crash point {name!r}: declare it in orchestrator.crash_points.POINTS")
    fires_at = _armed.get(name)
    if fires_at is None:
        return
    with _lock:
        hit = _hits[name] = _hits.get(name, 0) + 1
        if hit != fires_at:
            return
        _fire(name, hit, {} if detail is None else {"detail": dict(detail())})


def _fire(name: str, hit: int, detail: Mapping[str, object]) -> None:
    pid = os.getpid()
    stop = name in _stopping
    log.warning("fault.crash_point", point=name, hit=hit, pid=pid, action="stop" if stop else "kill", **detail)
    if _record is not None:
        entry = {"point": name, "pid": pid, "hit": hit, "time_ms": wall_ms()} | ({"action": "stop"} if stop else {})
        entry |= detail
        line = json.dumps(entry) + "\n"
        try:
            fd = os.open(_record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _RECORD_MODE)
            try:
                os.write(fd, line.encode())  # one write on an O_APPEND file: lines of several processes never mix
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # the crash still happens: an armed point that does not fire would hide the fault
            log.error("fault.crash_record_failed", point=name, record=str(_record), error=str(exc))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or gone: nothing left to lose
            stream.flush()
    os.kill(pid, signal.SIGSTOP if stop else signal.SIGKILL)  # stopped: goes on from here after SIGCONT
