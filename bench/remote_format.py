"""Aiven's object format: copy throughput with compression and encryption off and on, and a range read, each beside
bare S3 calls of the same bytes in the same run.

moto's S3 server runs as a process of its own (:mod:`bench.s3server`); segments are real Kafka record batches
written by a real :class:`~orchestrator.broker.local_log.PartitionLog` (200-byte values drawn from a small
vocabulary, so they compress about as log lines do), with every index the local log keeps.

* Copy: ``COPY_SEGMENTS`` segments of ``COPY_SEGMENT_MIB`` MiB copied one after the other by
  :meth:`S3RemoteStorage.copy_segment` (as one partition's copies run), with a 4 MiB chunk (the default) and the
  transforms off, compression alone, encryption alone, and both. Reference: bare PutObject of the same segments'
  files, their ``.indexes`` and manifest bytes, one after the other. Goal: >= 0.5x bare with both off.
* Range read: one ``READ_SEGMENT_MIB`` MiB segment tiered with the transforms off, and with compression and
  encryption on; a fetch of about 1 MiB (``max_bytes``) from its middle, as the broker serves it (the offset index,
  then the record batches by ranges through the chunk cache, cold: a reader that has read nothing yet, so the
  manifest is read too). Printed: bytes GetObject returned per byte served, against the goal of at most two chunks
  per read; the bytes against the whole segment (what the landed code's timestamp lookups read); and the read's
  latency against one bare ranged GetObject of the same span of the plain ``.log``.
"""

from __future__ import annotations

import functools
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from Cryptodome.PublicKey import RSA

from bench.report import Figure, print_figures
from bench.s3server import moto_server_process
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_reads import index_entries, position_before, read_batches
from orchestrator.ids import Uuid
from orchestrator.protocol.record_batch import build_batch, encode_batch
from remote_storage.chunk_cache import ChunkCache
from remote_storage.keys import Suffix
from remote_storage.object_format import DEFAULT_CHUNK_SIZE, ObjectFormat
from remote_storage.remote_segments import RemoteSegmentReader
from remote_storage.rlmm import RemoteSegment
from remote_storage.s3 import S3RemoteStorage, make_s3_client
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.key_ring import KeyRing, RsaKeyPair
from remote_storage.segment_format.segment_indexes import IndexType, SegmentIndexFiles, build_indexes_object

MIB = 1024 * 1024
COPY_SEGMENTS, COPY_SEGMENT_MIB = 4, 16
READ_SEGMENT_MIB, READ_BYTES = 64, MIB
RECORDS_PER_BATCH = 80
WORDS = [b"order", b"payment", b"shipped", b"user", b"id", b"amount", b"eur", b"usd", b"status", b"ok", b"retry"]


def _batches(total_bytes: int, rng: random.Random) -> list[bytes]:
    out, size, offset = [], 0, 0
    while size < total_bytes:
        records = []
        for i in range(RECORDS_PER_BATCH):
            value = b" ".join(rng.choice(WORDS) for _ in range(30))[:200] + b"%d" % rng.getrandbits(40)
            records.append((None, value, 1_700_000_000_000 + offset + i, ()))
        raw = encode_batch(build_batch(0, records))
        out.append(raw)
        size += len(raw)
        offset += RECORDS_PER_BATCH
    return out


def _write_segments(directory: Path, batches: list[bytes], segment_bytes: int) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes, segment_ms=2**62, index_interval_bytes=4096)
    plog = PartitionLog(directory, topic_id=Uuid.random(), config=config, clock=lambda: 1_700_000_000_000)
    for raw in batches:
        plog.append_batches([raw], leader_epoch=0)
    plog.roll()
    return plog


def _index_files(plog: PartitionLog, seg: Any) -> SegmentIndexFiles:
    return SegmentIndexFiles(
        offset=seg.index_path.read_bytes(),
        timestamp=seg.time_index_path.read_bytes(),
        producer_snapshot=seg.producer_snapshot_path.read_bytes(),
        leader_epoch=plog.leader_epoch_checkpoint(seg.end_offset),
    )


def _remote(seg: Any, tid: Uuid) -> RemoteSegment:
    return RemoteSegment("bench", tid, 0, Uuid.random(), seg.base_offset, seg.end_offset, 0, seg.size_bytes, 1)


def _metadata(remote: RemoteSegment) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote.topic_id, "bench", 0, remote.segment_id, remote.start_offset, remote.end_offset, 0, 1, 0, ((0, 0),)
    )


def _key_ring() -> KeyRing:
    """A key pair for this run only: generated here, never written anywhere."""
    key = RSA.generate(2048)
    pair = RsaKeyPair.from_pem(key.public_key().export_key(), key.export_key(pkcs=8))
    return KeyRing("bench", {"bench": pair})


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _bare_get(client: Any, span: str) -> bytes:
    body: bytes = client.get_object(Bucket="bench", Key="bare/read.log", Range=span)["Body"].read()
    return body


def _empty(client: Any, prefix: str) -> None:
    """Delete what a variant wrote (moto holds objects in memory)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket="bench", Delete={"Objects": keys, "Quiet": True})


class _GetBytes:
    def __init__(self, client: Any) -> None:
        self.total = 0
        client.meta.events.register("after-call.s3.GetObject", self._seen)

    def _seen(self, parsed: dict[str, Any], **_: Any) -> None:
        self.total += int(parsed.get("ContentLength", 0))


def run() -> list[Figure]:
    rng = random.Random(7)
    figures: list[Figure] = []
    ring = _key_ring()
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-format-") as tmp, moto_server_process() as endpoint:
        client = make_s3_client(endpoint_url=endpoint, access_key_id="bench", secret_access_key="bench")
        client.create_bucket(Bucket="bench")
        copy_batches = _batches(COPY_SEGMENTS * COPY_SEGMENT_MIB * MIB, rng)
        copy_log = _write_segments(Path(tmp) / "copy-0", copy_batches, COPY_SEGMENT_MIB * MIB)
        segments = copy_log.closed_segments()[:COPY_SEGMENTS]
        total = sum(s.size_bytes for s in segments)
        tid = copy_log.topic_id

        def bare_copy() -> None:
            for i, seg in enumerate(segments):
                indexes = build_indexes_object(_index_files(copy_log, seg)).body
                client.put_object(Bucket="bench", Key=f"bare/{i}.log", Body=seg.log_path.read_bytes())
                client.put_object(Bucket="bench", Key=f"bare/{i}.indexes", Body=indexes)
                client.put_object(Bucket="bench", Key=f"bare/{i}.rsm-manifest", Body=b"m" * 700)  # a manifest's size

        bare_s, _ = _timed(bare_copy)
        _empty(client, "bare/")
        variants = {
            "off": ObjectFormat(),
            "compression": ObjectFormat(compression=True),
            "encryption": ObjectFormat(encrypt=True, key_ring=ring),
            "both": ObjectFormat(compression=True, encrypt=True, key_ring=ring),
        }
        stored: dict[str, int] = {}
        for name, fmt in variants.items():
            rsm = S3RemoteStorage(client=client, bucket="bench", prefix=f"{name}/", object_format=fmt)

            def ours(rsm: S3RemoteStorage = rsm) -> int:
                uploaded = 0
                for seg in segments:
                    remote = _remote(seg, tid)
                    up = rsm.copy_segment(
                        remote.key,
                        log_file=seg.log_path,
                        index_files=_index_files(copy_log, seg),
                        metadata=_metadata(remote),
                        tiered_epoch=1,
                    )
                    uploaded += up.sizes[Suffix.LOG]
                return uploaded

            ours_s, stored[name] = _timed(ours)
            _empty(client, f"{name}/")
            reference = f"bare PutObject of the same {COPY_SEGMENTS} segments"
            what = f"copy, {COPY_SEGMENTS} x {COPY_SEGMENT_MIB} MiB segments, 4 MiB chunks, {name}"
            figures.append(Figure(what, total / ours_s / MIB, "MiB/s", reference, total / bare_s / MIB))
        copy_log.close()

        read_log = _write_segments(Path(tmp) / "read-0", _batches(READ_SEGMENT_MIB * MIB, rng), 2**30)
        [seg] = read_log.closed_segments()
        files = _index_files(read_log, seg)
        client.put_object(Bucket="bench", Key="bare/read.log", Body=seg.log_path.read_bytes())
        offset = (seg.base_offset + seg.end_offset) // 2
        start = position_before(index_entries(files.offset, seg.base_offset), offset)
        gets = _GetBytes(client)
        for name in ("off", "both"):
            rsm = S3RemoteStorage(client=client, bucket="bench", prefix=f"read-{name}/", object_format=variants[name])
            remote = _remote(seg, read_log.topic_id)
            metadata = _metadata(remote)
            rsm.copy_segment(remote.key, log_file=seg.log_path, index_files=files, metadata=metadata, tiered_epoch=1)

            def fetch(rsm: S3RemoteStorage = rsm, remote: RemoteSegment = remote) -> bytes:
                reader = RemoteSegmentReader(rsm, ChunkCache())  # cold: nothing read yet
                index = reader.index(remote, IndexType.OFFSET) or b""
                position = position_before(index_entries(index, remote.start_offset), offset)
                ranged = lambda at, n: reader.read(remote, at, n)  # noqa: E731
                return read_batches(ranged, position, remote.size_bytes, offset, READ_BYTES)

            gets.total = 0
            read_s, served = _timed(fetch)
            fetched = gets.total
            span = f"bytes={start}-{start + len(served) - 1}"
            bare_read_s, _ = _timed(functools.partial(_bare_get, client, span))
            what = f"read of {len(served) / MIB:.2f} MiB from a {seg.size_bytes / MIB:.0f} MiB segment, {name}"
            goal = 2 * DEFAULT_CHUNK_SIZE / len(served)
            per_byte = fetched / len(served)
            figures.append(
                Figure(f"{what}: bytes GET per byte served", per_byte, "B/B", "2 chunks a read", goal, False)
            )
            whole = seg.size_bytes / MIB
            figures.append(Figure(f"{what}: bytes GET", fetched / MIB, "MiB", "the whole segment", whole, False))
            cold = f"{what}: latency (cold: manifest, index, chunks)"
            figures.append(Figure(cold, read_s * 1000, "ms", "bare ranged GetObject", bare_read_s * 1000, False))
        read_log.close()
    ratios = ", ".join(f"{name} {stored[name] / total:.2f}" for name in stored)
    print_figures(f"Aiven's object format (moto S3 process); stored/original .log bytes: {ratios}", figures)
    return figures


if __name__ == "__main__":
    run()
