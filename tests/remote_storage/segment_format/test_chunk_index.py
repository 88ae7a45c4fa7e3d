"""The chunk index against Aiven's ChunkIndexSerializationTest, and its lookups against a brute-force model."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.chunk_index import (
    Chunk,
    ChunkIndex,
    FixedSizeChunkIndex,
    VariableSizeChunkIndex,
    chunk_index_from_json,
    chunk_index_from_sizes,
    chunk_index_to_json,
)
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import dumps
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

GOLDEN = load_golden("chunk_index_serialization_test.json")


def _build(case: dict[str, Any]) -> ChunkIndex:
    index = case["index"]
    if case["kind"] == "fixed":
        return FixedSizeChunkIndex(
            index["originalChunkSize"],
            index["originalFileSize"],
            index["transformedChunkSize"],
            index["finalTransformedChunkSize"],
        )
    return VariableSizeChunkIndex(index["originalChunkSize"], index["originalFileSize"], index["transformedChunks"])


@pytest.mark.parametrize("case", [c for c in GOLDEN["cases"] if "index" in c], ids=lambda c: c["name"])
def test_a_chunk_index_is_written_byte_for_byte_as_aiven_writes_it(case: dict[str, Any]) -> None:
    assert dumps(chunk_index_to_json(_build(case))) == case["json"]


@pytest.mark.parametrize("case", [c for c in GOLDEN["cases"] if "chunks" in c], ids=lambda c: c["name"])
def test_aivens_chunk_index_text_reads_back_to_aivens_chunks(case: dict[str, Any]) -> None:
    index = chunk_index_from_json(json.loads(case["json"]))
    assert isinstance(index, FixedSizeChunkIndex if case["kind"] == "fixed" else VariableSizeChunkIndex)
    assert index.chunk_count == case["chunkCount"]
    assert index.chunks() == tuple(Chunk(*fields) for fields in case["chunks"])
    assert GOLDEN["chunkFields"] == ["id", "originalPosition", "originalSize", "transformedPosition", "transformedSize"]


@pytest.mark.parametrize("case", GOLDEN["missingMembers"], ids=lambda c: f"{c['name']}-{c['missing']}")
def test_a_chunk_index_missing_a_member_is_refused_naming_the_member(case: dict[str, Any]) -> None:
    with pytest.raises(SegmentFormatError, match=f"chunkIndex.{case['missing']} is missing"):
        chunk_index_from_json(json.loads(case["json"]))


def test_a_variable_index_listing_the_wrong_number_of_chunks_is_refused() -> None:
    text = dumps(chunk_index_to_json(VariableSizeChunkIndex(100, 250, (10, 20, 30))))
    tree = json.loads(text)
    tree["originalFileSize"] = 350
    with pytest.raises(SegmentFormatError, match="lists 4 transformed size"):
        chunk_index_from_json(tree)


def test_an_empty_segment_has_no_chunk_and_a_stored_size_of_zero() -> None:
    index = chunk_index_from_sizes(
        original_chunk_size=100, original_file_size=0, transformed_sizes=[], fixed_transformed_chunk_size=None
    )
    assert index == FixedSizeChunkIndex(100, 0, 100, 0)
    assert index.chunks() == ()
    assert index.find_chunk(0) is None
    assert index.transformed_file_size == 0


def test_the_builder_refuses_chunks_that_do_not_cover_the_segment_or_break_the_fixed_size() -> None:
    with pytest.raises(InvalidArgument, match="make 3 chunks"):
        chunk_index_from_sizes(
            original_chunk_size=100, original_file_size=250, transformed_sizes=[1, 2], fixed_transformed_chunk_size=None
        )
    with pytest.raises(InvalidArgument, match="must be 110 bytes"):
        chunk_index_from_sizes(
            original_chunk_size=100,
            original_file_size=250,
            transformed_sizes=[110, 111, 5],
            fixed_transformed_chunk_size=110,
        )


@st.composite
def indexes(draw: st.DrawFn) -> ChunkIndex:
    chunk_size = draw(st.integers(1, 64))
    file_size = draw(st.integers(0, 40)) * chunk_size + draw(st.integers(0, chunk_size - 1))
    count = -(-file_size // chunk_size)
    if draw(st.booleans()):
        fixed = draw(st.integers(0, 200))
        sizes = [fixed] * max(0, count - 1) + [draw(st.integers(0, 200))] * (count > 0)
        return chunk_index_from_sizes(
            original_chunk_size=chunk_size,
            original_file_size=file_size,
            transformed_sizes=sizes,
            fixed_transformed_chunk_size=fixed,
        )
    sizes = draw(st.lists(st.integers(0, 200), min_size=max(count, 1), max_size=max(count, 1)))
    return VariableSizeChunkIndex(chunk_size, file_size, tuple(sizes))


@given(indexes())
def test_chunks_tile_the_segment_and_the_stored_object_without_gaps(index: ChunkIndex) -> None:
    chunks = index.chunks()
    assert sum(c.original_size for c in chunks) == index.original_file_size
    assert sum(c.transformed_size for c in chunks) == index.transformed_file_size
    for before, after in itertools.pairwise(chunks):
        assert after.original_position == before.original_end
        assert after.transformed_position == before.transformed_end
    assert [c.id for c in chunks] == list(range(len(chunks)))


@given(indexes(), st.data())
def test_a_range_maps_to_exactly_the_chunks_holding_its_bytes(index: ChunkIndex, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, index.original_file_size + 5))
    size = data.draw(st.integers(0, index.original_file_size + 5))
    end = min(start + size, index.original_file_size)
    brute = tuple(c for c in index.chunks() if start < end and c.original_position < end and c.original_end > start)
    assert index.chunks_for_range(start, size) == brute
    if start < index.original_file_size:
        found = index.find_chunk(start)
        assert found is not None and found.original_position <= start < found.original_end
    else:
        assert index.find_chunk(start) is None


@given(indexes())
def test_every_chunk_index_round_trips_through_its_json(index: ChunkIndex) -> None:
    assert chunk_index_from_json(json.loads(dumps(chunk_index_to_json(index)))) == index
