"""A failed log directory stops the broker, as a Kafka broker with one log directory stops (KIP-112: a directory
whose disk fails goes offline, and a broker left without an online log directory halts). A broker has one data
directory here, so its failure is the broker's: it stops serving every partition at once, the controller fences it
once its heartbeats stop, and leadership moves to the other in-sync replicas.

A failure is an OS error that says the device failed or refuses writes (:data:`DEVICE_FAILURES`: EIO, EROFS,
ENOSPC, EDQUOT, ENODEV, ENXIO). Other OS errors of a partition's files (a file missing, or something in the way of
one) stay that partition's KAFKA_STORAGE_ERROR, answered and retried as before (:mod:`orchestrator.broker.local_log`).

Invariants:

* The first failure is logged once, ``log_dir.failed`` (critical: the directory, the OS error, what to do), and
  the process halts at once with :data:`EXIT_LOG_DIR_FAILED` (74, sysexits' EX_IOERR), running no clean-up, so
  nothing more is written anywhere; the next start finds the directory as the failure left it and recovers it (a
  torn tail is cut off, :mod:`orchestrator.broker.log_segment`).
* Nothing half-written is acknowledged: an append is answered only after it was written to the OS, and the append
  that failed dies with the process (its producer retries elsewhere or later; an idempotent one is deduplicated by
  the producer state the next start rebuilds).
* A broker started again on a directory that still fails halts the same way when it first touches it.
* Concurrent reports halt once: a second report while the first halts does nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

EXIT_LOG_DIR_FAILED = 74  # sysexits.h EX_IOERR: an error while doing I/O on some file
DEVICE_FAILURES = frozenset(
    code
    for code in (errno.EIO, errno.EROFS, errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.ENODEV, errno.ENXIO)
    if code is not None
)


def is_device_failure(exc: OSError) -> bool:
    """Whether ``exc`` says the disk failed or refuses writes (rather than a file missing or in the way)."""
    return exc.errno in DEVICE_FAILURES


def halt_now(status: int) -> None:
    """End the process at once with ``status``: what was logged is flushed, nothing else runs."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or failed stream: the halt goes on regardless
            stream.flush()
    os._exit(status)


class LogDirFailureChannel:
    """Where the broker's logs report a failed directory (``report``); the first report halts the broker."""

    def __init__(self, data_dir: Path, *, halt: Callable[[int], None] = halt_now) -> None:
        self.data_dir = data_dir
        self._halt = halt
        self._lock = threading.Lock()
        self.failed: tuple[Path, OSError] | None = None

    def report(self, directory: Path, exc: OSError) -> None:
        """A partition directory's OS error: a device failure halts the broker (the first one logs); anything else
        is left to the caller (KAFKA_STORAGE_ERROR for that partition)."""
        if not is_device_failure(exc):
            return
        with self._lock:
            if self.failed is not None:
                return
            self.failed = (directory, exc)
        log.critical(
            "log_dir.failed",
            data_dir=str(self.data_dir),
            directory=str(directory),
            error=f"[Errno {exc.errno}] {exc.strerror}",
            file=None if exc.filename is None else os.fsdecode(exc.filename),
            exit_status=EXIT_LOG_DIR_FAILED,
            action=(
                f"the broker stops: its data directory {self.data_dir} failed. Fix or replace the disk (or free "
                "space), then start the broker again: it recovers the directory as the failure left it, and "
                "rebuilds from the remote tier what is lost"
            ),
        )
        self._halt(EXIT_LOG_DIR_FAILED)
