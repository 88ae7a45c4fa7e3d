"""The one retry layer of S3 calls: its schedule (pure; the sleep is injected, nothing waits)."""

from __future__ import annotations

import random

import pytest

from remote_storage.retry import S3_BACKOFF, s3_retrying

pytestmark = pytest.mark.unit


def test_s3_calls_are_retried_on_the_declared_s3_schedule_drawn_from_the_injected_rng() -> None:
    slept: list[float] = []
    failures = iter([ConnectionResetError("reset"), ConnectionResetError("reset")])

    def call() -> str:
        for exc in failures:
            raise exc
        return "done"

    assert s3_retrying(sleep=slept.append, rng=random.Random(8))(call) == "done"
    expected = random.Random(8)
    assert (S3_BACKOFF.base, S3_BACKOFF.cap) == (0.05, 5.0)
    assert slept == [expected.uniform(0, 0.05), expected.uniform(0, 0.1)]
