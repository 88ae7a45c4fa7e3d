"""The cache of remote segment pieces a broker read: detransformed ``.log`` chunks and decoded indexes.

Owner: ours (Aiven's plugin has a chunk cache of its own, ``fetch.chunk.cache.*``, with another design). A fetch
from a remote segment reads whole chunks (a chunk is the unit of compression and encryption), and consumers read
on from where they stopped, so the chunk a fetch cut short is usually the next fetch's first: keeping it saves a
GET, a decryption and a decompression.

* Bounded by bytes (``max_bytes``): least recently used pieces go first; a piece larger than the whole bound is
  not kept. ``max_bytes`` 0 keeps nothing (every read goes to S3).
* Thread-safe: fetches run on worker threads; one lock guards the map and the counters, never held during I/O (so
  two threads missing the same piece both fetch it: one GET too many, never a wrong answer).
* Counted: hits, misses and the bytes held, in :meth:`ChunkCache.stats` and, when given, the broker's metrics.

Keys are ``(segment id, piece)``: a chunk's number, or an index's name. A segment id is never reused (a random
KIP-516 id per copy), so a cached piece can never be stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from orchestrator.ids import Uuid
from orchestrator.metrics import RemoteStorageMetrics

PieceKey = tuple[Uuid, int | str]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # sixteen 4 MiB chunks


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    bytes: int
    pieces: int


class ChunkCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, *, metrics: RemoteStorageMetrics | None = None) -> None:
        if max_bytes < 0:
            raise ValueError(f"a cache bound is >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._metrics = metrics
        self._lock = threading.Lock()
        self._pieces: OrderedDict[PieceKey, bytes] = OrderedDict()
        self._bytes = self._hits = self._misses = 0

    def get(self, key: PieceKey) -> bytes | None:
        with self._lock:
            piece = self._pieces.get(key)
            if piece is None:
                self._misses += 1
            else:
                self._hits += 1
                self._pieces.move_to_end(key)
        if self._metrics is not None:
            self._metrics.chunk_cache_lookup(hit=piece is not None)
        return piece

    def put(self, key: PieceKey, piece: bytes) -> None:
        if len(piece) > self.max_bytes:
            return
        with self._lock:
            old = self._pieces.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._pieces[key] = piece
            self._bytes += len(piece)
            while self._bytes > self.max_bytes:
                _, evicted = self._pieces.popitem(last=False)
                self._bytes -= len(evicted)
            held = self._bytes
        if self._metrics is not None:
            self._metrics.chunk_cache_bytes.set(held)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._bytes, len(self._pieces))
