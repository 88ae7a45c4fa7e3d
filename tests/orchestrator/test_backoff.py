"""The one retry schedule of every call family: full jitter in a doubling, capped window, drawn from the caller's
generator (pure; nothing sleeps)."""

from __future__ import annotations

import random

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from orchestrator.backoff import Backoff, full_jitter, tenacity_wait

pytestmark = pytest.mark.unit


def test_the_window_doubles_per_failure_up_to_the_cap_and_a_seeded_rng_reproduces_every_draw() -> None:
    draws = [full_jitter(n, base=200, cap=30_000, rng=random.Random(9)) for n in range(1, 12)]
    assert draws == [random.Random(9).uniform(0, min(30_000, 200 * 2 ** (n - 1))) for n in range(1, 12)]
    rng = random.Random(1)
    for n in range(1, 40):
        assert 0 <= full_jitter(n, base=200, cap=30_000, rng=rng) <= min(30_000, 200 * 2 ** (n - 1))


def test_zero_failures_counts_as_the_first_and_a_huge_count_stays_at_the_cap() -> None:
    assert full_jitter(0, base=1, cap=8, rng=random.Random(2)) == random.Random(2).uniform(0, 1)
    assert full_jitter(-3, base=1, cap=8, rng=random.Random(2)) == random.Random(2).uniform(0, 1)
    assert full_jitter(5_000, base=1, cap=8, rng=random.Random(2)) == random.Random(2).uniform(0, 8)


def test_a_floor_bounds_every_wait_from_below_even_above_the_first_window() -> None:
    loop = Backoff(base=0.2, cap=10.0, floor=0.1)
    assert loop.delay(1, random.Random(3)) == random.Random(3).uniform(0.1, 0.2)
    tight = Backoff(base=0.05, cap=10.0, floor=0.1)  # a first window narrower than the floor: the floor
    assert tight.delay(1, random.Random(3)) == 0.1


def test_a_schedule_without_a_positive_base_or_with_a_floor_above_its_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="base > 0"):
        Backoff(base=0, cap=1)
    with pytest.raises(ValueError, match="floor <= cap"):
        Backoff(base=1, cap=1, floor=2)


def test_a_call_retried_in_place_by_tenacity_sleeps_the_schedule_of_each_attempt_that_failed() -> None:
    slept: list[float] = []
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 4:
            raise ConnectionResetError("reset")
        return "ok"

    retrying = Retrying(
        retry=retry_if_exception_type(ConnectionResetError),
        wait=tenacity_wait(Backoff(base=0.5, cap=1.5), random.Random(6)),
        stop=stop_after_attempt(5),
        sleep=slept.append,
        reraise=True,
    )
    assert retrying(flaky) == "ok"
    expected = random.Random(6)
    assert slept == [expected.uniform(0, 0.5), expected.uniform(0, 1.0), expected.uniform(0, 1.5)]
