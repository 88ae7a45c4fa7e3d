"""Which kind a test is, by marker, and the rule that every test is exactly one kind.

``make check`` selects ``-m unit``, ``make test`` runs everything, and a test without a kind would silently drop out
of the first; so collection fails (``tests/conftest.py``) naming every test that has no kind or more than one:

* ``unit``: pure logic: starts no process, touches no network, never sleeps (checked at run time:
  :mod:`tests.support.unit_guard`);
* ``integration``: real processes, moto's server, real files, PostgreSQL, real Kafka clients;
* ``spark``: a SparkSession or a Spark JVM (local, standalone or spark-submit); under pytest-xdist, each worker
  that runs one starts its own local session (one JVM of 1 GiB heap per worker).
"""

from __future__ import annotations

from collections.abc import Iterable

KINDS = ("unit", "integration", "spark")


def kind_problem(marker_names: Iterable[str]) -> str | None:
    """Why a test with these markers breaks the rule, or None when it has exactly one kind."""
    kinds = sorted({name for name in marker_names if name in KINDS})
    if not kinds:
        return "no kind marker (one of unit, integration, spark)"
    if len(kinds) > 1:
        return f"more than one kind marker ({', '.join(kinds)}): keep the one that says what it needs"
    return None


def unmarked_report(problems: dict[str, str]) -> str:
    lines = [f"{len(problems)} test(s) break the marker rule (see tests/support/markers.py):"]
    lines += [f"  {nodeid}: {why}" for nodeid, why in sorted(problems.items())]
    return "\n".join(lines)
