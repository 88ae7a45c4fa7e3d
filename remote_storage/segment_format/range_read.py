"""Reading a byte range of a segment through its chunk index: which stored bytes to GET, and how to cut them.

Owner: the lookups are Aiven's (``core/src/main/java/io/aiven/kafka/tieredstorage/fetch/FetchChunkEnumeration.java``
and ``manifest/index/AbstractChunkIndex.java``, commit in :mod:`remote_storage.segment_format`); the plan as a
value is ours. A read of original bytes ``[start, start + size)`` needs the chunks holding them, which lie back to
back in the stored object: one range GET (``bytes=first-last``) fetches them all, each is detransformed on its own
(:mod:`.transform`), and the first and last are cut to the range asked.

Invariants: a plan touches exactly the chunks that hold at least one byte asked for, so it fetches less than two
chunks beyond the bytes asked (at most one partial chunk at each end); :meth:`RangeRead.cut` returns exactly
``size`` bytes; a range past the end of the segment is clipped to it, as Aiven clips its last chunk, and a range
that starts past the end is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.chunk_index import Chunk, ChunkIndex
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.transform import ChunkTransforms, split_stored


@dataclass(frozen=True, slots=True)
class RangeRead:
    """A planned read of original bytes ``[start, start + size)``: the chunks it needs and where they are stored."""

    start: int
    size: int
    chunks: tuple[Chunk, ...]

    @property
    def object_range(self) -> tuple[int, int] | None:
        """The stored bytes to fetch, ``(first, last)`` both inclusive; None when nothing is to be read."""
        if not self.chunks:
            return None
        return self.chunks[0].transformed_position, self.chunks[-1].transformed_end - 1

    @property
    def http_range(self) -> str | None:
        """The ``Range`` header of the GET, or None when nothing is to be read."""
        span = self.object_range
        return None if span is None else f"bytes={span[0]}-{span[1]}"

    @property
    def fetched_size(self) -> int:
        span = self.object_range
        return 0 if span is None else span[1] - span[0] + 1

    def cut(self, originals: Sequence[bytes | memoryview]) -> bytes:
        """The bytes asked for, from the original bytes of :attr:`chunks` (in order, e.g. from a chunk cache)."""
        if len(originals) != len(self.chunks):
            raise InvalidArgument(f"{len(originals)} chunks given, the read needs {len(self.chunks)}")
        for chunk, original in zip(self.chunks, originals, strict=True):
            if len(original) != chunk.original_size:
                raise SegmentFormatError(f"chunk {chunk.id}: {len(original)} bytes, expected {chunk.original_size}")
        end = self.start + self.size
        pieces = []
        for chunk, original in zip(self.chunks, originals, strict=True):
            lo = max(self.start, chunk.original_position) - chunk.original_position
            hi = min(end, chunk.original_end) - chunk.original_position
            pieces.append(memoryview(original)[lo:hi])
        return b"".join(pieces)

    def extract(self, stored: bytes | memoryview, transforms: ChunkTransforms) -> bytes:
        """The bytes asked for, from the body of the GET of :attr:`object_range`."""
        parts = split_stored(stored, self.chunks)
        return self.cut([transforms.backward(part, chunk) for part, chunk in zip(parts, self.chunks, strict=True)])


def plan_range_read(index: ChunkIndex, *, start: int, size: int) -> RangeRead:
    """The read of ``size`` original bytes from ``start``, clipped to the end of the segment."""
    if start < 0 or size < 0:
        raise InvalidArgument(f"a range needs start >= 0 and size >= 0, got start={start} size={size}")
    if start > index.original_file_size:
        raise InvalidArgument(f"a range from {start} starts past the end of a {index.original_file_size}-byte segment")
    clipped = min(size, index.original_file_size - start)
    return RangeRead(start, clipped, index.chunks_for_range(start, clipped))
