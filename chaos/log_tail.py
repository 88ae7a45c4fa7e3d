"""The metadata log of a chaos run, read as it grows, so that a snapshot cannot hide records from the checker.

A controller's snapshot lets the records before the oldest snapshot kept go. :class:`LogTail` reads the cluster's
metadata log every :data:`TAIL_INTERVAL_S` on a thread and a connection of its own, keeping every record it read
(:class:`~chaos.checker.LogRecord`), and holds the log at the next offset it will read (the store's log hold,
``store`` invariant 8: renewed every :data:`HOLD_RENEW_S`, released when it stops), so no snapshot deletes a record
before the tail read it, however far behind a busy machine leaves it. A gap (the log's start moved past what it had
read) can then only open before its first hold, as the cluster starts, or if the hold lapsed; it is kept and
reported as incomplete, not as a violation. The state changes (topic created, removed,
tiered state, broker unregistered) also go to the run's history, beside what caused them.

Invariants: records are kept in offset order, each once; the hold is placed at the next offset to read before that
offset is read, and never above it; a gap is kept as the inclusive range of offsets never read;
once told to stop, the tail reads to the end one last time (retrying a busy store up to 20 times) and returns; the
store it opened is closed on every way out.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from chaos import checker as ck
from chaos.history import History
from orchestrator.metadata.open import open_store
from orchestrator.metadata.store import MetadataStore

TAIL_INTERVAL_S = 0.1  # the hold, not the pace, keeps records from snapshots: a faster tail only costs CPU
HOLD_RENEW_S = 1.0  # how often the hold moves up to what was read; it lasts HOLD_TTL_MS unless renewed
HOLD_TTL_MS = 60_000
_STATE_RECORDS = frozenset({"TopicRecord", "RemoveTopicRecord", "TieredStateRecord", "UnregisterBrokerRecord"})


class LogTail:
    def __init__(self, store_spec: str, history: History) -> None:
        self.store_spec = store_spec  # the SQLite file or the postgresql:// URL
        self.history = history
        self.records: list[ck.LogRecord] = []
        self.gaps: list[tuple[int, int]] = []
        self._next_offset = 0
        self._holder = f"chaos-log-tail-{os.getpid()}-{id(self)}"
        self._held_at: float | None = None  # time.monotonic() of the last hold, None before the first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-log-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """Read to the end, then stop; raises when that takes over 60 s."""
        self._stop.set()
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise RuntimeError("the metadata log's tail did not finish reading within 60 s")

    def stop(self) -> None:
        """Stop (reading to the end first), waiting at most 10 s: for tear-down, whatever happened before."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        """Read the metadata log as it grows, on one connection of its own, so a snapshot (which lets the records
        before the oldest snapshot kept go) does not take records before the run saw them. Once told to stop it
        reads to the end one last time (retrying a busy store) and returns."""
        failures = 0
        store: MetadataStore | None = None
        try:
            while True:
                stopping = self._stop.wait(TAIL_INTERVAL_S)
                try:
                    if store is None:
                        store = open_store(self.store_spec, recover_on_open=False)
                    self._read_log(store)
                    failures = 0
                except Exception as exc:  # a busy or locked store: read again next tick; a persistent error is shown
                    failures += 1
                    if failures in (1, 100) or stopping:
                        self.history.record("tail_failed", error=f"{type(exc).__name__}: {exc}", failures=failures)
                    if stopping and failures < 20:
                        continue
                if stopping:
                    return
        finally:
            if store is not None:
                with contextlib.suppress(Exception):  # it expires anyway: a store that is down cannot be told
                    store.release_log_hold(holder=self._holder)
                store.close()

    def _read_log(self, store: MetadataStore) -> None:
        now = time.monotonic()
        if self._held_at is None or now - self._held_at >= HOLD_RENEW_S:
            store.hold_log(
                holder=self._holder, offset=self._next_offset, now_ms=int(time.time() * 1000), ttl_ms=HOLD_TTL_MS
            )
            self._held_at = now
        start = store.start_offset()
        if start > self._next_offset:
            self.gaps.append((self._next_offset, start - 1))
            self._next_offset = start
        for e in store.read(from_offset=self._next_offset):
            self.records.append(ck.LogRecord(e.offset, e.controller_epoch, e.record.name, e.record.fields))
            self._next_offset = e.offset + 1
            if e.record.name in _STATE_RECORDS:  # the state changes, in the history beside what caused them
                fields = {k: str(v) if k == "topic_id" else v for k, v in e.record.fields.items()}
                self.history.record("state", offset=e.offset, record=e.record.name, **fields)
