"""The disk I/O error fault (chaos/io_errors.py and its preload library): a real process started with the library
gets EIO from every file operation under the faulted directory while the switch is on, and from nothing else (its
other directories, the directory beside it, a socket); once the switch is off everything works again and what was
written before the fault is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import io_errors
from chaos.disk import DiskFaultRefused
from chaos.io_errors import IoErrors, build_library, preload_env, switch_file

pytestmark = pytest.mark.integration

# Run in the child: each operation under the faulted directory, then the same beside it and on a socket; prints the
# errno each gave (0: it worked), one JSON object.
CHILD = r"""
import json, os, socket, sys
from pathlib import Path
root, faulted = Path(sys.argv[1]), Path(sys.argv[2])
healthy = root / "broker-2"
kept = open(faulted / "open-before.log", "r+b")
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = 0
    except OSError as exc:
        out[name] = exc.errno
def each(directory, tag):
    attempt(f"{tag} create", lambda: open(directory / "new.log", "wb").close())
    attempt(f"{tag} read", lambda: open(directory / "before.log", "rb").read())
    attempt(f"{tag} rename", lambda: os.replace(directory / "before.log", directory / "renamed.log"))
    attempt(f"{tag} list", lambda: os.listdir(directory))
    attempt(f"{tag} mkdir", lambda: os.mkdir(directory / "sub"))
    attempt(f"{tag} unlink", lambda: os.unlink(directory / "gone.log"))
print("ready", flush=True)
sys.stdin.readline()  # the parent turns the switch on
attempt("write to a file opened before", lambda: os.write(kept.fileno(), b"during"))
attempt("read from a file opened before", lambda: os.pread(kept.fileno(), 6, 0))
attempt("fsync of a file opened before", lambda: os.fsync(kept.fileno()))
attempt("truncate of a file opened before", lambda: os.ftruncate(kept.fileno(), 0))
each(faulted, "faulted")
each(healthy, "beside")
a, b = socket.socketpair()
attempt("socket", lambda: (a.sendall(b"x"), b.recv(1)))
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the parent turns the switch off
after = {}
os.write(kept.fileno(), b"after!")
os.fsync(kept.fileno())
after["read back"] = os.pread(kept.fileno(), 12, 0).decode()
after["listed"] = sorted(os.listdir(faulted))
print(json.dumps(after), flush=True)
"""


def _prepare(root: Path) -> tuple[Path, Path]:
    faulted, healthy = root / "broker-1", root / "broker-2"
    for d in (faulted, healthy):
        d.mkdir(parents=True)
        (d / "before.log").write_bytes(b"written before the fault")
        (d / "gone.log").write_bytes(b"")
    (faulted / "open-before.log").write_bytes(b"before")
    return faulted, healthy


def test_every_file_operation_under_the_faulted_directory_fails_with_eio_and_nothing_else_does(tmp_path):
    library = build_library(tmp_path / "native")
    root = tmp_path / "data"
    faulted, _ = _prepare(root)
    env = {"PATH": "/usr/bin:/bin", **preload_env(library, root, {})}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(faulted)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as child:
        try:
            assert child.stdin is not None and child.stdout is not None
            assert child.stdout.readline() == "ready\n"
            fault = IoErrors(faulted)
            assert switch_file(faulted).exists() and switch_file(faulted).parent == root
            child.stdin.write("on\n")
            child.stdin.flush()
            during = json.loads(child.stdout.readline())
            fault.release()
            fault.release()  # idempotent
            child.stdin.write("off\n")
            child.stdin.flush()
            after = json.loads(child.stdout.readline())
            assert child.wait(timeout=30) == 0
        finally:
            if child.poll() is None:
                child.kill()
    eio = 5
    faulted_ops = {k: v for k, v in during.items() if not k.startswith(("beside", "socket"))}
    assert faulted_ops and set(faulted_ops.values()) == {eio}, during
    assert {k: v for k, v in during.items() if k.startswith(("beside", "socket"))} == {
        "beside create": 0,
        "beside read": 0,
        "beside rename": 0,
        "beside list": 0,
        "beside mkdir": 0,
        "beside unlink": 0,
        "socket": 0,
    }
    assert after["read back"] == "after!" and "before.log" in after["listed"] and "new.log" not in after["listed"]


def test_the_library_is_built_once_per_source_version_and_a_missing_compiler_is_refused_clearly(tmp_path, monkeypatch):
    first = build_library(tmp_path)
    assert build_library(tmp_path) == first and list(tmp_path.iterdir()) == [first]
    monkeypatch.setattr(io_errors.shutil, "which", lambda name: None)
    assert build_library(tmp_path) == first, "a built library needs no compiler"
    with pytest.raises(DiskFaultRefused, match="C compiler"):
        build_library(tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere").exists()


def test_the_environment_carries_the_library_only_while_preloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/other.so")
    monkeypatch.delenv(io_errors.ROOT_ENV, raising=False)
    library = tmp_path / "x.so"
    with io_errors.preloaded(library, tmp_path / "data"):
        assert os.environ["LD_PRELOAD"] == f"{library} /other.so"
        assert os.environ[io_errors.ROOT_ENV] == str((tmp_path / "data").resolve())
    assert os.environ["LD_PRELOAD"] == "/other.so" and io_errors.ROOT_ENV not in os.environ
