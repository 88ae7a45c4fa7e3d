"""A segment's three objects in Aiven's format, built by the format library, for tests of the scan and reclaim.

The bytes are the library's (:func:`remote_storage.segment_format.object_set.build_segment_objects`), so a bucket
planted with them holds what a broker writing Aiven's format uploads: a chunked ``.log`` (compressed and encrypted
when asked), the five-index ``.indexes`` and a ``SegmentManifestV1``. ``legacy_manifest`` is what the code before
Aiven's format wrote: a flat JSON object of our own with ``tieredEpoch``.
"""

from __future__ import annotations

import json
import random

from Cryptodome.PublicKey import RSA

from orchestrator.ids import Uuid
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.key_ring import KeyRing, RsaKeyPair
from remote_storage.segment_format.object_set import SegmentObjects, build_segment_objects
from remote_storage.segment_format.segment_indexes import SegmentIndexFiles

KEY_PAIR_ID = "scan-test-key"


def key_ring(seed: int = 950) -> KeyRing:
    """A ring of one RSA key pair (2048 bits), from a seeded generator so that tests repeat."""
    rng = random.Random(seed)
    private = RSA.generate(2048, randfunc=rng.randbytes)
    return KeyRing(KEY_PAIR_ID, {KEY_PAIR_ID: RsaKeyPair(private.public_key(), private)})


def segment_bytes(size: int, *, seed: int = 0, compressible: bool = True) -> bytes:
    """``size`` bytes that look like record batches: half random, half zeros when ``compressible``."""
    rng = random.Random(seed)
    if not compressible:
        return rng.randbytes(size)
    chunk = b"".join(rng.randbytes(50) + bytes(50) for _ in range(size // 100 + 1))
    return chunk[:size]


def aiven_objects(
    *,
    topic: str,
    topic_id: str | Uuid,
    partition: int,
    segment_id: str | Uuid,
    start_offset: int,
    end_offset: int,
    data: bytes,
    chunk_size: int = 4096,
    compression: bool = False,
    ring: KeyRing | None = None,
    seed: int = 0,
) -> SegmentObjects:
    """The three objects of a segment holding ``data``, as Aiven's RemoteStorageManager writes them."""
    rng = random.Random(seed)
    metadata = RemoteLogSegmentMetadata(
        topic_id=topic_id if isinstance(topic_id, Uuid) else Uuid.from_string(topic_id),
        topic=topic,
        partition=partition,
        segment_id=segment_id if isinstance(segment_id, Uuid) else Uuid.from_string(segment_id),
        start_offset=start_offset,
        end_offset=end_offset,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        segment_leader_epochs=((0, start_offset),),
    )
    files = SegmentIndexFiles(rng.randbytes(24), rng.randbytes(36), b"", b"0\n1\n0 0\n", None)
    return build_segment_objects(
        data,
        files,
        metadata=metadata,
        chunk_size=chunk_size,
        compression=compression,
        key_ring=ring,
        random_bytes=rng.randbytes,
    )


def legacy_manifest(*, topic: str, topic_id: str, partition: int, segment_id: str, tiered_epoch: int = 1) -> bytes:
    """A ``.rsm-manifest`` as the code before Aiven's format wrote it (``S3RemoteStorage.copy_segment``)."""
    doc = {"topic": topic, "topicId": topic_id, "partition": partition, "segmentId": segment_id}
    return json.dumps({**doc, "tieredEpoch": tiered_epoch}, sort_keys=True).encode()
