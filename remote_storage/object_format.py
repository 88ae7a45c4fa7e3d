"""How this broker writes a segment's objects in Aiven's format, and the ``.log`` object built chunk by chunk.

Owner: ours. The settings are Aiven's RemoteStorageManager's (``chunk.size``, ``compression.enabled``,
``encryption.enabled`` with its key ring, ``custom.metadata.fields.include``), held as one value
(:class:`ObjectFormat`) that the broker's entry point builds from its settings, key files read there;
:class:`ChunkedLog` applies them to a segment read a chunk at a time, so a segment of any size is transformed with
one chunk in memory and gets the same bytes and chunk index as :func:`~.segment_format.transform.transform_segment`
of the whole segment.

Invariants: a key ring given for reading only (``encrypt`` off) never encrypts anything written; the key ring, and
the data keys it wraps, never appear in a repr or a log line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.chunk_index import ChunkIndex, chunk_index_from_sizes
from remote_storage.segment_format.custom_metadata import CustomMetadataField
from remote_storage.segment_format.encryption import DataKeyAndAad, RandomBytes, new_data_key_and_aad
from remote_storage.segment_format.key_ring import KeyRing
from remote_storage.segment_format.transform import ChunkTransforms, check_chunk_size

# 4 MiB: Aiven's documentation says to start from it. A fetch reads at most two chunks beyond what it asks for, and
# a consumer asks about 1 MiB per partition (max.partition.fetch.bytes), so a read costs at most 8 MiB from S3;
# each chunk costs a zstd frame, an AES-GCM IV and tag, and a size in the manifest, so smaller chunks grow the
# manifest of a 1 GiB segment (256 chunks here) and the number of range GETs per byte.
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ObjectFormat:
    """What a segment's objects are made of when this broker writes them, and the key ring that opens them."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: bool = False  # zstd each chunk (Aiven: compression.enabled, off by default)
    encrypt: bool = False  # AES-GCM each chunk and index under a fresh data key (encryption.enabled, off by default)
    # The key pairs by id and the active one (encryption.key.pairs, encryption.key.pair.id); needed to encrypt, and
    # to read what was encrypted, also once encryption is turned off.
    key_ring: KeyRing | None = field(default=None, repr=False)
    custom_metadata_fields: frozenset[CustomMetadataField] = frozenset()  # custom.metadata.fields.include

    def __post_init__(self) -> None:
        check_chunk_size(self.chunk_size)
        if self.encrypt and self.key_ring is None:
            raise InvalidArgument("encryption needs a key ring (encryption.key.pairs and encryption.key.pair.id)")

    def new_data_key(self, random_bytes: RandomBytes = os.urandom) -> DataKeyAndAad | None:
        """A fresh data key and AAD for one segment, or None when segments are not encrypted."""
        return new_data_key_and_aad(random_bytes) if self.encrypt else None


DEFAULT_OBJECT_FORMAT = ObjectFormat()


class ChunkedLog:
    """A segment's ``.log`` object built as the segment is read: each :meth:`stored` call takes the next chunk of
    original bytes (``chunk_size`` of them, the last one shorter) and returns it as stored; :meth:`chunk_index` is
    the index of all of them."""

    def __init__(self, *, chunk_size: int, transforms: ChunkTransforms, random_bytes: RandomBytes = os.urandom) -> None:
        self.chunk_size = check_chunk_size(chunk_size)
        self.transforms = transforms
        self._random_bytes = random_bytes
        self._sizes: list[int] = []
        self.original_size = 0
        self._short_chunk_seen = False

    def stored(self, chunk: bytes | memoryview) -> bytes:
        if not chunk or len(chunk) > self.chunk_size or self._short_chunk_seen:
            raise InvalidArgument(
                f"chunks are {self.chunk_size} bytes but the last, never empty: got {len(chunk)} after "
                f"{len(self._sizes)} chunk(s)"
            )
        self._short_chunk_seen = len(chunk) < self.chunk_size
        stored = self.transforms.forward(chunk, random_bytes=self._random_bytes)
        self._sizes.append(len(stored))
        self.original_size += len(chunk)
        return stored

    @property
    def stored_size(self) -> int:
        return sum(self._sizes)

    def chunk_index(self) -> ChunkIndex:
        return chunk_index_from_sizes(
            original_chunk_size=self.chunk_size,
            original_file_size=self.original_size,
            transformed_sizes=self._sizes,
            fixed_transformed_chunk_size=self.transforms.fixed_transformed_size(self.chunk_size),
        )
