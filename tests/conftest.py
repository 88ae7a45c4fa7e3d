"""Shared fixtures. Every server a test starts binds 127.0.0.1 on a free port and is stopped by the test."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest

from remote_storage.s3 import make_s3_client
from tests.support.postgres_server import PostgresServer, running_postgres

# boto3 needs credentials even for moto; these fake ones never leave the machine.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


logging.getLogger("werkzeug").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server mode: a real HTTP S3 endpoint on loopback, one per test session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_client(moto_endpoint: str):  # type: ignore[no-untyped-def]
    return make_s3_client(endpoint_url=moto_endpoint)


@pytest.fixture
def bucket(s3_client) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty bucket per test."""
    name = f"test-{uuid.uuid4().hex[:20]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole run (start-up costs seconds): local[2], small shuffles, UI off."""
    from remote_storage.scan.session import build_session

    session = build_session(master="local[2]", driver_memory="1g", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session, started only if a test asks for it (127.0.0.1, free port,
    stopped by pid at the end; see ``tests.support.postgres_server``)."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A DSN (with its password) of a database made for this test alone, dropped after it."""
    name = postgres_server.create_database()
    yield postgres_server.dsn(name)
    postgres_server.drop_database(name)
