"""Real disk faults for a broker's data directory: the directory made read-only in place, as a disk that fails into
read-only mode does, or filled to the last byte, as a disk that runs out of space does; and made whole again.

* Read-only (:class:`ReadOnlyMount`): a bind mount of the directory onto itself, remounted read-only (``mount
  --bind D D``; ``mount -o remount,ro,bind D``). Files opened before keep writing to the underlying mount; every
  new open, create or delete in the directory fails with EROFS (what a broker sees as its disk failing on the next
  segment roll, index or checkpoint write).
* Full (:class:`SizedDisk`, :class:`Ballast`): the directory is first moved onto a file system of its own, a tmpfs of
  a fixed size mounted on the directory, with its files copied over while its broker is stopped (once, as the run
  starts). The fault then takes every free byte of it with a ballast file (``posix_fallocate``), so every write
  that needs a new block, to a file opened before or after, fails with ENOSPC; lifting it deletes the ballast.

* Lost (:func:`empty_directory`): every file and directory under the data directory deleted while its broker is
  dead, as a failed disk replaced by a new, empty one; the directory itself stays (it may be a sized disk's mount
  point). No root needed.

Read-only and full need root (``mount``). Invariants: a mount that could not be made leaves nothing mounted and raises
:class:`DiskFaultRefused` naming the command and its error, and a directory that could not be moved onto its tmpfs
is left as it was; every ``release`` is idempotent, and a busy mount is detached lazily (``umount -l``) so release
never fails on a directory a process still has open. A sized disk is released only once its broker stopped: its
files go with it (a kept run keeps the cluster's other files, not the brokers' logs).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

BALLAST = ".chaos-ballast"  # a file, not a partition directory: a broker's scan of its data directory skips it


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


class SizedDisk:
    """``directory`` moved onto a tmpfs of ``size_bytes`` mounted on it (its broker must be stopped meanwhile), until
    :meth:`release` (after the broker stopped for good)."""

    def __init__(self, directory: Path, size_bytes: int) -> None:
        self.directory = directory
        self.mounted = False
        moved = directory.with_name(f"{directory.name}.moving")
        mode = directory.stat().st_mode & 0o7777
        directory.rename(moved)
        try:
            directory.mkdir(mode=mode)
            _run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode={mode:o}", "tmpfs", str(directory)])
            self.mounted = True
            shutil.copytree(moved, directory, symlinks=True, dirs_exist_ok=True)
        except BaseException:
            self.release()
            shutil.rmtree(directory, ignore_errors=True)
            moved.rename(directory)
            raise
        shutil.rmtree(moved)

    def free_bytes(self) -> int:
        st = os.statvfs(self.directory)
        return st.f_bavail * st.f_frsize

    def release(self) -> None:
        if not self.mounted:
            return
        if subprocess.run(["umount", str(self.directory)], capture_output=True, check=False).returncode != 0:
            _run(["umount", "-l", str(self.directory)])
        self.mounted = False


class Ballast:
    """Every free byte of ``disk`` taken by one file until :meth:`release` deletes it."""

    def __init__(self, disk: SizedDisk, *, attempts: int = 5) -> None:
        self.path = disk.directory / BALLAST
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(attempts):
                free = disk.free_bytes()
                if free == 0:
                    return
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, free)
                except OSError as exc:  # a broker took blocks between the look and the claim: look again
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        if disk.free_bytes() > 0:
            self.release()
            raise DiskFaultRefused(f"{disk.directory} could not be filled in {attempts} attempts: writes keep up")

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def empty_directory(directory: Path) -> int:
    """Delete everything under ``directory`` (not the directory); how many entries were directly under it."""
    removed = 0
    for entry in list(directory.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed += 1
    return removed


def _run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskFaultRefused(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0:
        raise DiskFaultRefused(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}; it needs root")
