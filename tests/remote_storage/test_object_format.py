"""The object format: a segment transformed a chunk at a time gets the very bytes and chunk index the whole-segment
transform of Aiven's format gives, whatever the transforms; and the format's settings refuse what cannot work."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import InvalidArgument
from remote_storage.object_format import DEFAULT_CHUNK_SIZE, ChunkedLog, ObjectFormat
from remote_storage.segment_format.encryption import DataKeyAndAad
from remote_storage.segment_format.transform import ChunkTransforms, original_chunks, transform_segment

pytestmark = pytest.mark.unit


def counter_bytes():
    """Deterministic "randomness": the same IVs for both transforms compared."""
    counter = itertools.count()
    return lambda n: bytes(next(counter) % 256 for _ in range(n))


KEY = DataKeyAndAad(b"k" * 32, b"a" * 32)


@settings(max_examples=40, deadline=None)
@given(
    segment=st.binary(max_size=3000),
    chunk_size=st.integers(1, 700),
    compression=st.booleans(),
    encrypted=st.booleans(),
)
def test_chunk_by_chunk_gives_the_whole_segment_transforms_bytes_and_index(segment, chunk_size, compression, encrypted):
    transforms = ChunkTransforms(compression=compression, encryption=KEY if encrypted else None)
    whole = transform_segment(segment, chunk_size=chunk_size, transforms=transforms, random_bytes=counter_bytes())
    chunked = ChunkedLog(chunk_size=chunk_size, transforms=transforms, random_bytes=counter_bytes())
    stored = b"".join(chunked.stored(bytes(chunk)) for chunk in original_chunks(segment, chunk_size))
    assert (stored, chunked.chunk_index()) == (whole.body, whole.chunk_index)
    assert chunked.stored_size == len(stored) and chunked.original_size == len(segment)


def test_chunks_come_whole_but_the_last_and_never_empty():
    chunked = ChunkedLog(chunk_size=4, transforms=ChunkTransforms())
    chunked.stored(b"abcd")
    chunked.stored(b"ef")
    with pytest.raises(InvalidArgument):
        chunked.stored(b"g")  # after a short chunk: it was not the last
    with pytest.raises(InvalidArgument):
        ChunkedLog(chunk_size=4, transforms=ChunkTransforms()).stored(b"")
    with pytest.raises(InvalidArgument):
        ChunkedLog(chunk_size=4, transforms=ChunkTransforms()).stored(b"abcde")


def test_the_format_is_aivens_defaults_and_refuses_encryption_without_keys_or_a_chunk_size_out_of_range():
    default = ObjectFormat()
    assert (default.chunk_size, default.compression, default.encrypt) == (DEFAULT_CHUNK_SIZE, False, False)
    assert default.new_data_key() is None
    with pytest.raises(InvalidArgument, match="key ring"):
        ObjectFormat(encrypt=True)
    for size in (0, 2**30):
        with pytest.raises(InvalidArgument, match=r"chunk\.size"):
            ObjectFormat(chunk_size=size)
