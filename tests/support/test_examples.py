"""The examples cap lowers a property test's count, never raises it, and leaves other tests alone."""

from __future__ import annotations

import unittest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from tests.support.examples import cap_examples

pytestmark = pytest.mark.unit


def _count(test: object) -> int:
    return test._hypothesis_internal_use_settings.max_examples  # type: ignore[attr-defined]


def test_a_given_test_is_capped_and_keeps_its_other_settings() -> None:
    @settings(max_examples=50, derandomize=True)
    @given(st.integers())
    def prop(n: int) -> None:
        pass

    assert cap_examples(prop, None, 3)
    assert _count(prop) == 3 and prop._hypothesis_internal_use_settings.derandomize  # type: ignore[attr-defined]


def test_a_count_below_the_cap_stays() -> None:
    @settings(max_examples=2)
    @given(st.integers())
    def prop(n: int) -> None:
        pass

    cap_examples(prop, None, 3)
    assert _count(prop) == 2


def test_a_state_machines_test_case_is_capped() -> None:
    class Machine(RuleBasedStateMachine):
        @rule()
        def step(self) -> None:
            pass

    Machine.TestCase.settings = settings(max_examples=40, stateful_step_count=7)
    assert cap_examples(Machine.TestCase.runTest, Machine.TestCase, 4)
    assert Machine.TestCase.settings.max_examples == 4 and Machine.TestCase.settings.stateful_step_count == 7


def test_a_plain_test_or_test_case_is_left_alone() -> None:
    def plain() -> None:
        pass

    class Plain(unittest.TestCase):
        def test_x(self) -> None:
            pass

    assert not cap_examples(plain, None, 1)
    assert not cap_examples(Plain.test_x, Plain, 1)
