"""The ``transformedChunks`` field of a variable chunk index: a list of sizes, packed, zstd-compressed, base64.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/manifest/index/serde/
ChunkSizesBinaryCodec.java`` and ``TransformedChunksSerializer.java`` / ``TransformedChunksDeserializer.java``
(commit in :mod:`remote_storage.segment_format`).

The packed form (all integers big-endian)::

    count: int32
    base: int32               the smallest of the values but the last     \\
    width: int8               bytes per packed value, 1 to 4              |  only when count >= 2
    values: (count - 1) * width bytes, each value minus base              /
    last: int32               the last value, in full                        when count >= 1

``width`` is the fewest bytes that hold the largest ``value - base``; the last value is kept apart because the final
chunk is usually much smaller than the others. The field's text is standard base64 (with padding) of one zstd frame
of the packed bytes, written as :mod:`.compression` writes frames; Aiven refuses a packed form over 10 MiB.

Invariants: values are int32 and never negative; ``unpack(pack(v)) == v``; :func:`unpack` refuses a blob whose
length is not exactly what its count and width say.
"""

from __future__ import annotations

import array
import base64
import binascii
import struct
import sys
from collections.abc import Sequence

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format import compression
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import INT32_MAX

MAX_PACKED_SIZE = 10 * 1024 * 1024  # Aiven's sanity bound on the packed form, both ways
_INT = struct.Struct(">i")
_UINT32 = "I" if array.array("I").itemsize == 4 else "L"  # a C unsigned int is 4 bytes on every platform we run on


def _width(value: int) -> int:
    return 1 if value <= 0xFF else 2 if value <= 0xFFFF else 3 if value <= 0xFFFFFF else 4


def _big_endian_uint32s(values: Sequence[int]) -> bytearray:
    packed = array.array(_UINT32, values)
    if sys.byteorder == "little":
        packed.byteswap()
    return bytearray(packed.tobytes())


def pack(values: Sequence[int]) -> bytes:
    """The packed form of ``values`` (each an int32 >= 0)."""
    if values and (min(values) < 0 or max(values) > INT32_MAX):
        raise InvalidArgument(f"chunk sizes must be int32 values >= 0, got {list(values)[:8]}...")
    count = len(values)
    if count == 0:
        return _INT.pack(0)
    if count == 1:
        return _INT.pack(1) + _INT.pack(values[0])
    body = values[:-1]
    base = min(body)
    width = _width(max(body) - base)
    full = _big_endian_uint32s([v - base for v in body])
    packed = bytearray(len(body) * width)
    for byte in range(width):  # keep the low ``width`` bytes of each big-endian uint32, a column at a time
        packed[byte::width] = full[4 - width + byte :: 4]
    return _INT.pack(count) + _INT.pack(base) + bytes([width]) + bytes(packed) + _INT.pack(values[-1])


def unpack(blob: bytes) -> tuple[int, ...]:
    """The values of a packed form; :class:`SegmentFormatError` if it is malformed."""
    if len(blob) < 4:
        raise SegmentFormatError(f"packed chunk sizes: {len(blob)} bytes, too short for a count")
    (count,) = _INT.unpack_from(blob, 0)
    if count < 0:
        raise SegmentFormatError(f"packed chunk sizes: negative count {count}")
    if count <= 1:
        expected = 4 + 4 * count
        if len(blob) != expected:
            raise SegmentFormatError(f"packed chunk sizes: {len(blob)} bytes for {count} value(s), expected {expected}")
        return () if count == 0 else (_nonnegative(_INT.unpack_from(blob, 4)[0]),)
    if len(blob) < 9:
        raise SegmentFormatError(f"packed chunk sizes: {len(blob)} bytes, too short for {count} values")
    (base,) = _INT.unpack_from(blob, 4)
    width = blob[8]
    if not 1 <= width <= 4:
        raise SegmentFormatError(f"packed chunk sizes: {width} bytes per value (1 to 4 allowed)")
    expected = 9 + (count - 1) * width + 4
    if len(blob) != expected:
        raise SegmentFormatError(
            f"packed chunk sizes: {len(blob)} bytes for {count} values of {width}, expected {expected}"
        )
    full = bytearray(4 * (count - 1))
    for byte in range(width):
        full[4 - width + byte :: 4] = blob[9 + byte : expected - 4 : width]
    offsets = array.array(_UINT32, bytes(full))
    if sys.byteorder == "little":
        offsets.byteswap()
    values = [base + offset for offset in offsets]
    values.append(_INT.unpack_from(blob, expected - 4)[0])
    if min(values) < 0 or max(values) > INT32_MAX:
        raise SegmentFormatError(f"packed chunk sizes: a value is not an int32 >= 0 (base {base})")
    return tuple(values)


def _nonnegative(value: int) -> int:
    if not 0 <= value <= INT32_MAX:
        raise SegmentFormatError(f"packed chunk sizes: value {value} is not an int32 >= 0")
    return value


def encode_field(values: Sequence[int]) -> str:
    """The ``transformedChunks`` text of ``values``: base64 of the zstd frame of the packed form."""
    packed = pack(values)
    if len(packed) > MAX_PACKED_SIZE:
        raise InvalidArgument(f"{len(values)} chunk sizes pack into {len(packed)} bytes, over Aiven's 10 MiB")
    return base64.b64encode(compression.compress(packed)).decode("ascii")


def decode_field(text: str) -> tuple[int, ...]:
    """The values of a ``transformedChunks`` text."""
    try:
        frame = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SegmentFormatError(f"chunkIndex.transformedChunks is not base64: {exc}") from exc
    packed = compression.decompress(frame, what="chunkIndex.transformedChunks", max_size=MAX_PACKED_SIZE)
    return unpack(packed)
