"""A segment's ``.log`` object: the segment cut into chunks, each compressed and/or encrypted, and back.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/transform/``
(``BaseTransformChunkEnumeration``, ``CompressionChunkEnumeration``, ``EncryptionChunkEnumeration``,
``TransformFinisher`` and their ``Detransform`` counterparts) and ``fetch/DefaultChunkManager.java`` (commit in
:mod:`remote_storage.segment_format`).

Forward, each chunk of ``chunk_size`` original bytes (the last one shorter) goes through, in this order:
zstd compression (:mod:`.compression`) if on, then AES-GCM encryption (:mod:`.encryption`) if on; the results are
concatenated. Backward, a stored chunk is decrypted, then decompressed. Both transforms are off by default, as in
Aiven (``compression.enabled=false``, ``encryption.enabled=false``); then the object is the segment itself.

The chunk index (:mod:`.chunk_index`) is of the fixed kind unless chunks are compressed: untransformed chunks keep
their size, encrypted ones grow by exactly :data:`~.encryption.OVERHEAD` bytes.

Where Aiven has no answer we chose one: Aiven cannot copy an empty segment with a transform on (its finisher never
builds an index); here an empty segment is an empty object with an empty fixed index, whatever the transforms
(Aiven's reader can parse that index; a variable one with no sizes it cannot).

Invariants: ``detransform_segment(transform_segment(x)) == x`` for every ``x``, chunk size and transforms; a
transformed chunk depends only on its own original bytes (and a fresh IV), so any chunk can be read back alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format import compression, encryption
from remote_storage.segment_format.chunk_index import (
    Chunk,
    ChunkIndex,
    FixedSizeChunkIndex,
    chunk_index_from_sizes,
)
from remote_storage.segment_format.encryption import DataKeyAndAad, RandomBytes
from remote_storage.segment_format.errors import SegmentFormatError

MAX_CHUNK_SIZE = (2**31 - 1) // 2  # Aiven's bound on chunk.size (Integer.MAX_VALUE / 2)


@dataclass(frozen=True, slots=True)
class ChunkTransforms:
    """What is done to each chunk: zstd compression, AES-GCM encryption under ``encryption``, both or neither."""

    compression: bool = False
    encryption: DataKeyAndAad | None = None

    @property
    def identity(self) -> bool:
        return not self.compression and self.encryption is None

    def fixed_transformed_size(self, original_size: int) -> int | None:
        """The stored size of a chunk of ``original_size`` bytes, or None when it varies (compression)."""
        if self.compression:
            return None
        return original_size if self.encryption is None else encryption.encrypted_size(original_size)

    def forward(self, chunk: bytes | memoryview, *, random_bytes: RandomBytes = os.urandom) -> bytes:
        """One chunk as it is stored."""
        data: bytes | memoryview = compression.compress(chunk) if self.compression else chunk
        if self.encryption is not None:
            return encryption.encrypt(data, self.encryption, random_bytes=random_bytes)
        return bytes(data)

    def backward(self, stored: bytes | memoryview, chunk: Chunk) -> bytes:
        """The original bytes of ``chunk`` from its stored bytes (exactly ``chunk.transformed_size`` of them)."""
        what = f"chunk {chunk.id}"
        if len(stored) != chunk.transformed_size:
            raise SegmentFormatError(
                f"{what}: {len(stored)} stored bytes, the chunk index says {chunk.transformed_size}"
            )
        data: bytes | memoryview = stored
        if self.encryption is not None:
            data = encryption.decrypt(data, self.encryption, what=what)
        if self.compression:
            data = compression.decompress(
                data, what=what, expected_size=chunk.original_size, max_size=chunk.original_size
            )
        if len(data) != chunk.original_size:
            raise SegmentFormatError(f"{what}: {len(data)} original bytes, the chunk index says {chunk.original_size}")
        return bytes(data)


def check_chunk_size(chunk_size: int) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise InvalidArgument(f"chunk.size must be in [1, {MAX_CHUNK_SIZE}], got {chunk_size!r}")
    return chunk_size


def original_chunks(segment: bytes | memoryview, chunk_size: int) -> Iterator[memoryview]:
    """The segment's chunks, without copying."""
    view = memoryview(segment)
    for position in range(0, len(view), check_chunk_size(chunk_size)):
        yield view[position : position + chunk_size]


NO_TRANSFORMS = ChunkTransforms()


@dataclass(frozen=True, slots=True)
class TransformedSegment:
    """The ``.log`` object's bytes and the chunk index that goes into the manifest."""

    body: bytes
    chunk_index: ChunkIndex


def transform_segment(
    segment: bytes | memoryview,
    *,
    chunk_size: int,
    transforms: ChunkTransforms = NO_TRANSFORMS,
    random_bytes: RandomBytes = os.urandom,
) -> TransformedSegment:
    """The ``.log`` object of ``segment`` and its chunk index."""
    size = len(segment)
    if size > 2**31 - 1:
        raise InvalidArgument(f"a segment is at most 2 GiB - 1 (Kafka's int32 positions), got {size} bytes")
    check_chunk_size(chunk_size)
    if transforms.identity:
        last = size - (max(0, -(-size // chunk_size) - 1)) * chunk_size
        return TransformedSegment(bytes(segment), FixedSizeChunkIndex(chunk_size, size, chunk_size, last))
    stored = [transforms.forward(chunk, random_bytes=random_bytes) for chunk in original_chunks(segment, chunk_size)]
    index = chunk_index_from_sizes(
        original_chunk_size=chunk_size,
        original_file_size=size,
        transformed_sizes=[len(s) for s in stored],
        fixed_transformed_chunk_size=transforms.fixed_transformed_size(chunk_size),
    )
    return TransformedSegment(b"".join(stored), index)


def split_stored(stored: bytes | memoryview, chunks: tuple[Chunk, ...]) -> list[memoryview]:
    """Cut stored bytes that begin at ``chunks[0]``'s stored position into the stored chunks, in order."""
    check_stored_length(stored, chunks)
    view = memoryview(stored)
    base = chunks[0].transformed_position if chunks else 0
    return [view[chunk.transformed_position - base : chunk.transformed_end - base] for chunk in chunks]


def check_stored_length(stored: bytes | memoryview, chunks: tuple[Chunk, ...]) -> None:
    """Refuse stored bytes that are not exactly ``chunks``' stored bytes (consecutive chunks, one range GET)."""
    expected = chunks[-1].transformed_end - chunks[0].transformed_position if chunks else 0
    if len(stored) != expected:
        span = f"chunks {chunks[0].id}..{chunks[-1].id}" if chunks else "no chunks"
        raise SegmentFormatError(f"{span}: {len(stored)} stored bytes, the chunk index says {expected}")


def detransform_chunks(stored: bytes | memoryview, chunks: tuple[Chunk, ...], transforms: ChunkTransforms) -> bytes:
    """The original bytes of consecutive ``chunks``, from their stored bytes (one range GET's body)."""
    if transforms.identity:
        check_stored_length(stored, chunks)
        return bytes(stored)
    return b"".join(
        transforms.backward(part, chunk) for part, chunk in zip(split_stored(stored, chunks), chunks, strict=True)
    )


def detransform_segment(body: bytes | memoryview, chunk_index: ChunkIndex, transforms: ChunkTransforms) -> bytes:
    """The whole segment back from its ``.log`` object."""
    if len(body) != chunk_index.transformed_file_size:
        raise SegmentFormatError(
            f"the .log object is {len(body)} bytes, the chunk index says {chunk_index.transformed_file_size}"
        )
    if transforms.identity:
        return bytes(body)
    return detransform_chunks(body, chunk_index.chunks(), transforms)
