"""One segment's three objects built together in memory, and read back: the whole format in two calls.

Owner: the composition is Aiven's ``KafkaRemoteStorageManager.copyLogSegmentData`` / ``fetchLogSegment`` /
``fetchIndex`` (``core/src/main/java/io/aiven/kafka/tieredstorage/KafkaRemoteStorageManager.java``, commit in
:mod:`remote_storage.segment_format`): a fresh data key and AAD per segment when encryption is on, shared by the
``.log`` chunks and the indexes; the ``.log`` transformed chunk by chunk; the indexes concatenated; the manifest
last. This module only composes :mod:`.transform`, :mod:`.segment_indexes` and :mod:`.manifest`; a caller that
streams a large segment chunk by chunk (``transform.original_chunks`` and ``ChunkTransforms.forward``, then
``chunk_index.chunk_index_from_sizes``) gets the same bytes.

Invariant: ``read_segment_objects(build_segment_objects(s, ...), ...)`` gives back the segment and every index.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from remote_storage.segment_format.encryption import RandomBytes, new_data_key_and_aad
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.key_ring import KeyRing
from remote_storage.segment_format.manifest import (
    SegmentManifestV1,
    chunk_transforms,
    manifest_from_json,
    manifest_to_json,
    wrap_encryption,
)
from remote_storage.segment_format.segment_indexes import IndexType, SegmentIndexFiles, build_indexes_object, read_index
from remote_storage.segment_format.transform import ChunkTransforms, detransform_segment, transform_segment


@dataclass(frozen=True, slots=True)
class SegmentObjects:
    """The bytes of the ``.log``, ``.indexes`` and ``.rsm-manifest`` objects, and the manifest they share."""

    log: bytes
    indexes: bytes
    manifest: SegmentManifestV1

    @property
    def manifest_text(self) -> bytes:
        return manifest_to_json(self.manifest).encode("utf-8")

    @property
    def uploaded_bytes(self) -> dict[str, int]:
        """Bytes per object, by suffix: what custom metadata's REMOTE_SIZE adds up."""
        return {"log": len(self.log), "indexes": len(self.indexes), "rsm-manifest": len(self.manifest_text)}


def build_segment_objects(
    segment: bytes | memoryview,
    index_files: SegmentIndexFiles,
    *,
    metadata: RemoteLogSegmentMetadata,
    chunk_size: int,
    compression: bool = False,
    key_ring: KeyRing | None = None,
    random_bytes: RandomBytes = os.urandom,
) -> SegmentObjects:
    """The three objects of ``segment``: compressed if ``compression``, encrypted if a ``key_ring`` is given."""
    key = None if key_ring is None else new_data_key_and_aad(random_bytes)
    log = transform_segment(
        segment,
        chunk_size=chunk_size,
        transforms=ChunkTransforms(compression=compression, encryption=key),
        random_bytes=random_bytes,
    )
    indexes = build_indexes_object(index_files, encryption_key=key, random_bytes=random_bytes)
    manifest = SegmentManifestV1(
        chunk_index=log.chunk_index,
        segment_indexes=indexes.indexes,
        compression=compression,
        encryption=None if key is None or key_ring is None else wrap_encryption(key, key_ring),
        remote_log_segment_metadata=metadata,
    )
    return SegmentObjects(log.body, indexes.body, manifest)


@dataclass(frozen=True, slots=True)
class SegmentContents:
    """What a segment's objects hold: the segment and each index (None for an absent transaction index)."""

    segment: bytes
    indexes: dict[IndexType, bytes | None]
    manifest: SegmentManifestV1


def read_segment_objects(
    *, log: bytes, indexes: bytes, manifest_text: bytes | str, key_ring: KeyRing | None = None
) -> SegmentContents:
    """The segment and its indexes from the three objects' whole bytes (range reads: :mod:`.range_read`)."""
    manifest = manifest_from_json(manifest_text)
    transforms = chunk_transforms(manifest, key_ring)
    segment = detransform_segment(log, manifest.chunk_index, transforms)
    contents = {
        index_type: read_index(indexes, manifest.segment_indexes, index_type, encryption_key=transforms.encryption)
        for index_type in IndexType
    }
    return SegmentContents(segment, contents, manifest)
