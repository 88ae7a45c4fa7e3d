"""A real, throwaway PostgreSQL server for the tests: ``initdb`` in a temporary directory, the ``postgres`` server
on a free 127.0.0.1 port, stopped by its pid and deleted at the end.

How it runs:

* **Binaries.** ``initdb`` and ``postgres`` come from the same directory: the one ``/usr/local/bin/initdb``
  links to, else the newest ``/usr/lib/postgresql/<N>/bin``, else ``initdb`` on ``PATH``. Missing binaries are
  a :class:`PostgresUnavailable` error naming the Debian package (``postgresql``): the tests using the server
  fail, they are never skipped.
* **Not as root.** PostgreSQL refuses to run as root. When the tests run as root, ``initdb`` and the server run
  as the unprivileged ``nobody`` user: ``subprocess``'s ``user=``/``group=``/``extra_groups=`` switch identity in
  the child between fork and exec (no ``preexec_fn``, which is unsafe in a process with threads). The data
  directory is made under the system temp directory and given to that user, because pytest's own temp
  directories belong to root with mode 0700 and ``nobody`` could not enter them. As any other user, everything
  runs as that user.
* **Our child, by pid.** The server is ``postgres`` itself started with ``Popen`` (not ``pg_ctl``, whose server
  would be re-parented away from us): the session knows its pid, stops it with SIGINT (PostgreSQL's fast
  shutdown), waits for it, and falls back to SIGQUIT and then SIGKILL, each wait bounded.
* **Reachable only here.** It listens on 127.0.0.1 alone, on a port picked free just before from this pytest-xdist
  worker's slice below the ephemeral range (:mod:`tests.support.ports`; a start that loses the port to a race is
  retried, a bounded number of times); its Unix socket lives in the private directory. Each xdist worker starts
  its own server (the fixture is session-scoped, and a session is one worker's).
  Connections over TCP need the password, a random one per server (SCRAM), so the store's handling of a DSN
  with a password is exercised for real.
* **Fast, not durable.** ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are off: the tests never
  crash the machine, and on a small CI box they would otherwise spend their time waiting for the disk.
* **One database per test.** :meth:`PostgresServer.create_database` makes a fresh database (from ``template0``)
  and :meth:`PostgresServer.drop_database` drops it, ending any connection a test left open.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.ports import free_port

DEBIAN_PACKAGE = "postgresql"  # provides /usr/lib/postgresql/<N>/bin (e.g. postgresql-15 on Debian 12)
SUPERUSER = "postgres"
UNPRIVILEGED_USER = "nobody"
START_ATTEMPTS = 3
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL binaries are missing or the server would not start; the message says what to do."""


@dataclass(frozen=True, slots=True)
class PostgresBinaries:
    initdb: Path
    postgres: Path


def find_binaries() -> PostgresBinaries:
    """``initdb`` and ``postgres`` from one directory (see the module docstring), or :class:`PostgresUnavailable`."""
    candidates: list[Path] = []
    local = Path("/usr/local/bin/initdb")
    if local.exists():
        candidates.append(local.resolve().parent)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version_key(p.parent.name))
    candidates.extend(reversed(versions))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates = list(dict.fromkeys(candidates))  # the same directory, reached by several routes, is tried once
    for directory in candidates:
        initdb, postgres = directory / "initdb", directory / "postgres"
        if os.access(initdb, os.X_OK) and os.access(postgres, os.X_OK):
            return PostgresBinaries(initdb, postgres)
    looked = ", ".join(str(c) for c in candidates) or "/usr/local/bin, /usr/lib/postgresql/*/bin, PATH"
    raise PostgresUnavailable(
        f"the PostgreSQL server binaries (initdb and postgres) were not found (looked in: {looked}). Install the "
        f"Debian package '{DEBIAN_PACKAGE}' (apt-get install -y {DEBIAN_PACKAGE}, which brings postgresql-<N>); "
        "the PostgreSQL metadata-store tests need a real server and are not skipped without one"
    )


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (-1,)


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who runs initdb and the server: ``nobody`` when we are root, else ourselves (no switch)."""

    uid: int | None = None
    gid: int | None = None

    @classmethod
    def for_server(cls) -> _Identity:
        if os.geteuid() != 0:
            return cls()
        try:
            entry = pwd.getpwnam(UNPRIVILEGED_USER)
        except KeyError:
            raise PostgresUnavailable(
                f"running as root, and PostgreSQL refuses root: it must run as '{UNPRIVILEGED_USER}', "
                "which this system does not have"
            ) from None
        return cls(entry.pw_uid, entry.pw_gid)

    def popen_args(self) -> dict[str, Any]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def give(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


@dataclass
class PostgresServer:
    """A running server (see the module docstring). ``pid`` is the postmaster's."""

    host: str
    port: int
    password: str
    base_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(
            "", host=self.host, port=str(self.port), user=SUPERUSER, password=self.password, dbname=dbname
        )

    def create_database(self) -> str:
        name = f"test_{secrets.token_hex(6)}"
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGQUIT, then SIGKILL, each wait bounded; always reaps the process."""
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
            if self.process.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def running_postgres(*, host: str = "127.0.0.1") -> Iterator[PostgresServer]:
    """Start a fresh server (initdb + postgres), yield it, stop it by pid and delete its directory."""
    binaries = find_binaries()
    identity = _Identity.for_server()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one server per pytest-xdist worker: say whose
    base = Path(tempfile.mkdtemp(prefix=f"tieredctl-pg-{worker}-"))
    server: PostgresServer | None = None
    log_file: IO[bytes] | None = None
    try:
        identity.give(base)
        password = secrets.token_hex(16)
        _initdb(binaries, identity, base, password)
        log_path = base / "server.log"
        log_file = log_path.open("ab")
        server = _start(binaries, identity, base, host, password, log_path, log_file)
        yield server
    finally:
        if server is not None:
            server.stop()
        if log_file is not None:
            log_file.close()
        shutil.rmtree(base, ignore_errors=True)


def _env(base: Path) -> dict[str, str]:
    # A clean environment: no PGDATA/PGPORT/... from the caller's shell, a HOME the server's user can read.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base), "LC_ALL": "C", "LANG": "C"}


def _initdb(binaries: PostgresBinaries, identity: _Identity, base: Path, password: str) -> None:
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    identity.give(pwfile)
    try:
        result = subprocess.run(
            [
                str(binaries.initdb),
                "--pgdata",
                str(base / "data"),
                "--username",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth-local",
                "trust",
                "--auth-host",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            cwd=base,
            env=_env(base),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=START_TIMEOUT_S,
            check=False,
            **identity.popen_args(),
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")[-3000:]
        raise PostgresUnavailable(f"initdb failed (exit {result.returncode}) in {base}:\n{output}")


def _start(
    binaries: PostgresBinaries,
    identity: _Identity,
    base: Path,
    host: str,
    password: str,
    log_path: Path,
    log_file: IO[bytes],
) -> PostgresServer:
    """Start ``postgres`` on a free port; retry (bounded) only when the port was taken between pick and bind."""
    last = ""
    for _attempt in range(START_ATTEMPTS):
        port = free_port(host)
        process = subprocess.Popen(
            [
                str(binaries.postgres),
                "-D",
                str(base / "data"),
                "-p",
                str(port),
                "-c",
                f"listen_addresses={host}",
                "-c",
                f"unix_socket_directories={base}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=100",
            ],
            cwd=base,
            env=_env(base),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,  # a ^C in the terminal reaches pytest, which then stops the server itself
            **identity.popen_args(),
        )
        server = PostgresServer(host, port, password, base, log_path, process)
        try:
            if _wait_ready(server):
                return server
        except BaseException:
            server.stop()
            raise
        server.stop()
        last = server.log_tail()
        if "could not bind" not in last and "already in use" not in last:
            break
    raise PostgresUnavailable(f"the PostgreSQL server did not start; its log ({log_path}) ends:\n{last}")


def _wait_ready(server: PostgresServer) -> bool:
    """Poll (bounded) until the server accepts a connection (True) or exits (False)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            with psycopg.connect(server.dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            time.sleep(POLL_INTERVAL_S)
    raise PostgresUnavailable(
        f"the PostgreSQL server (pid {server.pid}) did not accept connections within {START_TIMEOUT_S}s; "
        f"its log ends:\n{server.log_tail()}"
    )
