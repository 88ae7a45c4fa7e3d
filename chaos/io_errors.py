"""Disk I/O errors (EIO) for a broker's data directory, as a failing disk answers, and made whole again.

The fault is a small LD_PRELOAD library (``chaos/native/io_errors.c``, built here with the machine's C compiler the
first time a run needs it) that every process of the cluster starts with, told by ``TIEREDCTL_EIO_ROOT`` which
directory holds the brokers' data directories. It changes nothing until a switch file ``<root>/<broker dir>.eio``
appears (:class:`IoErrors`): from then on every open, read, write, sync, truncate, rename, unlink and mkdir of a file
under that broker's directory fails with EIO, in whichever process makes it, until the switch is deleted. No data is
touched: what was written before the fault is there after it, as on a disk whose errors were transient.

Invariants: nothing outside the root is ever refused (sockets, pipes, the metadata store, every other file: the C
source says how); the library is built once per source version into a cache directory, by an atomic rename, so
concurrent runs never load a half-written file; a compiler that is missing or fails raises
:class:`~chaos.disk.DiskFaultRefused` naming the command, and nothing is changed; :meth:`IoErrors.release` is
idempotent. Unlike the read-only and full faults this one needs no root.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from chaos.disk import DiskFaultRefused

SOURCE = Path(__file__).parent / "native" / "io_errors.c"
ROOT_ENV = "TIEREDCTL_EIO_ROOT"
SWITCH_SUFFIX = ".eio"


def switch_file(directory: Path) -> Path:
    """The file whose presence makes every file operation under ``directory`` fail with EIO."""
    return directory.parent / f"{directory.name}{SWITCH_SUFFIX}"


def build_library(cache_dir: Path) -> Path:
    """The preload library, compiled from :data:`SOURCE` into ``cache_dir`` unless this version is there already."""
    source = SOURCE.read_bytes()
    target = cache_dir / f"io_errors-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.exists():
        return target
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise DiskFaultRefused("disk I/O errors need a C compiler (gcc or cc) to build chaos/native/io_errors.c")
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=cache_dir, suffix=".so.partial")
    os.close(fd)
    command = [compiler, "-O2", "-Wall", "-shared", "-fPIC", "-o", partial, str(SOURCE), "-ldl", "-lpthread"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        Path(partial).unlink(missing_ok=True)
        raise DiskFaultRefused(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    os.replace(partial, target)
    return target


def preload_env(library: Path, root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a process needs to start with the library watching ``root`` (other preloads kept)."""
    preload = " ".join(p for p in (str(library), environ.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, ROOT_ENV: os.path.realpath(root)}


@contextmanager
def preloaded(library: Path, root: Path) -> Iterator[None]:
    """This process's environment, and so every process it starts meanwhile, carries the library; restored after."""
    added = preload_env(library, root, os.environ)
    saved = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class IoErrors:
    """Every file operation under ``directory`` fails with EIO, in every process started with the library, until
    :meth:`release` (call it in a finally)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.switch = switch_file(directory)
        self.switch.touch()

    def release(self) -> None:
        self.switch.unlink(missing_ok=True)
