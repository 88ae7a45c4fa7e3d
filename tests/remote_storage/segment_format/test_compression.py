"""zstd frames as Aiven writes and reads them."""

from __future__ import annotations

import pytest
import zstandard

from remote_storage.segment_format import compression
from remote_storage.segment_format.errors import SegmentFormatError

pytestmark = pytest.mark.unit


def test_a_frame_carries_its_content_size_and_no_checksum() -> None:
    frame = compression.compress(b"x" * 1000)
    params = zstandard.get_frame_parameters(frame)
    assert (params.content_size, params.has_checksum) == (1000, False)
    assert compression.decompress(frame, what="f", expected_size=1000, max_size=1000) == b"x" * 1000


def test_a_frame_without_its_size_with_trailing_bytes_or_cut_short_is_refused() -> None:
    streamer = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    no_size = streamer.compress(b"abc") + streamer.flush()
    with pytest.raises(SegmentFormatError, match="content size"):
        compression.decompress(no_size, what="f", max_size=10)
    frame = compression.compress(b"abc")
    with pytest.raises(SegmentFormatError, match="not exactly one complete zstd frame"):
        compression.decompress(frame + b"\x00", what="f", max_size=10)
    with pytest.raises(SegmentFormatError, match="f"):
        compression.decompress(frame[:-1], what="f", max_size=10)
    with pytest.raises(SegmentFormatError, match="expected at most 2"):
        compression.decompress(frame, what="f", max_size=2)
