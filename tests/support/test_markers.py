"""Every test is exactly one kind; the collection error names each test that is not, and why."""

from __future__ import annotations

import pytest

from tests.support.markers import kind_problem, unmarked_report

pytestmark = pytest.mark.unit


def test_one_kind_with_any_other_markers_is_fine() -> None:
    assert kind_problem(["unit"]) is None
    assert kind_problem(["spark", "timeout", "soak", "parametrize"]) is None


def test_no_kind_is_named_as_such() -> None:
    assert kind_problem(["timeout", "parametrize"]) == "no kind marker (one of unit, integration, spark)"


def test_two_kinds_are_named_both() -> None:
    why = kind_problem(["spark", "timeout", "integration"])
    assert why is not None and "integration, spark" in why


def test_the_report_lists_every_test_sorted_with_its_reason() -> None:
    report = unmarked_report({"tests/b.py::t": "why b", "tests/a.py::t": "why a"})
    assert report.splitlines() == [
        "2 test(s) break the marker rule (see tests/support/markers.py):",
        "  tests/a.py::t: why a",
        "  tests/b.py::t: why b",
    ]
