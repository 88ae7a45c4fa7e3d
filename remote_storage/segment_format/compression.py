"""zstd as Aiven uses it: one frame per compressed blob, with the content size in its header.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/transform/`` (its
``CompressionChunkEnumeration.java`` and ``DecompressionChunkEnumeration.java``) and ``manifest/index/serde/``
(``TransformedChunksSerializer.java`` and ``TransformedChunksDeserializer.java``), commit in
:mod:`remote_storage.segment_format`. Aiven compresses with zstd-jni's ``ZstdCompressCtx`` at zstd's
default level (3), the source size pledged and ``setContentSize(true)``, no checksum, no dictionary.

Invariants:

* a compressed blob is exactly one zstd frame whose header carries the decompressed size: Aiven's reader sizes its
  output buffer from that header (``Zstd.decompressedSize``) and refuses a frame without it, so a frame written
  here without a content size would be unreadable by Aiven;
* :func:`decompress` refuses a frame without a content size, trailing bytes after the frame, and (when told the
  size to expect) a frame of another size: a chunk of the wrong size would shift every byte after it.
"""

from __future__ import annotations

import zstandard

from remote_storage.segment_format.errors import SegmentFormatError

LEVEL = 3  # zstd's default level (ZSTD_CLEVEL_DEFAULT), which Aiven's ZstdCompressCtx keeps


def compress(data: bytes | memoryview) -> bytes:
    """One zstd frame of ``data``, as Aiven writes a compressed chunk (content size in the header)."""
    compressor = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True, write_checksum=False)
    return compressor.compress(data)


def decompress(frame: bytes | memoryview, *, what: str, expected_size: int | None = None, max_size: int) -> bytes:
    """The content of one zstd frame written as :func:`compress` writes it; ``what`` names it in errors."""
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as exc:
        raise SegmentFormatError(f"{what} is not a zstd frame: {exc}") from exc
    size = params.content_size
    if size == zstandard.CONTENTSIZE_UNKNOWN or size == zstandard.CONTENTSIZE_ERROR:
        raise SegmentFormatError(f"{what}: the zstd frame does not carry its content size")
    if size > max_size or (expected_size is not None and size != expected_size):
        expected = f"{expected_size}" if expected_size is not None else f"at most {max_size}"
        raise SegmentFormatError(f"{what}: the zstd frame holds {size} bytes, expected {expected}")
    decompressor = zstandard.ZstdDecompressor()
    try:
        obj = decompressor.decompressobj()
        content = obj.decompress(frame)
    except zstandard.ZstdError as exc:
        raise SegmentFormatError(f"{what} does not decompress: {exc}") from exc
    if not obj.eof or obj.unused_data or len(content) != size:
        raise SegmentFormatError(f"{what}: not exactly one complete zstd frame of {size} bytes")
    return content
