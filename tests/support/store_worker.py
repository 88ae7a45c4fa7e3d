"""A separate OS process driving one SqliteMetadataStore, for tests that need real process boundaries.

Run as ``python -m tests.support.store_worker PATH HOLDER``. It opens the store, prints ``{"ready": ...}``, then
reads one JSON command per line on stdin and answers one JSON line on stdout (logs go to stderr). Time is the
wall clock, as it must be for processes sharing a lease. Commands (``op``):

* ``acquire`` {ttl_ms} -> {lease: [holder, epoch, expires_at_ms] | null}
* ``renew`` {epoch, ttl_ms} -> {lease} ; ``release`` {epoch} -> {released}
* ``append`` {epoch, name} -> {offset}
* ``append_many`` {epoch, count, prefix} -> one {acked: offset} line per committed single-record append, then
  {done: true}: a line is printed only after its transaction committed, so a parent that kills this process
  knows exactly which appends were acknowledged.
* ``exit``

A refused operation answers {error: NAME, code: N, message}.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from orchestrator.errors import KafkaError
from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.records import make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import Lease
from tests.support import REPO_ROOT


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _lease(lease: Lease | None) -> list[Any] | None:
    return None if lease is None else [lease.holder, lease.controller_epoch, lease.expires_at_ms]


def _say(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _handle(store: SqliteMetadataStore, holder: str, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    if op == "acquire":
        return {"lease": _lease(store.acquire_lease(holder=holder, now_ms=_now_ms(), ttl_ms=cmd["ttl_ms"]))}
    if op == "renew":
        lease = store.renew_lease(holder=holder, controller_epoch=cmd["epoch"], now_ms=_now_ms(), ttl_ms=cmd["ttl_ms"])
        return {"lease": _lease(lease)}
    if op == "release":
        return {"released": store.release_lease(holder=holder, controller_epoch=cmd["epoch"])}
    if op == "append":
        record = make_record("TopicRecord", name=cmd["name"], topic_id=Uuid.random())
        return {"offset": store.append([record], controller_epoch=cmd["epoch"])}
    if op == "append_many":
        for i in range(cmd["count"]):
            record = make_record("TopicRecord", name=f"{cmd['prefix']}{i}", topic_id=Uuid.random())
            _say({"acked": store.append([record], controller_epoch=cmd["epoch"])})
        return {"done": True}
    raise ValueError(f"unknown op {op!r}")


class StoreWorker:
    """The parent's handle on a worker process. Always ``kill()`` it (in a ``finally``)."""

    def __init__(self, path: Path, holder: str, *, log_dir: Path, timeout_s: float = 30.0) -> None:
        self.holder = holder
        self.timeout_s = timeout_s
        self.stderr_path = log_dir / f"{holder}.stderr"
        self._stderr: IO[bytes] = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.store_worker", str(path), holder],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
        )
        self._buffer = bytearray()
        self._selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        ready = self.read()
        assert ready.get("ready"), ready

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())

    def read(self) -> dict[str, Any]:
        """The next answer line, or an AssertionError naming the worker's stderr if none comes in time."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self._selector.select(left):
                raise AssertionError(f"{self.holder} did not answer within {self.timeout_s}s; see {self.stderr_path}")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"{self.holder} exited ({self.proc.poll()}); see {self.stderr_path}")
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.read()

    def kill(self) -> None:
        """SIGKILL (no clean shutdown: SQLite's WAL stays behind as after a crash) and reap."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=self.timeout_s)
        self._selector.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def main(argv: list[str]) -> int:
    path, holder = argv[1], argv[2]
    configure_logging("service", stream=sys.stderr)
    store = SqliteMetadataStore(path)
    _say({"ready": True, "pid_holder": holder})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            break
        try:
            _say(_handle(store, holder, cmd))
        except KafkaError as exc:
            _say({"error": exc.name, "code": exc.code, "message": exc.message})
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
