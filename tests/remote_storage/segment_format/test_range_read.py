"""Range reads through the chunk index: exactly the bytes asked for, from exactly the chunks that hold them."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.chunk_index import ChunkIndex
from remote_storage.segment_format.encryption import DataKeyAndAad
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.range_read import plan_range_read
from remote_storage.segment_format.transform import ChunkTransforms, transform_segment

pytestmark = pytest.mark.unit

KEY = DataKeyAndAad(bytes(range(32)), bytes(32))


class RecordingObject:
    """A stored object that answers range GETs (HTTP's inclusive ``first-last``) and remembers each one."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gets: list[tuple[int, int]] = []

    def get(self, first: int, last: int) -> bytes:
        self.gets.append((first, last))
        return self.body[first : last + 1]


def _read(index: ChunkIndex, stored: RecordingObject, transforms: ChunkTransforms, start: int, size: int) -> bytes:
    plan = plan_range_read(index, start=start, size=size)
    span = plan.object_range
    fetched = b"" if span is None else stored.get(*span)
    return plan.extract(fetched, transforms)


@st.composite
def stored_segments(draw: st.DrawFn) -> tuple[bytes, int, ChunkTransforms]:
    chunk_size = draw(st.integers(1, 200))
    length = draw(st.integers(0, 20)) * chunk_size + draw(st.integers(0, chunk_size - 1))
    data = random.Random(draw(st.integers(0, 2**32 - 1))).randbytes(length)
    transforms = ChunkTransforms(compression=draw(st.booleans()), encryption=draw(st.none() | st.just(KEY)))
    return data, chunk_size, transforms


@settings(deadline=None)
@given(stored_segments(), st.data())
def test_a_range_read_returns_exactly_the_bytes_asked_and_fetches_only_the_chunks_holding_them(
    segment: tuple[bytes, int, ChunkTransforms], data: st.DataObject
) -> None:
    original, chunk_size, transforms = segment
    stored = transform_segment(original, chunk_size=chunk_size, transforms=transforms)
    start = data.draw(st.integers(0, len(original)))
    size = data.draw(st.integers(0, len(original) + 3))
    obj = RecordingObject(stored.body)

    assert _read(stored.chunk_index, obj, transforms, start, size) == original[start : start + size]

    end = min(start + size, len(original))
    needed = [
        c for c in stored.chunk_index.chunks() if start < end and c.original_position < end and c.original_end > start
    ]
    if not needed:
        assert obj.gets == []
    else:
        # One GET, spanning the stored bytes of exactly the needed chunks.
        assert obj.gets == [(needed[0].transformed_position, needed[-1].transformed_end - 1)]
        # At most one partial chunk at each end: never more than two chunks beyond what was asked.
        assert sum(c.original_size for c in needed) < (end - start) + 2 * chunk_size


def test_a_read_inside_one_chunk_of_a_large_segment_fetches_one_chunk() -> None:
    original = random.Random(7).randbytes(64 * 1024)
    transforms = ChunkTransforms(compression=True, encryption=KEY)
    stored = transform_segment(original, chunk_size=4096, transforms=transforms)
    plan = plan_range_read(stored.chunk_index, start=5000, size=1000)
    assert [c.id for c in plan.chunks] == [1]
    assert plan.http_range == f"bytes={plan.chunks[0].transformed_position}-{plan.chunks[0].transformed_end - 1}"
    assert plan.fetched_size == plan.chunks[0].transformed_size
    fetched = stored.body[plan.chunks[0].transformed_position : plan.chunks[0].transformed_end]
    assert plan.extract(fetched, transforms) == original[5000:6000]


def test_a_range_from_the_end_reads_nothing_and_past_the_end_is_refused() -> None:
    stored = transform_segment(b"abcdef", chunk_size=4)
    at_end = plan_range_read(stored.chunk_index, start=6, size=10)
    assert (at_end.chunks, at_end.object_range, at_end.http_range, at_end.size) == ((), None, None, 0)
    assert at_end.extract(b"", ChunkTransforms()) == b""
    with pytest.raises(InvalidArgument, match="past the end"):
        plan_range_read(stored.chunk_index, start=7, size=1)
    with pytest.raises(InvalidArgument, match=">= 0"):
        plan_range_read(stored.chunk_index, start=0, size=-1)


def test_a_cache_of_original_chunks_serves_a_read_without_fetching() -> None:
    original = bytes(range(250))
    stored = transform_segment(original, chunk_size=100)
    plan = plan_range_read(stored.chunk_index, start=150, size=80)
    cache = {c.id: original[c.original_position : c.original_end] for c in stored.chunk_index.chunks()}
    assert plan.cut([cache[c.id] for c in plan.chunks]) == original[150:230]
    with pytest.raises(SegmentFormatError, match="chunk 1: 3 bytes"):
        plan.cut([b"abc", cache[2]])


def test_a_fetched_body_of_the_wrong_length_is_refused() -> None:
    stored = transform_segment(bytes(300), chunk_size=100, transforms=ChunkTransforms(encryption=KEY))
    plan = plan_range_read(stored.chunk_index, start=0, size=150)
    with pytest.raises(SegmentFormatError, match="the chunk index says 256"):
        plan.extract(stored.body[:255], ChunkTransforms(encryption=KEY))
