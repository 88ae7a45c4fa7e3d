"""The order ``make test`` hands modules to its workers: the longest first, so no worker is left running one alone.

pytest-xdist's ``--dist loadscope`` hands out whole modules in the order it is given them (``make test`` passes
``--no-loadscope-reorder``: xdist's own order, most tests first, put the long modules of one or two tests last, and
one worker ran the demo and the standalone Spark cluster alone for the run's last minute). :data:`LONGEST` names the
modules that take longest (``make slowest`` lists them); :func:`longest_first` moves their tests to the front, in
that order, and leaves every other test where collection put it.

Invariants: the same tests come out, each module's tests together and in their order; a name in :data:`LONGEST`
that is no module is a test failure (``tests/support/test_schedule.py``), so the list cannot rot unseen. A module
missing from the list only runs later than it might.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

LONGEST = (
    "tests/chaos/test_seeds.py",
    "tests/remote_storage/scan/test_agreement.py",
    "tests/orchestrator/test_demo.py",
    "tests/orchestrator/clients/test_replication_live.py",
    "tests/remote_storage/scan/test_aiven_bucket.py",
    "tests/orchestrator/local/test_cluster_restart.py",
    "tests/orchestrator/cli/test_store_unavailable.py",
    "tests/orchestrator/cli/test_commands.py",
    "tests/orchestrator/cli/test_newcomer.py",
    "tests/orchestrator/protocol/test_crosscheck.py",
    "tests/remote_storage/scan/test_standalone_cluster.py",
    "tests/orchestrator/local/test_cluster_starts.py",
    "tests/orchestrator/test_crash_points_live.py",
    "tests/remote_storage/scan/test_sources.py",
    "tests/orchestrator/clients/test_rlmm_topic_clients.py",
    "tests/orchestrator/cli/test_tiering_compat_live.py",
    "tests/orchestrator/broker/test_copy_states_live.py",
    "tests/deploy/test_scan_submit.py",
)


class _Item(Protocol):
    nodeid: str


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: Sequence[_Item]) -> list[_Item]:
    """``items`` with the tests of :data:`LONGEST`'s modules first, in its order, the rest as they were."""
    rank = {module: i for i, module in enumerate(LONGEST)}
    last = len(LONGEST)
    return sorted(items, key=lambda item: rank.get(module_of(item.nodeid), last))  # stable: order kept within a rank
