"""SQLite's write-ahead log, read byte by byte to tell what SQLite silently ignored.

SQLite verifies each WAL frame's salts and cumulative checksum and ignores everything from the first bad frame
on: the database stays consistent, but ends at the last good commit, and nothing says commits were lost.
:func:`inspect_wal` compares the ``-wal`` file with the number of frames SQLite accepted and reports the rest.

Invariants:

* Read only: the WAL is parsed, never written; emptying it is the store's job (a checkpoint, under SQLite's locks).
* Only frames of the current WAL generation (the header's salts) count as ignored: frames left over from an
  earlier generation are dead by design, not damage.
* A partial frame at the end is reported as torn bytes. Whole frames cut off exactly at a frame boundary leave
  no trace and cannot be told.
* A header whose magic, page size or checksum does not verify means SQLite ignored the whole WAL.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_WAL_FRAME_HEADER = 24


def create_owner_only(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists, whatever the process's umask: the store holds SCRAM
    credentials, and SQLite gives the ``-wal`` and ``-shm`` files it makes beside it the same mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def sidecar(path: Path, suffix: str) -> Path:
    """A file beside the database: SQLite's ``-wal``, ``-shm`` and ``-journal``, and recovery's own copies."""
    return path.with_name(path.name + suffix)


@dataclass(frozen=True, slots=True)
class WalInspection:
    """What the ``-wal`` file holds beyond what SQLite accepted.

    SQLite checks each WAL frame's salts and cumulative checksum and silently ignores everything from the first
    bad frame on, so damage there looks like transactions that never happened. ``ignored_frames`` counts whole
    frames of the current WAL generation (same salts as the header) after the last commit SQLite accepted: a
    transaction torn by a crash, or damaged frames that took later commits with them. ``torn_bytes`` is a
    partial frame at the end (a cut-short write or a truncated file).
    """

    torn_bytes: int = 0
    ignored_frames: int = 0
    header_damaged: bool = False

    @property
    def clean(self) -> bool:
        return not (self.torn_bytes or self.ignored_frames or self.header_damaged)

    def problems(self, name: str) -> list[str]:
        out = []
        if self.header_damaged:
            out.append(f"{name}-wal has a damaged header; SQLite ignored the whole WAL")
        if self.ignored_frames:
            out.append(
                f"{name}-wal holds {self.ignored_frames} frame(s) after the last commit SQLite accepted (a torn "
                "transaction or damaged frames); the database continues from that commit"
            )
        if self.torn_bytes:
            out.append(f"{name}-wal ends with a partial frame ({self.torn_bytes} bytes), the mark of a torn write")
        return out


def _wal_checksum(data: bytes, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    s0 = s1 = 0
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def inspect_wal(path: Path, *, accepted_frames: int) -> WalInspection:
    """Inspect ``<path>-wal`` given how many frames SQLite accepted (``PRAGMA wal_checkpoint``'s log count)."""
    wal = sidecar(path, "-wal")
    try:
        with wal.open("rb") as f:
            header = f.read(_WAL_HEADER)
            size = wal.stat().st_size
            if size == 0:
                return WalInspection()
            if len(header) < _WAL_HEADER:
                return WalInspection(torn_bytes=size)
            magic, _version, page_size = (int(v) for v in struct.unpack(">III", header[:12]))
            stored = tuple(int(v) for v in struct.unpack(">II", header[24:32]))
            if magic not in _WAL_MAGIC or page_size < 512 or _wal_checksum(header[:24], magic & 1 == 1) != stored:
                return WalInspection(header_damaged=True)
            frame_size = _WAL_FRAME_HEADER + page_size
            whole, torn = divmod(size - _WAL_HEADER, frame_size)
            salts = header[16:24]
            ignored = 0
            for i in range(max(accepted_frames, 0), whole):
                f.seek(_WAL_HEADER + i * frame_size)
                if f.read(_WAL_FRAME_HEADER)[8:16] == salts:
                    ignored += 1
            return WalInspection(torn_bytes=torn, ignored_frames=ignored)
    except FileNotFoundError:
        return WalInspection()


__all__ = ["WalInspection", "inspect_wal", "sidecar"]
