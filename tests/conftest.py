"""Shared fixtures and the rules of the test loop. Every server a test starts binds 127.0.0.1 on a free port and
is stopped by the test.

The loop (README, "Tests"):

* every test is exactly one kind, ``unit``, ``integration`` or ``spark``; collection fails naming any that is not
  (:mod:`tests.support.markers`), and a ``unit`` test that connects a socket, starts a process or sleeps fails
  (:mod:`tests.support.unit_guard`);
* every run writes each test's durations to ``var/test-reports/`` (:mod:`tests.support.durations`);
* ``--soak`` runs the soak-sized tests at full size (:mod:`tests.support.soak`), and ``--examples-cap=N`` runs
  every property test with at most N examples (:mod:`tests.support.examples`, for ``make check``);
* under pytest-xdist every worker has its own moto server, PostgreSQL server, temporary directories and slice of
  ports (:mod:`tests.support.ports`) and its own SparkSession; ``make test`` hands out whole modules, the longest
  first, and the modules that use the SparkSession to one worker together (:mod:`tests.support.schedule`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import Cryptodome.PublicKey.RSA  # noqa: F401  (see below)
import pytest
from hypothesis import HealthCheck, settings

from remote_storage.s3 import make_s3_client
from tests.support import soak
from tests.support.durations import DurationsReport
from tests.support.examples import cap_examples
from tests.support.markers import kind_problem, unmarked_report
from tests.support.postgres_server import PostgresServer, running_postgres
from tests.support.schedule import longest_first, make_scheduler, spark_outside_group
from tests.support.unit_guard import forbidding_io

# pycryptodomex runs ``ldconfig -p`` (ctypes' find_library, looking for libgmp) the first time its RSA module is
# imported in a process, and the key-ring code imports it on first use. Imported here, at collection, it never starts
# that process inside a unit test, whichever test of a worker happens to be first (run alone, the remote-storage set-up
# tests failed the unit guard on it; in the full suite an earlier test had imported it already).

# boto3 needs credentials even for moto; these fake ones never leave the machine.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


logging.getLogger("werkzeug").setLevel(logging.WARNING)

# No test asserts how long a step takes (timings belong in `make bench`): hypothesis's per-example deadline and its
# too-slow health check would do exactly that, and fail on a loaded machine. Tests still choose their sizes.
settings.register_profile("tieredctl", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tieredctl")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the soak-sized tests at full size (make soak: pytest --soak -m soak); sets TIEREDCTL_SOAK=1",
    )
    parser.addoption(
        "--examples-cap",
        type=int,
        default=None,
        metavar="N",
        help="run every hypothesis test with at most N examples (make check; see tests/support/examples.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("soak"):
        os.environ[soak.ENV] = "1"  # before the test modules are imported: their sizes are read at import
    if not hasattr(config, "workerinput"):  # the process that reports: serial, or pytest-xdist's controller
        config.pluginmanager.register(DurationsReport(list(config.invocation_params.args)), "tieredctl-durations")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    """A module (or class) with a test that is not exactly one kind fails to collect, naming each such test: an
    error in every run, serial or parallel, before -m selects anything, so none can slip out of make check."""
    report: pytest.CollectReport = yield
    if report.passed:
        problems = {}
        for item in report.result:
            if isinstance(item, pytest.Item):
                why = kind_problem(mark.name for mark in item.iter_markers())
                if why is not None:
                    problems[item.nodeid] = why
        if problems:
            report.outcome = "failed"
            report.longrepr = unmarked_report(problems)
            report.result = []
    return report


SPARK_TIMEOUT_S = 600
"""A Spark test's hang guard (the default is pyproject's 120 s). Spark tests share one SparkSession per worker, and
a timeout that interrupts a call into the JVM leaves its gateway out of step, so every later Spark test of that
worker fails too: the guard must only ever catch a hang, never a slow run on a loaded machine."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadscope`` with the modules that share the SparkSession as one unit (tests.support.schedule)."""
    return make_scheduler(config, log) if config.getoption("dist", None) == "loadscope" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    outside = spark_outside_group([i.nodeid for i in items if "spark" in getattr(i, "fixturenames", ())])
    if outside:
        raise pytest.UsageError(
            f"{', '.join(outside)} use the spark fixture but are not in tests/support/schedule.py's "
            "SPARK_SESSION_MODULES: add them, so that make test runs them on the worker whose SparkSession is warm"
        )
    items[:] = longest_first(items)  # what make test's workers get first (tests.support.schedule)
    for item in items:
        if item.get_closest_marker("spark") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))
    cap = config.getoption("examples_cap")
    if cap is not None:
        for item in items:
            cap_examples(getattr(item, "obj", None), getattr(item, "cls", None), cap)


@pytest.fixture(autouse=True)
def _unit_tests_stay_pure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``unit`` test that connects a socket, starts a process or sleeps fails (see tests.support.unit_guard)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    with forbidding_io():
        yield


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
    """One local SparkSession for the whole run (start-up costs seconds): local[2], small shuffles, UI off, and the
    quick JIT of a small job (every test's inventory is small: remote_storage/scan/session.py)."""
    from remote_storage.scan import class_archive
    from remote_storage.scan.session import build_session

    archive = class_archive.installed()  # make setup builds it: the JVM starts in about half the time
    session = build_session(
        master="local[2]", driver_memory="1g", shuffle_partitions=2, quick_jit=True, class_archive=archive
    )
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
