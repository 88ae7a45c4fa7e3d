"""Open the metadata store a process is configured with: the one place that turns a store spec into a backend.

A *store spec* (the ``metadata_store`` setting, ``cluster up --store``) is a path or a URL:

* a path (``metadata.db``, ``/var/lib/tieredctl/metadata.db``) or ``sqlite:///ABSOLUTE/PATH``: the SQLite file
  every process of the cluster shares (:class:`~orchestrator.metadata.sqlite.SqliteMetadataStore`);
* ``postgresql://USER@HOST:PORT/DBNAME?sslmode=...`` (or ``postgres://``): a PostgreSQL database, for processes
  that share no file system (:class:`~orchestrator.metadata.postgres.PostgresMetadataStore`), in the schema and
  with the server-side timeouts of the ``[store]`` settings.

The PostgreSQL password comes, first found: from the ``password`` argument (an entry point read it from
``[store] password_file``, see :func:`read_password`), from the environment variable ``TIEREDCTL_STORE_PASSWORD``,
or from libpq's own sources (a password in the DSN, ``PGPASSWORD``, ``~/.pgpass``).

Invariants:

* A password never reaches a log line, an error message or :attr:`StoreSpec.location`: a DSN leaves this module
  only through :func:`~orchestrator.metadata.postgres.masked_dsn`, and a password file's content is never quoted.
* A spec with any other scheme (``mysql://``, a typo such as ``postgresq://``) is refused with
  :class:`SettingsError`; it is never taken for a relative path, which would silently create a SQLite file.
* Reading the password file and the environment happens at the entry point (:func:`read_password`, given the
  environment); :func:`open_store` itself reads neither files nor the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from orchestrator.errors import InvalidArgument, SettingsError
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import MetadataStore

if TYPE_CHECKING:
    from orchestrator.metadata.postgres import SessionTimeouts

# psycopg and the PostgreSQL store are imported where a postgresql:// spec is met: a command or process on SQLite
# (or on no store at all) starts without them.
from orchestrator.settings import StoreSettings

PASSWORD_ENV = "TIEREDCTL_STORE_PASSWORD"
POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
SQLITE_SCHEME = "sqlite"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

Backend = Literal["sqlite", "postgresql"]


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """A parsed store spec: ``target`` is the SQLite file's path or the DSN as given (password and all)."""

    backend: Backend
    target: str

    @property
    def location(self) -> str:
        """What logs, errors and ``cluster status`` show: the path, or the DSN with its password masked."""
        if self.backend != "postgresql":
            return self.target
        from orchestrator.metadata.postgres import masked_dsn

        return masked_dsn(self.target)

    @property
    def is_postgresql(self) -> bool:
        return self.backend == "postgresql"


def parse_store_spec(spec: str | Path) -> StoreSpec:
    """The backend a spec names (see the module docstring); :class:`SettingsError` for a scheme we do not know."""
    text = str(spec)
    if not text:
        raise SettingsError("the metadata store spec is empty: give a SQLite file path or a postgresql:// URL")
    match = _SCHEME.match(text)
    if match is None:
        return StoreSpec("sqlite", text)
    scheme = match.group(1).lower()
    if scheme in POSTGRES_SCHEMES:
        from orchestrator.metadata.postgres.connection import check_dsn

        try:
            check_dsn(text)
        except InvalidArgument as exc:
            raise SettingsError(f"the metadata store URL: {exc.message}") from None
        return StoreSpec("postgresql", text)
    if scheme == SQLITE_SCHEME:
        path = text[match.end() :]
        if not path.startswith("/"):
            raise SettingsError(f"sqlite:// needs an absolute path (sqlite:///PATH), got {text!r}")
        return StoreSpec("sqlite", path)
    raise SettingsError(
        f"the metadata store {scheme}://... is not supported: give a SQLite file path (or sqlite:///PATH) or a "
        "postgresql:// URL"
    )


def split_password(dsn: str) -> tuple[str, str | None]:
    """A ``postgresql://`` URL without its password (in the user info or a ``password=`` parameter), and the
    password it held (None when it held none). ``cluster up`` uses it to keep a password out of settings files."""
    parts = urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    password: str | None = None
    if at and ":" in userinfo:
        user, _, quoted = userinfo.partition(":")
        userinfo, password = user, unquote(quoted)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if k != "password"]
    if len(kept) != len(query):
        password = [v for k, v in query if k == "password"][-1]
    netloc = f"{userinfo}@{hosts}" if at else hosts
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(kept))), password


def read_password(settings: StoreSettings, environ: Mapping[str, str]) -> str | None:
    """The store password an entry point passes to :func:`open_store`: the content of ``settings.password_file``
    (without its trailing newline), else ``environ[TIEREDCTL_STORE_PASSWORD]``, else None (libpq's own sources).
    A missing or empty file is a :class:`SettingsError` naming the file, never its content."""
    if settings.password_file:
        path = Path(settings.password_file)
        try:
            password = path.read_text().rstrip("\r\n")
        except OSError as exc:
            raise SettingsError(f"[store] password_file {path} cannot be read: {exc.strerror}") from None
        if not password:
            raise SettingsError(f"[store] password_file {path} is empty")
        return password
    return environ.get(PASSWORD_ENV) or None


def session_timeouts(settings: StoreSettings) -> SessionTimeouts:
    from orchestrator.metadata.postgres import SessionTimeouts

    return SessionTimeouts(
        statement_timeout_ms=settings.statement_timeout_ms,
        lock_timeout_ms=settings.lock_timeout_ms,
        idle_in_transaction_timeout_ms=settings.idle_in_transaction_timeout_ms,
        connect_timeout_s=settings.connect_timeout_s,
        response_timeout_ms=settings.response_timeout_ms,
    )


def open_store(
    spec: str | Path,
    *,
    settings: StoreSettings | None = None,
    password: str | None = None,
    recover_on_open: bool = True,
    application_name: str = "tieredctl",
) -> MetadataStore:
    """The store ``spec`` names, opened (see the module docstring). ``password`` is for PostgreSQL only: it
    overrides any password the DSN holds. ``recover_on_open`` as each backend's constructor."""
    parsed = parse_store_spec(spec)
    if not parsed.is_postgresql:
        if settings is not None and settings.password_file:
            raise SettingsError(f"[store] password_file is set but the metadata store {parsed.target} is SQLite")
        return SqliteMetadataStore(parsed.target, recover_on_open=recover_on_open)
    from psycopg.conninfo import make_conninfo

    from orchestrator.metadata.postgres import PostgresMetadataStore

    settings = settings or StoreSettings()
    dsn = parsed.target if password is None else make_conninfo(parsed.target, password=password)
    return PostgresMetadataStore(
        dsn,
        schema=settings.schema,
        timeouts=session_timeouts(settings),
        recover_on_open=recover_on_open,
        application_name=application_name,
    )


def open_store_at_startup(
    spec: str | Path,
    *,
    settings: StoreSettings | None = None,
    password: str | None = None,
    recover_on_open: bool = True,
    application_name: str = "tieredctl",
) -> MetadataStore:
    """:func:`open_store` for a process starting up: a PostgreSQL server that cannot be reached yet is waited for,
    at most ``[store] startup_timeout_ms`` (:mod:`orchestrator.metadata.postgres.startup`); SQLite opens at once."""
    parsed = parse_store_spec(spec)

    def open_() -> MetadataStore:
        return open_store(
            spec,
            settings=settings,
            password=password,
            recover_on_open=recover_on_open,
            application_name=application_name,
        )

    if not parsed.is_postgresql:
        return open_()
    from orchestrator.metadata.postgres.startup import open_when_reachable

    timeout_ms = (settings or StoreSettings()).startup_timeout_ms
    if timeout_ms < 0:
        raise SettingsError(f"[store] startup_timeout_ms must be 0 or more, got {timeout_ms}")
    timeout_s = timeout_ms / 1000
    return open_when_reachable(open_, timeout_s=timeout_s, location=parsed.location)


__all__ = [
    "PASSWORD_ENV",
    "StoreSpec",
    "open_store",
    "open_store_at_startup",
    "parse_store_spec",
    "read_password",
    "session_timeouts",
    "split_password",
]
