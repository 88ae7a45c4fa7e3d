"""Reading a remote segment by ranges: its manifest once, then only the chunks and indexes a read needs.

Owner: ours, over Aiven's format (:mod:`remote_storage.segment_format`). A remote segment is found where its RLMM
entry says (:meth:`~remote_storage.rlmm_values.RemoteSegment.object_keys`: the configured prefix, or the prefix and key
its custom metadata recorded). Its ``.rsm-manifest`` is read once and kept (:class:`SegmentLayout`, an LRU of
:data:`MANIFESTS_KEPT` segments; for an encrypted segment, with its data key unwrapped once): then a read of
original bytes ``[position, position + length)`` GETs the chunks holding them, one range GET per run of chunks the
:class:`~remote_storage.chunk_cache.ChunkCache` does not hold, decrypts and decompresses each chunk on its own,
keeps them in the cache and cuts the range out. An index is one range GET of its bytes in ``.indexes``, decoded
and cached the same way.

Two formats are read, told apart by the manifest's shape:

* Aiven's ``SegmentManifestV1`` (``"version": "1"``): what brokers write now;
* the landed format, written by this project before (a flat JSON object of our own, ``topic``, ``topicId``,
  ``segmentSizeInBytes``..., ``tieredEpoch``, no ``version``): a raw ``.log`` and an ``.indexes`` object that is the
  offset index alone. Such a segment is read as an untransformed one whose chunks are ``legacy_chunk_size`` bytes
  (any size reads raw bytes by ranges), with the offset index and no other index. Nothing acknowledged before the
  format changed becomes unreadable.

Invariants: a read returns exactly the original bytes asked for (clipped at the segment's end) or raises
:class:`~orchestrator.errors.RemoteStorageError` (a :class:`SegmentFormatError` when the bytes do not follow the
format); it never fetches a chunk that holds none of the bytes asked for.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.ids import Uuid
from remote_storage.chunk_cache import ChunkCache
from remote_storage.keys import Suffix
from remote_storage.rlmm import RemoteSegment
from remote_storage.s3 import S3RemoteStorage
from remote_storage.segment_format.chunk_index import Chunk, ChunkIndex, FixedSizeChunkIndex
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.key_ring import KeyRing
from remote_storage.segment_format.manifest import chunk_transforms, manifest_from_json
from remote_storage.segment_format.range_read import plan_range_read
from remote_storage.segment_format.segment_indexes import IndexType, SegmentIndexes, decode_index
from remote_storage.segment_format.transform import NO_TRANSFORMS, ChunkTransforms, split_stored

MANIFESTS_KEPT = 4096  # segment layouts kept (each a few hundred bytes, a 1 GiB segment's chunk sizes included)


@dataclass(frozen=True, slots=True)
class SegmentLayout:
    """How one remote segment's objects are read: where they are and what was done to the ``.log``'s chunks."""

    keys: Mapping[Suffix, str]
    chunk_index: ChunkIndex
    transforms: ChunkTransforms = field(repr=False)  # holds the data key
    indexes: SegmentIndexes | None  # None: the landed format, whose .indexes object is the offset index alone

    @property
    def landed_format(self) -> bool:
        return self.indexes is None


def legacy_chunk_index(size: int, chunk_size: int) -> FixedSizeChunkIndex:
    """The chunk index of an untransformed object of ``size`` bytes cut in chunks of ``chunk_size``."""
    count = -(-size // chunk_size)
    last = size - (count - 1) * chunk_size if count else 0
    return FixedSizeChunkIndex(chunk_size, size, chunk_size, last)


def parse_layout(
    manifest_text: bytes, keys: Mapping[Suffix, str], *, key_ring: KeyRing | None, legacy_chunk_size: int
) -> SegmentLayout:
    """The layout a ``.rsm-manifest`` object describes, in either format (module docstring)."""
    try:
        doc = json.loads(manifest_text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SegmentFormatError(f"the manifest {keys[Suffix.MANIFEST]} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SegmentFormatError(f"the manifest {keys[Suffix.MANIFEST]} is not a JSON object")
    if "version" in doc:
        manifest = manifest_from_json(manifest_text)
        transforms = chunk_transforms(manifest, key_ring)
        return SegmentLayout(keys, manifest.chunk_index, transforms, manifest.segment_indexes)
    size = doc.get("segmentSizeInBytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise SegmentFormatError(
            f"the manifest {keys[Suffix.MANIFEST]} has no version (the landed format) and no segmentSizeInBytes"
        )
    return SegmentLayout(keys, legacy_chunk_index(size, legacy_chunk_size), NO_TRANSFORMS, None)


class RemoteSegmentReader:
    """Range reads of remote segments through one RemoteStorageManager, a chunk cache and a manifest cache."""

    def __init__(self, rsm: S3RemoteStorage, cache: ChunkCache | None = None) -> None:
        self.rsm = rsm
        self.cache = cache if cache is not None else ChunkCache()
        self._lock = threading.Lock()
        self._layouts: OrderedDict[Uuid, SegmentLayout] = OrderedDict()

    def layout(self, seg: RemoteSegment) -> SegmentLayout:
        """The segment's layout, from its manifest read once."""
        with self._lock:
            known = self._layouts.get(seg.segment_id)
            if known is not None:
                self._layouts.move_to_end(seg.segment_id)
                return known
        keys = seg.object_keys(self.rsm.prefix)
        fmt = self.rsm.object_format
        text = self.rsm.fetch(keys[Suffix.MANIFEST])
        layout = parse_layout(text, keys, key_ring=fmt.key_ring, legacy_chunk_size=fmt.chunk_size)
        with self._lock:
            self._layouts[seg.segment_id] = layout
            while len(self._layouts) > MANIFESTS_KEPT:
                self._layouts.popitem(last=False)
        return layout

    def read(self, seg: RemoteSegment, position: int, length: int) -> bytes:
        """Original bytes ``[position, position + length)`` of the segment, clipped at its end."""
        layout = self.layout(seg)
        plan = plan_range_read(layout.chunk_index, start=position, size=length)
        return plan.cut(self._chunks(seg, layout, plan.chunks))

    def _chunks(self, seg: RemoteSegment, layout: SegmentLayout, chunks: tuple[Chunk, ...]) -> list[bytes]:
        """The original bytes of ``chunks``: from the cache, else one range GET per run of chunks it lacks."""
        found: dict[int, bytes] = {}
        missing: list[Chunk] = []
        for chunk in chunks:
            piece = self.cache.get((seg.segment_id, chunk.id))
            if piece is None:
                missing.append(chunk)
            else:
                found[chunk.id] = piece
        for run in _runs(missing):
            first, last = run[0].transformed_position, run[-1].transformed_end - 1
            stored = self.rsm.fetch(layout.keys[Suffix.LOG], start=first, end=last)
            for chunk, part in zip(run, split_stored(stored, tuple(run)), strict=True):
                original = layout.transforms.backward(part, chunk)
                self.cache.put((seg.segment_id, chunk.id), original)
                found[chunk.id] = original
        return [found[chunk.id] for chunk in chunks]

    def index(self, seg: RemoteSegment, index_type: IndexType) -> bytes | None:
        """The contents of one of the segment's indexes; None when the segment has none of that type (a segment of
        the landed format has only the offset index)."""
        layout = self.layout(seg)
        key = (seg.segment_id, index_type.value)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        if layout.indexes is None:
            if index_type != IndexType.OFFSET:
                return None
            contents = self.rsm.fetch(layout.keys[Suffix.INDEXES])
        else:
            where = layout.indexes.range_of(index_type)
            if where is None:
                return None
            if where.size == 0:
                return b""
            stored = self.rsm.fetch(layout.keys[Suffix.INDEXES], start=where.position, end=where.end - 1)
            if len(stored) != where.size:
                raise SegmentFormatError(f"the {index_type.value} index: {len(stored)} bytes, expected {where.size}")
            contents = decode_index(stored, index_type, encryption_key=layout.transforms.encryption)
        self.cache.put(key, contents)
        return contents


def _runs(chunks: list[Chunk]) -> list[list[Chunk]]:
    """``chunks`` (ascending) in runs of consecutive ones, each fetched by one range GET."""
    runs: list[list[Chunk]] = []
    for chunk in chunks:
        if runs and runs[-1][-1].id + 1 == chunk.id:
            runs[-1].append(chunk)
        else:
            runs.append([chunk])
    return runs
