"""Our objects read by a second implementation written only from the format, and the other way round.

The second implementation is :mod:`tests.remote_storage.segment_format.aiven_reference` (no import of the library).
Both directions run with compression and encryption on and off, for any chunk size and segment length.
"""

from __future__ import annotations

import random

import pytest
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from remote_storage.segment_format.kafka_metadata import (
    RemoteLogSegmentMetadata,
    remote_log_segment_metadata_to_json,
)
from remote_storage.segment_format.key_ring import KeyRing
from remote_storage.segment_format.manifest import chunk_transforms, manifest_from_json
from remote_storage.segment_format.object_set import build_segment_objects, read_segment_objects
from remote_storage.segment_format.range_read import plan_range_read
from remote_storage.segment_format.segment_indexes import IndexType, SegmentIndexFiles
from tests.remote_storage.segment_format.aiven_reference import read_objects, write_objects
from tests.remote_storage.segment_format.golden import KEY_PAIR_ID

pytestmark = pytest.mark.unit

METADATA = RemoteLogSegmentMetadata(
    topic_id=Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"),
    topic="orders.eu-1",
    partition=3,
    segment_id=Uuid.from_string("adh9f8BMS4anaUnD8KWfWg"),
    start_offset=1000,
    end_offset=1999,
    max_timestamp_ms=1_700_000_000_000,
    broker_id=2,
    event_timestamp_ms=1_700_000_000_500,
    segment_leader_epochs=((4, 1000), (5, 1500)),
)


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, SegmentIndexFiles, int]:
    chunk_size = draw(st.integers(1, 300))
    length = draw(st.integers(0, 16)) * chunk_size + draw(st.sampled_from([0, 1, chunk_size - 1]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    data = draw(st.sampled_from([rng.randbytes(length), b"record " * (length // 7) + bytes(length % 7)]))
    sizes = draw(st.lists(st.sampled_from([0, 1, 12, 100]), min_size=4, max_size=4))
    transaction = draw(st.none() | st.sampled_from([0, 40]))
    files = SegmentIndexFiles(
        *(rng.randbytes(s) for s in sizes), None if transaction is None else rng.randbytes(transaction)
    )
    return data, files, chunk_size


def _contents(files: SegmentIndexFiles) -> dict[str, bytes | None]:
    return {t.value: files.contents(t) for t in IndexType}


@settings(deadline=None, max_examples=60)
@given(segment=segments(), compression=st.booleans(), encryption=st.booleans())
def test_objects_we_write_are_read_back_by_a_reader_written_only_from_the_format(
    segment: tuple[bytes, SegmentIndexFiles, int],
    compression: bool,
    encryption: bool,
    key_ring: KeyRing,
    rsa_private_key: RSAPrivateKey,
) -> None:
    data, files, chunk_size = segment
    objects = build_segment_objects(
        data,
        files,
        metadata=METADATA,
        chunk_size=chunk_size,
        compression=compression,
        key_ring=key_ring if encryption else None,
    )
    bucket = {"log": objects.log, "indexes": objects.indexes, "rsm-manifest": objects.manifest_text}
    read = read_objects(bucket, {KEY_PAIR_ID: rsa_private_key})
    assert read.segment == data
    assert read.indexes == _contents(files)
    assert read.manifest["compression"] is compression
    assert ("encryption" in read.manifest) is encryption
    assert read.manifest["remoteLogSegmentMetadata"] == remote_log_segment_metadata_to_json(METADATA)


def test_compressed_and_encrypted_objects_of_a_real_sized_segment_read_back_independently(
    key_ring: KeyRing, rsa_private_key: RSAPrivateKey
) -> None:
    rng = random.Random(11)
    data = b"".join(rng.randbytes(100) + bytes(400) for _ in range(2000))  # 1 MB, half of it compressible
    files = SegmentIndexFiles(rng.randbytes(800), rng.randbytes(1200), rng.randbytes(60), b"0\n1\n5 1000\n", None)
    objects = build_segment_objects(
        data, files, metadata=METADATA, chunk_size=64 * 1024, compression=True, key_ring=key_ring
    )
    assert len(objects.log) < len(data)
    bucket = {"log": objects.log, "indexes": objects.indexes, "rsm-manifest": objects.manifest_text}
    read = read_objects(bucket, {KEY_PAIR_ID: rsa_private_key})
    assert read.segment == data
    assert read.indexes == _contents(files)


@settings(deadline=None, max_examples=60)
@given(segment=segments(), compression=st.booleans(), encryption=st.booleans(), data=st.data())
def test_objects_a_writer_built_only_from_the_format_are_read_by_the_library(
    segment: tuple[bytes, SegmentIndexFiles, int],
    compression: bool,
    encryption: bool,
    data: st.DataObject,
    key_ring: KeyRing,
    rsa_private_key: RSAPrivateKey,
) -> None:
    original, files, chunk_size = segment
    objects = write_objects(
        original,
        _contents(files),
        chunk_size=chunk_size,
        compression=compression,
        public_key=(KEY_PAIR_ID, rsa_private_key.public_key()) if encryption else None,
        metadata=remote_log_segment_metadata_to_json(METADATA),
    )
    contents = read_segment_objects(
        log=objects["log"], indexes=objects["indexes"], manifest_text=objects["rsm-manifest"], key_ring=key_ring
    )
    assert contents.segment == original
    assert {t.value: v for t, v in contents.indexes.items()} == _contents(files)
    assert contents.manifest.remote_log_segment_metadata == METADATA

    # A range read through the library's chunk index, of the reference writer's object.
    manifest = manifest_from_json(objects["rsm-manifest"])
    start = data.draw(st.integers(0, len(original)))
    size = data.draw(st.integers(0, len(original) - start))
    plan = plan_range_read(manifest.chunk_index, start=start, size=size)
    span = plan.object_range
    fetched = b"" if span is None else objects["log"][span[0] : span[1] + 1]
    assert plan.extract(fetched, chunk_transforms(manifest, key_ring)) == original[start : start + size]
