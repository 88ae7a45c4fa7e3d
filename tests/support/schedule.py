"""The order ``make test`` hands modules to its workers: the longest first, so no worker is left running one alone.

pytest-xdist's ``--dist loadscope`` hands out whole modules in the order it is given them (``make test`` passes
``--no-loadscope-reorder``: xdist's own order, most tests first, put the long modules of one or two tests last, and
one worker ran the demo and the standalone Spark cluster alone for the run's last minute). :data:`LONGEST` names the
modules that take longest (``make slowest`` lists them); :func:`longest_first` moves their tests to the front, in
that order, and leaves every other test where collection put it.

The modules whose tests use the worker's SparkSession (the ``spark`` fixture) go to one worker together, as one
unit of work (:data:`SPARK_SESSION_MODULES`, :func:`scope_of`, :class:`SharedScopeScheduling`): spread over the
workers, each started its own JVM and paid its cold start, and the first scan on each JVM took 15 to 18 s more than
the next ones.

Invariants: the same tests come out, each module's tests together and in their order; a name in :data:`LONGEST`
or :data:`SPARK_SESSION_MODULES` that is no module is a test failure (``tests/support/test_schedule.py``), so the
lists cannot rot unseen, and collection fails naming a module that uses the ``spark`` fixture outside the group
(:func:`spark_outside_group`). A module missing from :data:`LONGEST` only runs later than it might.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from xdist.scheduler import LoadScopeScheduling

SPARK_SESSION = "spark-session"
"""The unit of work of the modules that share the worker's SparkSession."""

SPARK_SESSION_MODULES = (
    "tests/remote_storage/scan/test_agreement.py",
    "tests/remote_storage/scan/test_standalone_cluster.py",
    "tests/orchestrator/cli/test_scan_commands.py",
    "tests/remote_storage/scan/test_aiven_bucket.py",
    "tests/remote_storage/scan/test_kafka_source.py",
    "tests/remote_storage/scan/test_sources.py",
    "tests/remote_storage/scan/test_planted_bucket.py",
    "tests/remote_storage/scan/test_native_parquet.py",
    "tests/remote_storage/scan/test_session.py",
    "tests/remote_storage/scan/test_class_archive.py",
    "tests/remote_storage/scan/test_segment_facts.py",
    "tests/remote_storage/scan/test_parse_keys.py",
)

LONGEST = (
    SPARK_SESSION,
    "tests/chaos/test_seeds.py",
    "tests/orchestrator/test_demo.py",
    "tests/orchestrator/clients/test_replication_live.py",
    "tests/orchestrator/local/test_cluster_restart.py",
    "tests/orchestrator/cli/test_store_unavailable.py",
    "tests/orchestrator/cli/test_commands.py",
    "tests/orchestrator/cli/test_newcomer.py",
    "tests/orchestrator/protocol/test_crosscheck.py",
    "tests/orchestrator/local/test_cluster_starts.py",
    "tests/orchestrator/test_crash_points_live.py",
    "tests/orchestrator/clients/test_rlmm_topic_clients.py",
    "tests/orchestrator/cli/test_tiering_compat_live.py",
    "tests/orchestrator/broker/test_copy_states_live.py",
    "tests/deploy/test_scan_submit.py",
)


class _Item(Protocol):
    nodeid: str


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: :data:`SPARK_SESSION` for the modules that share the SparkSession, its
    module for every other test."""
    module = module_of(nodeid)
    return SPARK_SESSION if module in SPARK_SESSION_MODULES else module


def longest_first(items: Sequence[_Item]) -> list[_Item]:
    """``items`` with the tests of :data:`LONGEST`'s units first, in its order, each unit's tests together, the rest
    as they were."""
    rank = {scope: i for i, scope in enumerate(LONGEST)}
    last = len(LONGEST)
    group = {module: i for i, module in enumerate(SPARK_SESSION_MODULES)}
    return sorted(  # stable: collection's order kept within a module
        items,
        key=lambda item: (rank.get(scope_of(item.nodeid), last), group.get(module_of(item.nodeid), -1)),
    )


def spark_outside_group(uses_spark: Sequence[str]) -> list[str]:
    """The modules, of those whose tests use the ``spark`` fixture, that :data:`SPARK_SESSION_MODULES` leaves out."""
    return sorted({module_of(n) for n in uses_spark} - set(SPARK_SESSION_MODULES))


class SharedScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """pytest-xdist's loadscope scheduling with :func:`scope_of` as the unit of work (for ``--dist loadscope``)."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def make_scheduler(config: Any, log: Any) -> Any:
    return SharedScopeScheduling(config, log)
