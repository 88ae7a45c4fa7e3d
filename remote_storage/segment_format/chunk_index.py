"""The chunk index: where each chunk of the original segment lies in the stored (transformed) ``.log`` object.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/manifest/index/ChunkIndex.java``,
``AbstractChunkIndex.java``, ``FixedSizeChunkIndex.java``, ``VariableSizeChunkIndex.java``, their builders, and
``Chunk.java`` (commit in :mod:`remote_storage.segment_format`).

The original segment is cut into chunks of ``originalChunkSize`` bytes, the last one shorter (or equal); chunk
``i`` starts at ``i * originalChunkSize``. Each chunk is transformed on its own and the transformed chunks are
stored back to back, so chunk ``i``'s stored position is the sum of the transformed sizes before it. Two kinds:

* **fixed** (``{"type":"fixed","originalChunkSize","originalFileSize","transformedChunkSize",
  "finalTransformedChunkSize"}``): every transformed chunk but the last has the same size; what Aiven writes when
  nothing is transformed (sizes equal the original ones) or chunks are only encrypted (each grows by IV and tag);
* **variable** (``{"type":"variable","originalChunkSize","originalFileSize","transformedChunks"}``): each transformed
  size is listed (:mod:`.chunk_sizes`); what Aiven writes when chunks are compressed.

Invariants: sizes are int32 and ``originalChunkSize > 0``; a fixed index has ``ceil(originalFileSize /
originalChunkSize)`` chunks (none for an empty file); a variable index lists at least one size (Aiven's reader
cannot build one with none), exactly one per chunk, or exactly one for an empty file; members are written in
the order above (Jackson's creator order), the type first. Unlike Aiven, which pretends an empty fixed index has
one empty chunk, :meth:`chunks` returns only chunks that are stored.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format import chunk_sizes
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import INT32_MAX, require_int, require_str

FIXED, VARIABLE = "fixed", "variable"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: its number, and where it lies in the original segment and in the stored object."""

    id: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int

    @property
    def original_end(self) -> int:
        """One past the chunk's last original byte."""
        return self.original_position + self.original_size

    @property
    def transformed_end(self) -> int:
        """One past the chunk's last stored byte."""
        return self.transformed_position + self.transformed_size


def _check(value: int, what: str, *, positive: bool = False) -> None:
    lo = 1 if positive else 0
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= INT32_MAX:
        raise InvalidArgument(f"{what} must be an int32 >= {lo}, got {value!r}")


@dataclass(frozen=True, slots=True)
class _ChunkIndexBase:
    original_chunk_size: int
    original_file_size: int

    @property
    def chunk_count(self) -> int:
        raise NotImplementedError

    def transformed_chunk_size(self, chunk_id: int) -> int:
        raise NotImplementedError

    def transformed_position(self, chunk_id: int) -> int:
        raise NotImplementedError

    @property
    def transformed_file_size(self) -> int:
        """The size of the stored object."""
        return self.transformed_position(self.chunk_count)

    def chunk(self, chunk_id: int) -> Chunk:
        if not 0 <= chunk_id < self.chunk_count:
            raise InvalidArgument(f"chunk {chunk_id} is not in an index of {self.chunk_count} chunks")
        position = chunk_id * self.original_chunk_size
        last = chunk_id == self.chunk_count - 1
        size = self.original_file_size - position if last else self.original_chunk_size
        return Chunk(
            chunk_id, position, size, self.transformed_position(chunk_id), self.transformed_chunk_size(chunk_id)
        )

    def chunks(self) -> tuple[Chunk, ...]:
        """Every stored chunk, in order."""
        return tuple(self.chunk(i) for i in range(self.chunk_count))

    def find_chunk(self, offset: int) -> Chunk | None:
        """The chunk holding original byte ``offset``; None at or past the end of the segment."""
        if offset < 0:
            raise InvalidArgument(f"offset must be >= 0, got {offset}")
        if offset >= self.original_file_size:
            return None
        return self.chunk(offset // self.original_chunk_size)

    def chunks_for_range(self, start: int, size: int) -> tuple[Chunk, ...]:
        """The chunks holding original bytes ``[start, start + size)``, clipped to the segment; none if empty."""
        if start < 0 or size < 0:
            raise InvalidArgument(f"a range needs start >= 0 and size >= 0, got start={start} size={size}")
        end = min(start + size, self.original_file_size)
        if start >= end:
            return ()
        first, last = start // self.original_chunk_size, (end - 1) // self.original_chunk_size
        return tuple(self.chunk(i) for i in range(first, last + 1))


@dataclass(frozen=True, slots=True)
class FixedSizeChunkIndex(_ChunkIndexBase):
    """Every transformed chunk but the last is ``transformed_chunk_size`` bytes; the last is
    ``final_transformed_chunk_size``."""

    fixed_transformed_chunk_size: int
    final_transformed_chunk_size: int

    def __post_init__(self) -> None:
        _check(self.original_chunk_size, "originalChunkSize", positive=True)
        _check(self.original_file_size, "originalFileSize")
        _check(self.fixed_transformed_chunk_size, "transformedChunkSize")
        _check(self.final_transformed_chunk_size, "finalTransformedChunkSize")

    @property
    def chunk_count(self) -> int:
        return -(-self.original_file_size // self.original_chunk_size)

    def transformed_chunk_size(self, chunk_id: int) -> int:
        last = chunk_id == self.chunk_count - 1
        return self.final_transformed_chunk_size if last else self.fixed_transformed_chunk_size

    def transformed_position(self, chunk_id: int) -> int:
        if chunk_id == self.chunk_count and chunk_id > 0:
            return (chunk_id - 1) * self.fixed_transformed_chunk_size + self.final_transformed_chunk_size
        return chunk_id * self.fixed_transformed_chunk_size


@dataclass(frozen=True, slots=True)
class VariableSizeChunkIndex(_ChunkIndexBase):
    """Each transformed chunk's size is listed."""

    transformed_chunks: tuple[int, ...]
    _positions: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self.original_chunk_size, "originalChunkSize", positive=True)
        _check(self.original_file_size, "originalFileSize")
        object.__setattr__(self, "transformed_chunks", tuple(self.transformed_chunks))
        for size in self.transformed_chunks:
            _check(size, "a transformed chunk size")
        expected = max(1, -(-self.original_file_size // self.original_chunk_size))
        if len(self.transformed_chunks) != expected:
            raise InvalidArgument(
                f"a variable chunk index of {self.original_file_size} bytes in chunks of {self.original_chunk_size} "
                f"lists {expected} transformed size(s), got {len(self.transformed_chunks)}"
            )
        object.__setattr__(self, "_positions", (0, *itertools.accumulate(self.transformed_chunks)))

    @property
    def chunk_count(self) -> int:
        return len(self.transformed_chunks)

    def transformed_chunk_size(self, chunk_id: int) -> int:
        return self.transformed_chunks[chunk_id]

    def transformed_position(self, chunk_id: int) -> int:
        return self._positions[chunk_id]


ChunkIndex = FixedSizeChunkIndex | VariableSizeChunkIndex


def chunk_index_from_sizes(
    *,
    original_chunk_size: int,
    original_file_size: int,
    transformed_sizes: Sequence[int],
    fixed_transformed_chunk_size: int | None,
) -> ChunkIndex:
    """The index of chunks transformed into ``transformed_sizes`` (one per chunk, in order).

    With ``fixed_transformed_chunk_size`` (the size every transformed chunk but the last must have), the fixed kind;
    without, the variable kind. Like Aiven's builders, refuses a chunk count that does not cover the file and a
    non-final chunk of another size than the fixed one. An empty file has no chunks and gets the fixed kind
    whatever the transforms: the variable kind needs at least one size.
    """
    _check(original_chunk_size, "originalChunkSize", positive=True)
    _check(original_file_size, "originalFileSize")
    expected = -(-original_file_size // original_chunk_size)
    if len(transformed_sizes) != expected:
        raise InvalidArgument(
            f"{original_file_size} bytes in chunks of {original_chunk_size} make {expected} chunks, "
            f"got {len(transformed_sizes)} transformed sizes"
        )
    if fixed_transformed_chunk_size is None and transformed_sizes:
        return VariableSizeChunkIndex(original_chunk_size, original_file_size, tuple(transformed_sizes))
    fixed = original_chunk_size if fixed_transformed_chunk_size is None else fixed_transformed_chunk_size
    if any(size != fixed for size in transformed_sizes[:-1]):
        raise InvalidArgument(f"every transformed chunk but the last must be {fixed} bytes: {transformed_sizes[:8]}")
    final = transformed_sizes[-1] if transformed_sizes else 0
    return FixedSizeChunkIndex(original_chunk_size, original_file_size, fixed, final)


def chunk_index_to_json(index: ChunkIndex) -> dict[str, Any]:
    """The index as a JSON object, members in Aiven's order."""
    head = {
        "originalChunkSize": index.original_chunk_size,
        "originalFileSize": index.original_file_size,
    }
    if isinstance(index, FixedSizeChunkIndex):
        return {
            "type": FIXED,
            **head,
            "transformedChunkSize": index.fixed_transformed_chunk_size,
            "finalTransformedChunkSize": index.final_transformed_chunk_size,
        }
    return {"type": VARIABLE, **head, "transformedChunks": chunk_sizes.encode_field(index.transformed_chunks)}


def chunk_index_from_json(obj: Mapping[str, Any], where: str = "chunkIndex") -> ChunkIndex:
    """The index a JSON object describes; :class:`SegmentFormatError` naming the member at fault otherwise."""
    kind = require_str(obj, "type", where)
    chunk_size = require_int(obj, "originalChunkSize", where, lo=1, hi=INT32_MAX)
    file_size = require_int(obj, "originalFileSize", where, lo=0, hi=INT32_MAX)
    try:
        if kind == FIXED:
            return FixedSizeChunkIndex(
                chunk_size,
                file_size,
                require_int(obj, "transformedChunkSize", where, lo=0, hi=INT32_MAX),
                require_int(obj, "finalTransformedChunkSize", where, lo=0, hi=INT32_MAX),
            )
        if kind == VARIABLE:
            sizes = chunk_sizes.decode_field(require_str(obj, "transformedChunks", where))
            return VariableSizeChunkIndex(chunk_size, file_size, sizes)
    except InvalidArgument as exc:
        raise SegmentFormatError(f"{where}: {exc.message}") from exc
    raise SegmentFormatError(f"{where}.type is {kind!r}, not {FIXED!r} or {VARIABLE!r}")
