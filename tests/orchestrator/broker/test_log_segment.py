"""A segment's time index, as Kafka keeps it: an entry beside an offset index entry when the max timestamp grew,
one more when the segment closes, rebuilt exactly from the log on open; and timestamp lookups that use it."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_reads import time_index_entries
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit

TID = Uuid.random()


def _open(directory, **cfg) -> PartitionLog:
    config = LogConfig(**{"segment_bytes": 10**6, "index_interval_bytes": 1, **cfg})
    return PartitionLog(directory, topic_id=TID, config=config, clock=lambda: 1_000)


def _time_index(path) -> list[tuple[int, int]]:
    return [struct.unpack(">qI", path.read_bytes()[i : i + 12]) for i in range(0, path.stat().st_size, 12)]


def test_an_entry_is_added_where_the_offset_index_has_one_and_the_max_timestamp_grew(tmp_path):
    with _open(tmp_path / "t-0") as plog:
        for ts in (10, 30, 20, 40, 40, 5, 50):  # one batch each; every batch indexed (index_interval_bytes=1)
            plog.append([(None, b"v", ts)])
        seg = plog.segments()[-1]
        # (timestamp, offset relative to the segment): the offset of the batch that first carried that timestamp
        assert _time_index(seg.time_index_path) == [(10, 0), (30, 1), (40, 3), (50, 6)]


def test_a_closed_segment_ends_with_its_max_timestamp_even_between_index_entries(tmp_path):
    with _open(tmp_path / "t-0", index_interval_bytes=10**6) as plog:  # only the first batch is indexed
        for ts in (10, 30, 20):
            plog.append([(None, b"v", ts)])
        assert _time_index(plog.segments()[-1].time_index_path) == [(10, 0)]
        plog.roll()
        closed = plog.closed_segments()[0]
        assert _time_index(closed.time_index_path) == [(10, 0), (30, 1)]


def test_both_indexes_are_rebuilt_on_open_exactly_as_appends_wrote_them_and_made_when_missing(tmp_path):
    directory = tmp_path / "t-0"
    with _open(directory, segment_bytes=700, index_interval_bytes=150) as plog:
        for i in range(60):
            plog.append([(None, b"x" * (i % 7 * 10), 1_000 + (i * 37) % 101)])
        segments = plog.segments()
        written = {p: p.read_bytes() for s in segments for p in (s.index_path, s.time_index_path)}
    assert len(segments) > 3 and all(written.values())
    for path in written:
        path.unlink()  # a directory written before the time index existed, or indexes lost
    with _open(directory, segment_bytes=700, index_interval_bytes=150) as reopened:
        assert {p: p.read_bytes() for p in written} == written
        assert [s.max_timestamp_ms for s in reopened.segments()] == [s.max_timestamp_ms for s in segments]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=80), st.integers(0, 55))
def test_a_timestamp_lookup_through_the_time_index_finds_what_a_scan_of_every_record_finds(
    tmp_path_factory, stamps, target
):
    directory = tmp_path_factory.mktemp("log") / "t-0"
    with _open(directory, segment_bytes=400, index_interval_bytes=90) as plog:
        for ts in stamps:
            plog.append([(None, b"y" * 20, ts)])
        expected = next(((offset, ts) for offset, ts in enumerate(stamps) if ts >= target), None)
        assert plog.offset_for_timestamp(target) == expected
        top = max(stamps)
        assert plog.max_timestamp() == (stamps.index(top), top)


def test_time_index_entries_are_absolute_and_ignore_a_torn_last_entry():
    raw = struct.pack(">qI", 5, 0) + struct.pack(">qI", 9, 3) + b"\x00" * 5
    assert time_index_entries(raw, 100) == [(5, 100), (9, 103)]
