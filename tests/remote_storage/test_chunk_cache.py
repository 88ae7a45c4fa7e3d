"""The chunk cache: least recently used pieces go first, the byte bound holds under concurrent use, and every
lookup is counted (in the cache's stats and the broker's metrics)."""

import threading

import pytest
from prometheus_client import CollectorRegistry

from orchestrator.ids import Uuid
from orchestrator.metrics import RemoteStorageMetrics
from remote_storage.chunk_cache import ChunkCache

pytestmark = pytest.mark.unit

SEG = Uuid.random()


def test_the_least_recently_used_pieces_go_first_when_the_bytes_would_exceed_the_bound():
    cache = ChunkCache(max_bytes=30)
    for chunk in range(3):
        cache.put((SEG, chunk), bytes([chunk]) * 10)
    assert cache.get((SEG, 0)) == b"\x00" * 10  # now the most recently used
    cache.put((SEG, 3), b"\x03" * 10)
    assert cache.get((SEG, 1)) is None and cache.get((SEG, 0)) is not None and cache.get((SEG, 3)) is not None
    stats = cache.stats()
    assert (stats.bytes, stats.pieces, stats.hits, stats.misses) == (30, 3, 3, 1)


def test_a_piece_larger_than_the_bound_is_not_kept_and_a_zero_bound_keeps_nothing():
    cache = ChunkCache(max_bytes=8)
    cache.put((SEG, "offset"), b"x" * 9)
    assert cache.get((SEG, "offset")) is None and cache.stats().bytes == 0
    nothing = ChunkCache(max_bytes=0)
    nothing.put((SEG, 0), b"x")
    assert nothing.get((SEG, 0)) is None


def test_putting_a_piece_again_replaces_it_without_counting_its_bytes_twice():
    cache = ChunkCache(max_bytes=100)
    cache.put((SEG, 0), b"a" * 40)
    cache.put((SEG, 0), b"b" * 50)
    assert cache.stats().bytes == 50 and cache.get((SEG, 0)) == b"b" * 50


def test_the_bound_holds_and_nothing_is_torn_when_threads_put_and_get_at_once():
    cache = ChunkCache(max_bytes=1000)
    segments = [Uuid.random() for _ in range(4)]

    def work(segment: Uuid) -> None:
        for i in range(400):
            cache.put((segment, i % 50), bytes([i % 50]) * (10 + i % 13))
            piece = cache.get((segment, (i * 7) % 50))
            assert piece is None or set(piece) == {(i * 7) % 50}

    threads = [threading.Thread(target=work, args=(s,)) for s in segments]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = cache.stats()
    assert stats.bytes <= 1000 and stats.hits + stats.misses == 4 * 400


def test_lookups_and_bytes_are_in_the_brokers_metrics():
    registry = CollectorRegistry()
    cache = ChunkCache(max_bytes=100, metrics=RemoteStorageMetrics(registry))
    cache.put((SEG, 0), b"x" * 40)
    cache.get((SEG, 0))
    cache.get((SEG, 1))
    value = registry.get_sample_value
    assert value("tieredctl_remote_chunk_cache_hits_total") == 1
    assert value("tieredctl_remote_chunk_cache_misses_total") == 1
    assert value("tieredctl_remote_chunk_cache_bytes") == 40
