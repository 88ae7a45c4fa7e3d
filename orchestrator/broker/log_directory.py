"""The one boundary between a partition's files and the rest of the broker (KIP-112's failed log directory): every
``OSError`` of a partition's files becomes :class:`KafkaStorageError` (KAFKA_STORAGE_ERROR, 56) naming the
partition's directory, the OS error and the file, with the ``OSError`` as its cause.

Invariant: a method wrapped by :func:`on_log_directory` runs under its object's lock and never lets a bare
``OSError`` out; :mod:`orchestrator.broker.local_log` wraps every public method that touches the disk with it.
Before the error leaves, the object's ``_on_failure`` (when set) hears of it: the broker's
:class:`~orchestrator.broker.log_dir_failure.LogDirFailureChannel`, which halts the broker when the disk failed.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from orchestrator.errors import KafkaStorageError

_P = ParamSpec("_P")
_R = TypeVar("_R")


class OnDirectory(Protocol):
    """What :func:`on_log_directory` needs of the object whose methods it wraps."""

    directory: Path
    _mutex: threading.RLock
    _on_failure: Callable[[Path, OSError], None] | None


_T = TypeVar("_T", bound=OnDirectory)


def log_directory_error(directory: Path, exc: OSError) -> KafkaStorageError:
    """KAFKA_STORAGE_ERROR for an OS error in a partition's log directory: the directory, the OS error, and the
    file when it is not the directory itself (as a Kafka broker reports a failed log directory)."""
    reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno is not None and exc.strerror else repr(exc)
    files = []
    for name in (exc.filename, exc.filename2):
        if name is None:
            continue
        path = Path(os.fsdecode(name))
        if path != directory:
            files.append(path.name if path.parent == directory else str(path))
    where = f" ({', '.join(files)})" if files else ""
    return KafkaStorageError(f"log directory {directory}: {reason}{where}")


def on_log_directory(method: Callable[Concatenate[_T, _P], _R]) -> Callable[Concatenate[_T, _P], _R]:
    """``method`` run under its object's lock, an ``OSError`` inside it reported to the object's ``_on_failure``
    and leaving as :func:`log_directory_error` of the object's directory."""

    @functools.wraps(method)
    def translated(self: _T, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._mutex:
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                if self._on_failure is not None:
                    self._on_failure(self.directory, exc)
                raise log_directory_error(self.directory, exc) from exc

    return translated
