"""Files that hold keys, credentials, metadata or records are the owner's alone: 0600 files in 0700 directories.

Invariants:
* A server process (controller, broker, the embedded S3) runs with umask 077 (:func:`restrict_process`, called
  first thing by its entry point; the local cluster also starts its children with that umask), so every file and
  directory it creates (the store and its WAL, segment files, snapshots of the embedded S3, ready files) has no
  group or other bits, whatever the shell's umask was.
* Files the local cluster writes itself (settings, ``cluster.json``, process logs, password files) are created with
  mode 0600 from the start, never widened after, and replaced atomically; its directories are 0700.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

PRIVATE_UMASK = 0o077
FILE_MODE = 0o600
DIR_MODE = 0o700


def restrict_process() -> None:
    """From now on this process creates owner-only files and directories."""
    os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """``path`` as a directory of mode 0700 (made with its parents when missing; an existing one is restricted)."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def write_private(path: Path, data: str | bytes) -> None:
    """Replace ``path`` atomically with ``data`` (text is UTF-8), the file created 0600 from the start."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    os.chmod(tmp, FILE_MODE)  # an older tmp left behind keeps its mode through O_CREAT
    os.replace(tmp, path)


def open_private_append(path: Path) -> BinaryIO:
    """``path`` opened for appending, created 0600 when missing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    return os.fdopen(fd, "ab")
