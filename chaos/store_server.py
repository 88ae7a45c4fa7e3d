"""The PostgreSQL server of a chaos run: one database per seed, and the faults the server itself suffers.

The server is the test suite's throwaway one (:mod:`tests.support.postgres_server`: ``initdb`` in a temporary
directory, ``postgres`` on a free 127.0.0.1 port, run as ``nobody`` when we are root, stopped by pid at the end);
:func:`chaos_postgres` starts it once for a whole ``python -m chaos`` run, and the fixed-seed tests wrap the suite's
session server in a :class:`ChaosPostgres` instead. Each seed gets a database of its own
(:meth:`ChaosPostgres.create_database`), dropped after the seed unless the seed is kept for its violations; a kept
seed's database is also dumped (``pg_dump``) into the seed's directory, since the server and its files go when the
run ends.

The faults (drawn by :mod:`chaos.scenario`, injected by :mod:`chaos.fault_injection`):

* :meth:`ChaosPostgres.pause`: the postmaster SIGSTOPped first (so it forks no new backend), then every process it
  had started (backends, checkpointer, WAL writer...); :meth:`ChaosPostgres.resume` continues them all. The
  kernel still accepts connections on the port: clients see a server that answers nothing, as with a frozen host.
* :meth:`ChaosPostgres.stop` (fast shutdown: SIGINT, every session ended, the data directory left clean) and
  :meth:`ChaosPostgres.start` (the same ``postgres`` command line again: the same data directory, port, settings
  and user, its output appended to the same log).

Invariants: at most one fault at a time (a fault asked while the server is paused or down is refused, and the
caller records it as skipped); every state change is under one lock, because faults are lifted by timer threads;
:meth:`ChaosPostgres.heal` leaves the server running and continued whatever state it was in, and
:func:`chaos_postgres` heals before it stops the server (a stopped postmaster would not shut down, and SIGKILL
would leave its stopped backends behind), on every way out, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.postgres_server import (
    PostgresServer,
    PostgresUnavailable,
    _env,
    _Identity,
    _wait_ready,
    find_binaries,
    running_postgres,
)

UP, PAUSED, DOWN = "up", "paused", "down"
START_ATTEMPTS = 3  # a start that fails (its port taken meanwhile) is tried again by heal, this many times
DUMP_TIMEOUT_S = 60.0


class StoreFaultRefused(RuntimeError):
    """A fault asked while another one holds the server (paused or down)."""


class ChaosPostgres:
    """A running server (see the module docstring); ``state`` is ``up``, ``paused`` or ``down``."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.state = UP
        self._stopped: list[int] = []  # the pids SIGSTOPped by pause(), continued by resume()
        self._lock = threading.RLock()

    # -- databases --------------------------------------------------------------------------------------------

    def create_database(self) -> str:
        return self.server.create_database()

    def drop_database(self, name: str) -> None:
        self.server.drop_database(name)

    def url(self, name: str) -> str:
        """The store URL of database ``name``, as ``cluster up --store`` takes it (the password in it)."""
        s = self.server
        return f"postgresql://postgres:{s.password}@{s.host}:{s.port}/{name}"

    def dump(self, name: str, path: Path) -> str | None:
        """``pg_dump`` of database ``name`` into ``path``; None when done, else why not (the caller says so)."""
        pg_dump = find_binaries().postgres.parent / "pg_dump"
        s = self.server
        command = [str(pg_dump), "--host", s.host, "--port", str(s.port), "--username", "postgres", "--file"]
        env = {**_env(path.parent), "PGPASSWORD": s.password}
        try:
            done = subprocess.run(
                [*command, str(path), name], env=env, capture_output=True, timeout=DUMP_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"pg_dump failed: {exc}"
        return None if done.returncode == 0 else f"pg_dump exited {done.returncode}: {done.stderr.decode()[-500:]}"

    # -- the faults -------------------------------------------------------------------------------------------

    def pause(self) -> list[int]:
        """SIGSTOP the postmaster, then every process it started; the pids stopped."""
        with self._lock:
            self._refuse_unless_up("pause")
            postmaster = self.server.pid
            os.kill(postmaster, signal.SIGSTOP)  # first: a stopped postmaster forks no backend we would miss
            stopped = [postmaster]
            for child in _children(postmaster):
                with contextlib.suppress(ProcessLookupError):  # a backend that ended meanwhile
                    os.kill(child, signal.SIGSTOP)
                    stopped.append(child)
            self._stopped, self.state = stopped, PAUSED
            return stopped

    def resume(self) -> None:
        """SIGCONT every process :meth:`pause` stopped (the postmaster last); nothing when not paused."""
        with self._lock:
            if self.state != PAUSED:
                return
            for pid in reversed(self._stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self._stopped, self.state = [], UP

    def stop(self) -> None:
        """Fast shutdown (SIGINT; then SIGQUIT and SIGKILL, each wait bounded), the process reaped."""
        with self._lock:
            self._refuse_unless_up("stop")
            self.server.stop()
            self.state = DOWN

    def start(self) -> None:
        """The server started again with its own command line (same data directory, port, settings, user); raises
        :class:`PostgresUnavailable` when it does not come up (it stays ``down``)."""
        with self._lock:
            if self.state != DOWN:
                return
            old = self.server.process
            with self.server.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
                process = subprocess.Popen(
                    old.args,
                    cwd=self.server.base_dir,
                    env=_env(self.server.base_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    **_Identity.for_server().popen_args(),
                )
            self.server.process = process  # whoever stops the server (its fixture, chaos_postgres) stops this one
            try:
                ready = _wait_ready(self.server)
            except BaseException:  # it did not answer in time: not left running beside the next attempt
                self.server.stop()
                raise
            if not ready:
                raise PostgresUnavailable(
                    f"the PostgreSQL server did not start again on port {self.server.port}; its log ends:\n"
                    f"{self.server.log_tail(10)}"
                )
            self.state = UP

    def heal(self) -> None:
        """Running and continued, whatever state it was left in (a start that fails is tried again, bounded)."""
        with self._lock:
            self.resume()
            for attempt in range(START_ATTEMPTS):
                try:
                    self.start()
                    return
                except PostgresUnavailable:
                    if attempt == START_ATTEMPTS - 1:
                        raise

    def answers(self) -> bool:
        """The server takes a connection and a query now (within 2 s)."""
        try:
            with psycopg.connect(self.server.dsn(), connect_timeout=2) as conn:
                conn.execute(sql.SQL("SELECT 1"))
            return True
        except psycopg.Error:
            return False

    def _refuse_unless_up(self, what: str) -> None:
        if self.state != UP:
            raise StoreFaultRefused(f"cannot {what} the PostgreSQL server: it is {self.state}")


def _children(pid: int) -> list[int]:
    """The live pids whose parent is ``pid``, read from /proc (zombies left: a backend that ended and that its
    postmaster has not reaped yet has nothing to stop)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


@contextlib.contextmanager
def chaos_postgres() -> Iterator[ChaosPostgres]:
    """A throwaway server for a whole chaos run, healed and then stopped by pid at the end, whatever happens.
    :class:`PostgresUnavailable` (naming the Debian package) when its binaries are not installed."""
    with running_postgres() as server:
        store = ChaosPostgres(server)
        try:
            yield store
        finally:
            store.resume()  # a paused postmaster would not act on the shutdown signal
