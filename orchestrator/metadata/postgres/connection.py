"""The edge of the PostgreSQL backend: connecting with bounded server-side timeouts, and what may be logged.

Every connection the store opens is set up the same way, before it runs anything else:

* ``autocommit`` on the client, so a read is one statement and a write is an explicit ``BEGIN ... COMMIT``
  (``Connection.transaction()``); the isolation level is pinned to READ COMMITTED whatever the server's
  default is, because the store's writes are serialized by a row lock, not by serializable snapshots (see
  :mod:`.store`), and under READ COMMITTED each statement after that lock sees everything committed before it.
* ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` are set for the session,
  so a client paused mid-transaction (SIGSTOP, a partition, a debugger) holds the store's write lock for at
  most the idle timeout: the server then ends its session and rolls its transaction back, and the others,
  who waited at most ``lock_timeout`` per attempt, get a retriable :class:`KafkaStorageError` meanwhile.
* ``search_path`` is the store's own schema, so the tables can share a database with anything else.

Invariants:

* A DSN's password never reaches a log line or an error message: :func:`masked_dsn` is the only form of a DSN
  that leaves this module, and a DSN that does not parse is refused without libpq's message (which quotes the
  text it could not parse, password included).
* psycopg's errors are translated at this boundary (:func:`translate`): damage the server reports (``XX001``,
  ``XX002``) is :class:`MetadataLogCorrupt`; everything else (timeouts, lost connections, a server shutting
  down) is the retriable :class:`KafkaStorageError`, naming the masked DSN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from orchestrator.errors import InvalidArgument, KafkaStorageError, MetadataLogCorrupt, TieredError

Connection = psycopg.Connection[TupleRow]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MASK = "***"


@dataclass(frozen=True, slots=True)
class SessionTimeouts:
    """Server-side limits set on every connection (milliseconds; 0 would mean "none" and is refused)."""

    # One statement may run this long; a page of records or one transaction step is far below it.
    statement_timeout_ms: int = 5_000
    # Waiting for the write lock (or any row lock) gives up after this long, as a retriable error.
    lock_timeout_ms: int = 5_000
    # A session idle inside a transaction this long is ended by the server, releasing the write lock.
    idle_in_transaction_timeout_ms: int = 10_000
    # Establishing the connection (libpq's connect_timeout, whole seconds, at least 2 as libpq requires).
    connect_timeout_s: int = 10
    # The client's own bound on one store operation (a read, or a whole write transaction): a server that answers
    # nothing for this long (SIGSTOPped, a link that drops packets) is taken for gone, its connection shut and the
    # operation failed, retriable (.watchdog). Above the server-side bounds, which end what the server does.
    response_timeout_ms: int = 15_000

    def __post_init__(self) -> None:
        for name in ("statement_timeout_ms", "lock_timeout_ms", "idle_in_transaction_timeout_ms"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be a positive number of milliseconds, got {getattr(self, name)}")
        if self.response_timeout_ms <= max(self.statement_timeout_ms, self.lock_timeout_ms):
            raise InvalidArgument(
                f"response_timeout_ms ({self.response_timeout_ms}) must be above statement_timeout_ms and "
                "lock_timeout_ms: it bounds a server that answers nothing, not a slow statement"
            )
        if self.connect_timeout_s < 2:
            raise InvalidArgument(f"connect_timeout_s must be at least 2 seconds, got {self.connect_timeout_s}")


def masked_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ``***``, in ``key=value`` form; safe to log."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<a DSN that does not parse>"
    if "password" in params:
        params["password"] = _MASK
    return make_conninfo("", **params)


def check_dsn(dsn: str) -> None:
    """Refuse a DSN that libpq cannot parse, without repeating libpq's message (it may quote the password)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        # ``from None``: libpq's message, which quotes the DSN, must not ride along in the traceback either.
        raise InvalidArgument(
            "the PostgreSQL DSN does not parse (its text is not repeated: it may hold a password)"
        ) from None


def check_schema_name(schema: str) -> None:
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidArgument(
            f"{schema!r} is not a usable schema name: 1-63 characters of [a-z0-9_], not starting with a digit"
        )


def connect(dsn: str, *, schema: str, timeouts: SessionTimeouts, application_name: str) -> Connection:
    """Open one connection set up as the module docstring says."""
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=timeouts.connect_timeout_s,
        application_name=application_name,
    )
    try:
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        search_path = sql.Identifier(schema).as_string(conn)
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false), "
            "set_config('idle_in_transaction_session_timeout', %s, false), set_config('search_path', %s, false)",
            (
                str(timeouts.statement_timeout_ms),
                str(timeouts.lock_timeout_ms),
                str(timeouts.idle_in_transaction_timeout_ms),
                search_path,
            ),
        )
    except BaseException:
        conn.close()
        raise
    return conn


_DAMAGE = (pg_errors.DataCorrupted, pg_errors.IndexCorrupted)


def translate(exc: psycopg.Error, *, where: str) -> TieredError:
    """The store's error for a psycopg error (see the module docstring); ``where`` is the masked DSN."""
    detail = f"{type(exc).__name__}: {str(exc).strip()}"
    if isinstance(exc, _DAMAGE):
        return MetadataLogCorrupt(f"{where}: the server reports damage ({detail}); run recover()")
    return KafkaStorageError(f"{where}: {detail}")


__all__ = ["Connection", "SessionTimeouts", "check_dsn", "check_schema_name", "connect", "masked_dsn", "translate"]
