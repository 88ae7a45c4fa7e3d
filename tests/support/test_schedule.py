"""The order make test hands modules to its workers (tests.support.schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.schedule import (
    LONGEST,
    SPARK_SESSION,
    SPARK_SESSION_MODULES,
    longest_first,
    module_of,
    scope_of,
    spark_outside_group,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Item:
    nodeid: str


def test_the_longest_modules_come_first_in_the_lists_order_and_the_rest_keep_theirs() -> None:
    first, second = [m for m in LONGEST if m != SPARK_SESSION][:2]
    items = [
        Item("tests/a/test_x.py::t1"),
        Item(f"{second}::s1"),
        Item("tests/a/test_x.py::t2"),
        Item(f"{first}::f1"),
        Item(f"{second}::s2"),
        Item("tests/b/test_y.py::u"),
        Item(f"{first}::f2"),
    ]
    assert [i.nodeid for i in longest_first(items)] == [
        f"{first}::f1",
        f"{first}::f2",
        f"{second}::s1",
        f"{second}::s2",
        "tests/a/test_x.py::t1",
        "tests/a/test_x.py::t2",
        "tests/b/test_y.py::u",
    ]


def test_every_module_the_lists_name_exists_once() -> None:
    named = [m for m in LONGEST if m != SPARK_SESSION] + list(SPARK_SESSION_MODULES)
    assert len(set(named)) == len(named) and SPARK_SESSION in LONGEST
    missing = [m for m in named if not (REPO / m).is_file()]
    assert not missing, f"tests/support/schedule.py names modules that are gone: {missing}"


def test_the_modules_sharing_the_spark_session_are_one_unit_kept_together_in_the_groups_order() -> None:
    a, b = SPARK_SESSION_MODULES[0], SPARK_SESSION_MODULES[1]
    other = next(m for m in LONGEST if m != SPARK_SESSION)
    assert scope_of(f"{a}::t") == scope_of(f"{b}::t[1]") == SPARK_SESSION
    assert scope_of(f"{other}::t") == other
    items = [Item(f"{other}::o"), Item(f"{b}::b1"), Item("tests/z/test_z.py::z"), Item(f"{a}::a1"), Item(f"{b}::b2")]
    ordered = [i.nodeid for i in longest_first(items)]
    spark_first = LONGEST.index(SPARK_SESSION) < LONGEST.index(other)
    group = [f"{a}::a1", f"{b}::b1", f"{b}::b2"]
    assert ordered == ([*group, f"{other}::o"] if spark_first else [f"{other}::o", *group]) + ["tests/z/test_z.py::z"]


def test_a_module_using_the_spark_fixture_outside_the_group_is_named() -> None:
    inside = f"{SPARK_SESSION_MODULES[0]}::t"
    assert spark_outside_group([inside]) == []
    assert spark_outside_group([inside, "tests/x/test_new_scan.py::t[1]", "tests/x/test_new_scan.py::u"]) == [
        "tests/x/test_new_scan.py"
    ]


def test_a_parametrized_test_belongs_to_its_module() -> None:
    assert module_of("tests/a/test_x.py::test_y[1-2::3]") == "tests/a/test_x.py"
