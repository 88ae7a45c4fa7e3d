"""The store factory: which backend a spec names, where the password comes from, and that it is never shown;
and that a PostgreSQL store wakes a waiting follower when another process commits a change."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InvalidArgument, SettingsError
from orchestrator.metadata.open import (
    PASSWORD_ENV,
    open_store,
    parse_store_spec,
    read_password,
    session_timeouts,
    split_password,
)
from orchestrator.metadata.postgres import PostgresMetadataStore, SessionTimeouts
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.settings import StoreSettings, load_broker_settings


@pytest.mark.unit
def test_a_path_or_a_sqlite_url_names_the_sqlite_backend() -> None:
    assert parse_store_spec("metadata.db").backend == "sqlite"
    assert parse_store_spec("/var/lib/t/metadata.db").target == "/var/lib/t/metadata.db"
    assert parse_store_spec("sqlite:///var/lib/t/metadata.db").target == "/var/lib/t/metadata.db"


@pytest.mark.unit
@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_names_the_postgresql_backend_and_its_location_masks_the_password(scheme: str) -> None:
    spec = parse_store_spec(f"{scheme}://admin:s3cret@db.example:5432/tiered")
    assert spec.is_postgresql
    assert "s3cret" not in spec.location and "***" in spec.location


@pytest.mark.unit
@pytest.mark.parametrize("spec", ["mysql://db/x", "postgresq://db/x", "sqlite://relative.db", ""])
def test_an_unknown_scheme_or_a_bad_url_is_refused_never_taken_for_a_path(spec: str) -> None:
    with pytest.raises(SettingsError):
        parse_store_spec(spec)


@pytest.mark.unit
def test_split_password_takes_the_password_out_of_the_user_info_or_the_query() -> None:
    assert split_password("postgresql://u:p%40ss@h:5432/db?sslmode=require") == (
        "postgresql://u@h:5432/db?sslmode=require",
        "p@ss",
    )
    assert split_password("postgresql://u@h/db?password=x&sslmode=disable") == (
        "postgresql://u@h/db?sslmode=disable",
        "x",
    )
    assert split_password("postgresql://u@h/db") == ("postgresql://u@h/db", None)


@pytest.mark.unit
def test_the_password_file_wins_over_the_environment_and_an_empty_or_missing_file_is_refused_unquoted(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    env = {PASSWORD_ENV: "from-env"}
    assert read_password(StoreSettings(password_file=str(secret)), env) == "from-file"
    assert read_password(StoreSettings(), env) == "from-env"
    assert read_password(StoreSettings(), {}) is None
    secret.write_text("")
    with pytest.raises(SettingsError, match="is empty"):
        read_password(StoreSettings(password_file=str(secret)), env)
    with pytest.raises(SettingsError, match="cannot be read"):
        read_password(StoreSettings(password_file=str(tmp_path / "missing")), env)


@pytest.mark.unit
def test_open_store_opens_sqlite_for_a_path_and_refuses_a_password_file_for_it(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    assert isinstance(store, SqliteMetadataStore)
    store.close()
    with pytest.raises(SettingsError, match="SQLite"):
        open_store(tmp_path / "m.db", settings=StoreSettings(password_file=str(tmp_path / "pw")))


@pytest.mark.unit
def test_the_store_settings_defaults_are_the_postgresql_sessions_defaults() -> None:
    assert session_timeouts(StoreSettings()) == SessionTimeouts()


@pytest.mark.unit
def test_the_client_side_bound_on_a_postgresql_operation_is_above_the_server_side_ones() -> None:
    with pytest.raises(InvalidArgument, match="response_timeout_ms"):
        SessionTimeouts(statement_timeout_ms=5_000, response_timeout_ms=5_000)
    assert session_timeouts(StoreSettings(response_timeout_ms=20_000)).response_timeout_ms == 20_000


@pytest.mark.unit
def test_settings_keep_a_store_url_as_written_and_resolve_a_path_and_the_password_file(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    base = '[broker]\nbroker_id = 1\ndata_dir = "d"\ncontrollers = "127.0.0.1:1"\n'
    cfg.write_text(
        base + 'metadata_store = "postgresql://u@h/db"\n[store]\npassword_file = "pw"\nlock_timeout_ms = 500\n'
    )
    settings = load_broker_settings(cfg)
    assert settings.metadata_store == "postgresql://u@h/db"
    assert settings.store.password_file == str(tmp_path / "pw")
    assert settings.store.lock_timeout_ms == 500
    cfg.write_text(base + 'metadata_store = "metadata.db"\n')
    assert load_broker_settings(cfg).metadata_store == str(tmp_path / "metadata.db")


@pytest.mark.integration
def test_open_store_opens_postgresql_with_the_password_given_apart_from_the_url(postgres_server) -> None:  # type: ignore[no-untyped-def]
    name = postgres_server.create_database()
    try:
        url = f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}"
        store = open_store(url, password=postgres_server.password, recover_on_open=False)
        try:
            assert isinstance(store, PostgresMetadataStore)
            assert postgres_server.password not in repr(store)
            assert store.end_offset() == 0
            # The first wait opens the listening connection and answers "changed" at once (what was committed before
            # it was never notified); after that, a wait with no commit times out.
            assert store.wait_for_change(timeout_s=30) is True
            assert store.wait_for_change(timeout_s=0.05) is False
            other = open_store(url, password=postgres_server.password, recover_on_open=False)
            try:
                other.acquire_lease(holder="c1", now_ms=0, ttl_ms=1000)  # commits a NOTIFY
            finally:
                other.close()
            assert store.wait_for_change(timeout_s=30) is True  # woken by the notification, not the timeout
        finally:
            store.close()
    finally:
        postgres_server.drop_database(name)
