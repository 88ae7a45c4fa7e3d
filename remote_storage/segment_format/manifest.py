"""The ``.rsm-manifest`` object: Aiven's ``SegmentManifestV1`` JSON, written field for field and read back.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/manifest/SegmentManifest.java``,
``SegmentManifestV1.java``, ``SegmentEncryptionMetadataV1.java``, ``manifest/serde/EncryptionSerdeModule.java`` and
``DataKeySerializer.java``, written by ``KafkaRemoteStorageManager.uploadManifest`` through the ``ObjectMapper`` of
``RemoteStorageManagerUtils.java`` (commit in :mod:`remote_storage.segment_format`). The text, compact, members in
this order::

    {"version":"1",
     "chunkIndex":{...},                                  .chunk_index
     "segmentIndexes":{...},                              .segment_indexes
     "compression":<bool>,                                are the .log chunks zstd-compressed
     "encryption":{"dataKey":"<id>:<base64>","aad":"<base64>"},   only when encrypted (absent otherwise, not null)
     "remoteLogSegmentMetadata":{...}}                    .kafka_metadata; Aiven writes it and never reads it

The version is Jackson's type id, a string. Base64 is the standard alphabet with padding. The data key in the
manifest is always wrapped (:mod:`.key_ring`); unwrapping it needs the key ring, so :func:`manifest_from_json`
returns it wrapped and :func:`unwrap_encryption` opens it.

Reading is as strict as Aiven's reader where Aiven's is strict (required members, their types, the version) and
reads ``remoteLogSegmentMetadata`` when present (Aiven skips it); members this module does not know are ignored
(Aiven's reader would refuse them; this module never writes any).

Invariants: ``manifest_from_json(manifest_to_json(m)) == m``; the text of a manifest without encryption is the
same, byte for byte, as Aiven's for the same values (tested against Aiven's own expected strings).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote_storage.segment_format.chunk_index import ChunkIndex, chunk_index_from_json, chunk_index_to_json
from remote_storage.segment_format.encryption import DataKeyAndAad
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import (
    dumps,
    loads_object,
    optional_object,
    require_bool,
    require_object,
    require_str,
)
from remote_storage.segment_format.kafka_metadata import (
    RemoteLogSegmentMetadata,
    remote_log_segment_metadata_from_json,
    remote_log_segment_metadata_to_json,
)
from remote_storage.segment_format.key_ring import EncryptedDataKey, KeyRing
from remote_storage.segment_format.segment_indexes import (
    SegmentIndexes,
    segment_indexes_from_json,
    segment_indexes_to_json,
)
from remote_storage.segment_format.transform import ChunkTransforms

VERSION = "1"


@dataclass(frozen=True, slots=True)
class SegmentEncryptionMetadata:
    """The manifest's ``encryption``: the segment's data key, wrapped, and its AAD."""

    data_key: EncryptedDataKey
    aad: bytes

    def __repr__(self) -> str:
        return f"SegmentEncryptionMetadata(key_pair_id={self.data_key.key_pair_id!r}, aad=<{len(self.aad)} bytes>)"


@dataclass(frozen=True, slots=True)
class SegmentManifestV1:
    chunk_index: ChunkIndex
    segment_indexes: SegmentIndexes
    compression: bool
    encryption: SegmentEncryptionMetadata | None = None
    remote_log_segment_metadata: RemoteLogSegmentMetadata | None = None


def wrap_encryption(
    key: DataKeyAndAad, key_ring: KeyRing, *, random_bytes: Callable[[int], bytes] | None = None
) -> SegmentEncryptionMetadata:
    """The manifest's ``encryption`` for a segment encrypted under ``key``: the data key wrapped with the ring's
    active key pair."""
    return SegmentEncryptionMetadata(key_ring.wrap(key.data_key, random_bytes=random_bytes), key.aad)


def unwrap_encryption(metadata: SegmentEncryptionMetadata, key_ring: KeyRing) -> DataKeyAndAad:
    """The data key and AAD a manifest's ``encryption`` holds, unwrapped with the key pair it names."""
    return DataKeyAndAad(key_ring.unwrap(metadata.data_key), metadata.aad)


def chunk_transforms(manifest: SegmentManifestV1, key_ring: KeyRing | None) -> ChunkTransforms:
    """What to undo on each chunk of the segment's ``.log`` object (needs ``key_ring`` when it is encrypted)."""
    key = None
    if manifest.encryption is not None:
        if key_ring is None:
            raise SegmentFormatError("the segment is encrypted and no key ring was given")
        key = unwrap_encryption(manifest.encryption, key_ring)
    return ChunkTransforms(compression=manifest.compression, encryption=key)


def manifest_to_json(manifest: SegmentManifestV1) -> str:
    """The manifest's text, as Aiven writes it."""
    obj: dict[str, Any] = {
        "version": VERSION,
        "chunkIndex": chunk_index_to_json(manifest.chunk_index),
        "segmentIndexes": segment_indexes_to_json(manifest.segment_indexes),
        "compression": manifest.compression,
    }
    if manifest.encryption is not None:
        obj["encryption"] = {
            "dataKey": manifest.encryption.data_key.to_text(),
            "aad": base64.b64encode(manifest.encryption.aad).decode("ascii"),
        }
    if manifest.remote_log_segment_metadata is not None:
        obj["remoteLogSegmentMetadata"] = remote_log_segment_metadata_to_json(manifest.remote_log_segment_metadata)
    else:
        obj["remoteLogSegmentMetadata"] = None  # what Jackson writes for a manifest built without it
    return dumps(obj)


def manifest_from_json(text: str | bytes) -> SegmentManifestV1:
    """The manifest a ``.rsm-manifest`` object holds; :class:`SegmentFormatError` naming the member at fault."""
    obj = loads_object(text, "manifest")
    version = require_str(obj, "version", "manifest")
    if version != VERSION:
        raise SegmentFormatError(f"manifest.version is {version!r}; only {VERSION!r} (SegmentManifestV1) is known")
    encryption = None
    encryption_obj = optional_object(obj, "encryption", "manifest")
    if encryption_obj is not None:
        encryption = SegmentEncryptionMetadata(
            EncryptedDataKey.from_text(require_str(encryption_obj, "dataKey", "manifest.encryption")),
            _base64(require_str(encryption_obj, "aad", "manifest.encryption"), "manifest.encryption.aad"),
        )
    metadata_obj = optional_object(obj, "remoteLogSegmentMetadata", "manifest")
    return SegmentManifestV1(
        chunk_index=chunk_index_from_json(require_object(obj, "chunkIndex", "manifest"), "manifest.chunkIndex"),
        segment_indexes=segment_indexes_from_json(
            require_object(obj, "segmentIndexes", "manifest"), "manifest.segmentIndexes"
        ),
        compression=require_bool(obj, "compression", "manifest"),
        encryption=encryption,
        remote_log_segment_metadata=(
            None
            if metadata_obj is None
            else remote_log_segment_metadata_from_json(metadata_obj, "manifest.remoteLogSegmentMetadata")
        ),
    )


def _base64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SegmentFormatError(f"{where} is not base64: {exc}") from exc
