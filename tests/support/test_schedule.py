"""The order make test hands modules to its workers (tests.support.schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.schedule import LONGEST, longest_first, module_of

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Item:
    nodeid: str


def test_the_longest_modules_come_first_in_the_lists_order_and_the_rest_keep_theirs() -> None:
    first, second = LONGEST[0], LONGEST[1]
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


def test_every_module_the_list_names_exists_once() -> None:
    assert len(set(LONGEST)) == len(LONGEST)
    missing = [m for m in LONGEST if not (REPO / m).is_file()]
    assert not missing, f"tests/support/schedule.py names modules that are gone: {missing}"


def test_a_parametrized_test_belongs_to_its_module() -> None:
    assert module_of("tests/a/test_x.py::test_y[1-2::3]") == "tests/a/test_x.py"
