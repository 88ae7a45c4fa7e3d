"""The ``.log`` transforms: round trips for any chunk size and length, Aiven's end-to-end sizes, and corruption."""

from __future__ import annotations

import os
import random

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format import compression, encryption
from remote_storage.segment_format.chunk_index import FixedSizeChunkIndex, VariableSizeChunkIndex
from remote_storage.segment_format.encryption import DataKeyAndAad, new_data_key_and_aad
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.transform import (
    MAX_CHUNK_SIZE,
    NO_TRANSFORMS,
    ChunkTransforms,
    detransform_segment,
    transform_segment,
)
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

KEY = DataKeyAndAad(bytes(range(32)), bytes(range(32, 64)))
END_TO_END = load_golden("transforms_end_to_end_test.json")


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, int]:
    """A chunk size and a segment of any length: empty, an exact multiple of the chunk size, or not."""
    chunk_size = draw(st.integers(1, 300))
    length = draw(st.integers(0, 24)) * chunk_size + draw(st.sampled_from([0, 1, chunk_size - 1, chunk_size // 2]))
    # Random bytes and compressible runs, so that compressed chunks both grow and shrink.
    seed = draw(st.integers(0, 2**32 - 1))
    data = draw(
        st.sampled_from(
            [random.Random(seed).randbytes(length), bytes(length), b"ab" * (length // 2) + b"c" * (length % 2)]
        )
    )
    return data, chunk_size


transforms = st.builds(ChunkTransforms, compression=st.booleans(), encryption=st.none() | st.just(KEY))


@settings(deadline=None)
@given(segments(), transforms)
def test_detransform_undoes_transform_for_any_chunk_size_length_and_transforms(
    segment: tuple[bytes, int], chunk_transforms: ChunkTransforms
) -> None:
    data, chunk_size = segment
    stored = transform_segment(data, chunk_size=chunk_size, transforms=chunk_transforms)
    assert detransform_segment(stored.body, stored.chunk_index, chunk_transforms) == data
    index = stored.chunk_index
    assert (index.original_chunk_size, index.original_file_size) == (chunk_size, len(data))
    assert index.transformed_file_size == len(stored.body)
    assert index.chunk_count == -(-len(data) // chunk_size)


@given(segments())
def test_with_both_transforms_off_the_object_is_the_segment_and_its_index_fixed(segment: tuple[bytes, int]) -> None:
    data, chunk_size = segment
    stored = transform_segment(data, chunk_size=chunk_size)
    assert stored.body == data
    assert isinstance(stored.chunk_index, FixedSizeChunkIndex)
    assert stored.chunk_index.fixed_transformed_chunk_size == chunk_size
    assert [c.transformed_size for c in stored.chunk_index.chunks()] == [
        c.original_size for c in stored.chunk_index.chunks()
    ]


def test_the_index_kind_follows_aiven_fixed_unless_compressed_and_encryption_adds_iv_and_tag() -> None:
    data = os.urandom(250)
    encrypted = transform_segment(data, chunk_size=100, transforms=ChunkTransforms(encryption=KEY))
    assert encrypted.chunk_index == FixedSizeChunkIndex(100, 250, 128, 78)
    compressed = transform_segment(data, chunk_size=100, transforms=ChunkTransforms(compression=True))
    assert isinstance(compressed.chunk_index, VariableSizeChunkIndex)
    both = transform_segment(data, chunk_size=100, transforms=ChunkTransforms(compression=True, encryption=KEY))
    assert isinstance(both.chunk_index, VariableSizeChunkIndex)
    assert [c.transformed_size for c in both.chunk_index.chunks()] == [
        c.transformed_size + encryption.OVERHEAD for c in compressed.chunk_index.chunks()
    ]


def test_an_empty_segment_is_an_empty_object_with_an_empty_fixed_index_whatever_the_transforms() -> None:
    for chunk_transforms in (
        NO_TRANSFORMS,
        ChunkTransforms(True),
        ChunkTransforms(True, KEY),
        ChunkTransforms(False, KEY),
    ):
        stored = transform_segment(b"", chunk_size=10, transforms=chunk_transforms)
        assert stored.body == b""
        assert isinstance(stored.chunk_index, FixedSizeChunkIndex)
        assert stored.chunk_index.original_file_size == 0
        assert stored.chunk_index.chunks() == ()


def test_a_compressed_chunk_is_one_zstd_frame_carrying_its_content_size_as_aivens_reader_needs() -> None:
    data = b"abc" * 1000
    stored = transform_segment(data, chunk_size=1024, transforms=ChunkTransforms(compression=True))
    for chunk in stored.chunk_index.chunks():
        frame = stored.body[chunk.transformed_position : chunk.transformed_end]
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == chunk.original_size
        assert not params.has_checksum
        assert zstandard.ZstdDecompressor().decompress(frame) == data[chunk.original_position : chunk.original_end]


def test_an_encrypted_chunk_is_iv_then_ciphertext_then_tag_with_a_fresh_iv_each() -> None:
    ivs = iter([b"\x01" * 12, b"\x02" * 12, b"\x03" * 12])
    stored = transform_segment(
        b"x" * 25, chunk_size=10, transforms=ChunkTransforms(encryption=KEY), random_bytes=lambda n: next(ivs)
    )
    chunks = stored.chunk_index.chunks()
    assert [stored.body[c.transformed_position : c.transformed_position + 12] for c in chunks] == [
        b"\x01" * 12,
        b"\x02" * 12,
        b"\x03" * 12,
    ]
    assert [c.transformed_size for c in chunks] == [10 + 28, 10 + 28, 5 + 28]


@pytest.mark.parametrize(
    ("kind", "chunk_size"),
    [(kind, size) for kind, sizes in END_TO_END["chunkSizes"].items() for size in sizes],
    ids=lambda v: str(v),
)
def test_aivens_end_to_end_chunk_sizes_round_trip(kind: str, chunk_size: int) -> None:
    data = random.Random(chunk_size).randbytes(END_TO_END["originalSize"])
    # Aiven's chunk size 0 disables chunking: the whole file is one chunk.
    size = chunk_size or len(data)
    chunk_transforms = ChunkTransforms(
        compression=kind in ("compression", "compressionAndEncryption"),
        encryption=new_data_key_and_aad() if kind in ("encryption", "compressionAndEncryption") else None,
    )
    stored = transform_segment(data, chunk_size=size, transforms=chunk_transforms)
    assert detransform_segment(stored.body, stored.chunk_index, chunk_transforms) == data


def test_a_flipped_bit_a_wrong_key_or_a_short_object_is_refused_not_returned() -> None:
    data = os.urandom(300)
    both = ChunkTransforms(compression=True, encryption=KEY)
    stored = transform_segment(data, chunk_size=100, transforms=both)
    flipped = bytearray(stored.body)
    flipped[20] ^= 1
    with pytest.raises(SegmentFormatError, match="chunk 0 does not decrypt"):
        detransform_segment(bytes(flipped), stored.chunk_index, both)
    other_key = ChunkTransforms(compression=True, encryption=DataKeyAndAad(bytes(32), KEY.aad))
    with pytest.raises(SegmentFormatError, match="does not decrypt"):
        detransform_segment(stored.body, stored.chunk_index, other_key)
    with pytest.raises(SegmentFormatError, match="the chunk index says"):
        detransform_segment(stored.body[:-1], stored.chunk_index, both)


def test_a_compressed_chunk_that_decompresses_to_another_size_is_refused() -> None:
    compressed = ChunkTransforms(compression=True)
    stored = transform_segment(b"a" * 100, chunk_size=100, transforms=compressed)
    liar = compression.compress(b"a" * 99)
    index = VariableSizeChunkIndex(100, 100, (len(liar),))
    with pytest.raises(SegmentFormatError, match="holds 99 bytes, expected 100"):
        detransform_segment(liar, index, compressed)
    assert detransform_segment(stored.body, stored.chunk_index, compressed) == b"a" * 100


@pytest.mark.parametrize("chunk_size", [0, -1, MAX_CHUNK_SIZE + 1, True])
def test_chunk_sizes_outside_aivens_range_are_refused(chunk_size: int) -> None:
    with pytest.raises(InvalidArgument, match=r"chunk\.size"):
        transform_segment(b"abc", chunk_size=chunk_size)
