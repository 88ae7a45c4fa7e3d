"""The embedded S3's snapshot keeps an object's last-modified time exactly: a time just before a second's end stays
in that second (a float round trip through milliseconds once moved it to the next one, which a client reads in
``Last-Modified``; CI saw one object of 120 differ after a stop and a start)."""

from __future__ import annotations

import datetime

import pytest

from orchestrator.local.embedded_s3 import from_epoch_us, to_epoch_us
from orchestrator.local.s3_snapshot import _last_modified_us

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "when",
    [
        datetime.datetime(2026, 11, 28, 18, 33, 7, 999_600),
        datetime.datetime(2026, 11, 28, 18, 33, 7, 999_999),
        datetime.datetime(2026, 11, 28, 18, 33, 8, 0),
        datetime.datetime(1970, 1, 1, 0, 0, 0, 1),
        datetime.datetime(2262, 4, 11, 23, 47, 16, 854_775),
    ],
)
def test_a_time_comes_back_to_the_microsecond(when: datetime.datetime) -> None:
    back = from_epoch_us(to_epoch_us(when))
    assert back == when and back.replace(microsecond=0) == when.replace(microsecond=0)


def test_a_snapshot_written_with_milliseconds_is_read_as_microseconds() -> None:
    assert _last_modified_us({"last_modified_us": 1_764_354_787_999_600}) == 1_764_354_787_999_600
    assert _last_modified_us({"last_modified_ms": 1_764_354_787_999}) == 1_764_354_787_999_000
    assert _last_modified_us({"last_modified_us": None, "last_modified_ms": 5}) == 5_000
    assert _last_modified_us({}) is None
