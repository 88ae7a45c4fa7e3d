"""A real disk fault for a broker's data directory: the directory made read-only in place, as a disk that fails into
read-only mode does, and made writable again.

The fault is a bind mount of the directory onto itself, remounted read-only (``mount --bind D D``;
``mount -o remount,ro,bind D``), which needs root. Files opened before keep writing to the underlying mount; every
new open, create or delete in the directory fails with EROFS (what a broker sees as its disk failing on the next
segment roll, index or checkpoint write).

Invariants: a :class:`ReadOnlyMount` that could not be made leaves nothing mounted and raises
:class:`DiskFaultRefused` naming the command and its error; :meth:`ReadOnlyMount.release` is idempotent, and a busy
mount is detached lazily (``umount -l``) so release never fails on a directory a process still has open.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


class DiskFaultRefused(RuntimeError):
    """The fault could not be made (not root, no ``mount``): nothing was changed."""


class ReadOnlyMount:
    """``directory`` made read-only in place until :meth:`release` (call it in a finally)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.mounted = False
        _run(["mount", "--bind", str(directory), str(directory)])
        self.mounted = True
        try:
            _run(["mount", "-o", "remount,ro,bind", str(directory)])
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if not self.mounted:
            return
        if subprocess.run(["umount", str(self.directory)], capture_output=True, check=False).returncode != 0:
            _run(["umount", "-l", str(self.directory)])  # busy: detached now, the kernel finishes later
        self.mounted = False


def _run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskFaultRefused(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0:
        raise DiskFaultRefused(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}; it needs root")
