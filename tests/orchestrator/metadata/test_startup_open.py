"""Opening the PostgreSQL store at start-up: what counts as an unreachable server (waited for) and what as a refusal
(fails at once), and the bounded wait, run on an injected clock and sleep (no time passes)."""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg import errors as pg_errors
from structlog.testing import capture_logs

from orchestrator.errors import KafkaStorageError, SettingsError
from orchestrator.metadata.open import open_store_at_startup
from orchestrator.metadata.postgres.startup import STARTUP_BACKOFF, open_when_reachable, unreachable
from orchestrator.settings import StoreSettings

pytestmark = pytest.mark.unit

WHERE = "user=tieredctl password=*** dbname=tiered host=db.example port=5432"
REFUSED = 'connection failed: connection to server at "10.0.0.5", port 5432 failed: Connection refused'
CLOSED = "consuming input failed: server closed the connection unexpectedly"
BAD_PASSWORD = 'connection failed: ... failed: FATAL:  password authentication failed for user "tieredctl"'
NO_DATABASE = 'connection failed: ... failed: FATAL:  database "tiered" does not exist'
STARTING = "connection failed: ... failed: FATAL:  the database system is starting up"


def _store_error(cause: BaseException) -> KafkaStorageError:
    """A store error as the store raises it: translated, raised from psycopg's."""
    try:
        raise KafkaStorageError(f"{WHERE}: {cause}") from cause
    except KafkaStorageError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "waited_for"),
    [
        (psycopg.OperationalError(REFUSED), True),
        (psycopg.OperationalError(CLOSED), True),
        (psycopg.OperationalError(STARTING), True),
        (psycopg.OperationalError(BAD_PASSWORD), False),
        (psycopg.OperationalError(NO_DATABASE), False),
        (pg_errors.ConnectionFailure("lost"), True),
        (pg_errors.AdminShutdown("terminating connection due to administrator command"), True),
        (pg_errors.CannotConnectNow("starting up"), True),
        (pg_errors.TooManyConnections("too many"), True),
        (pg_errors.InvalidPassword("no"), False),
        (_store_error(psycopg.OperationalError(REFUSED)), True),
        (_store_error(psycopg.OperationalError(BAD_PASSWORD)), False),
        (KafkaStorageError("no cause"), False),
        (ValueError("not the store's"), False),
    ],
)
def test_an_unreachable_server_is_told_from_one_that_refuses(error: BaseException, waited_for: bool) -> None:
    assert unreachable(error) is waited_for


class Clock:
    """Seconds that pass only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Opener:
    """Fails with each of ``errors`` in turn, then returns ``"store"``; counts the calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "store"


def _open(opener: Opener, clock: Clock, timeout_s: float = 60.0) -> str:
    return open_when_reachable(
        opener, timeout_s=timeout_s, location=WHERE, sleep=clock.sleep, clock=clock, rng=random.Random(7)
    )


def test_an_unreachable_store_is_tried_again_on_the_start_up_backoff_until_it_opens() -> None:
    clock = Clock()
    down = _store_error(psycopg.OperationalError(REFUSED))
    opener = Opener(down, down, _store_error(psycopg.OperationalError(CLOSED)))
    with capture_logs() as logs:
        assert _open(opener, clock) == "store"
    assert opener.calls == 4 and len(clock.slept) == 3
    assert all(STARTUP_BACKOFF.floor <= s <= STARTUP_BACKOFF.cap for s in clock.slept)
    retries = [e for e in logs if e["event"] == "metadata.store.open_retry"]
    assert [e["attempt"] for e in retries] == [1, 2, 3] and all(e["store"] == WHERE for e in retries)


def test_a_store_that_refuses_fails_at_once_with_its_own_error() -> None:
    clock = Clock()
    refused = _store_error(psycopg.OperationalError(BAD_PASSWORD))
    opener = Opener(refused)
    with pytest.raises(KafkaStorageError) as raised:
        _open(opener, clock)
    assert raised.value is refused and opener.calls == 1 and clock.slept == []


def test_a_store_unreachable_for_the_whole_wait_fails_naming_the_store_the_wait_and_what_to_check() -> None:
    clock = Clock()
    password = "s3cret-never-shown"
    down = _store_error(psycopg.OperationalError(REFUSED))
    opener = Opener(*[down] * 1000)
    with pytest.raises(KafkaStorageError) as raised:
        _open(opener, clock, timeout_s=10.0)
    message = raised.value.message
    assert WHERE in message and "startup_timeout_ms" in message and "Connection refused" in message
    assert "Check that the PostgreSQL server runs" in message and password not in message
    assert 10.0 <= clock.now - 100.0 <= 10.0 + STARTUP_BACKOFF.cap, "no attempt starts after the bound"
    assert 5 < opener.calls < 1000


def test_a_wait_of_zero_tries_once() -> None:
    clock = Clock()
    down = _store_error(psycopg.OperationalError(REFUSED))
    opener = Opener(down)
    with pytest.raises(KafkaStorageError) as raised:
        _open(opener, clock, timeout_s=0)
    assert raised.value is down and opener.calls == 1


def test_a_negative_start_up_wait_is_refused_as_a_setting() -> None:
    with pytest.raises(SettingsError, match="startup_timeout_ms"):
        open_store_at_startup("postgresql://u@127.0.0.1:1/x", settings=StoreSettings(startup_timeout_ms=-1))
