"""Segments our broker tiers are Aiven's object set, read back by ranges: real SQLite store, real segment files,
moto's S3 server. The objects are checked with the independent reader of tests/remote_storage/segment_format
(written from Aiven's format alone), and the bytes each read GETs are counted with botocore's event hooks."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from orchestrator.broker.local_log import LogConfig
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.deletion import delete_segments
from remote_storage.keys import Suffix, parse_key, topic_prefix
from remote_storage.object_format import ObjectFormat
from remote_storage.segment_format.custom_metadata import (
    CustomMetadataField,
    SegmentCustomMetadata,
    decode_custom_metadata,
    encode_custom_metadata,
)
from remote_storage.segment_format.object_keys import main_path
from tests.remote_storage.segment_format.aiven_reference import read_objects
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter
from tests.support.key_pairs import KeyPairFiles, key_ring, write_key_pair

pytestmark = pytest.mark.integration

ALL_FIELDS = frozenset(CustomMetadataField)


@pytest.fixture(scope="module")
def key_pair(tmp_path_factory: pytest.TempPathFactory) -> KeyPairFiles:
    return write_key_pair(tmp_path_factory.mktemp("keys"), "k1")


class World:
    def __init__(self, tmp_path: Any, s3: Any, bucket: str) -> None:
        self.tmp_path, self.s3, self.bucket = tmp_path, s3, bucket
        self.writer = ControllerWriter(SqliteMetadataStore(tmp_path / "metadata.db"))
        self.brokers: list[BrokerUnderTest] = []

    def broker(self, object_format: ObjectFormat, *, prefix: str = "tiered/", **log: int) -> BrokerUnderTest:
        config = LogConfig(**{"segment_bytes": 20_000, "segment_ms": 2**62, "index_interval_bytes": 512, **log})
        broker = BrokerUnderTest(
            broker_id=1,
            data_dir=self.tmp_path / "broker-1",
            store_path=self.tmp_path / "metadata.db",
            s3_client=self.s3,
            bucket=self.bucket,
            prefix=prefix,
            log_config=config,
            object_format=object_format,
        )
        self.brokers.append(broker)
        return broker

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
        return {k: self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()
        self.writer.store.close()


@pytest.fixture
def world(tmp_path: Any, s3_client: Any, bucket: str) -> Iterator[World]:
    w = World(tmp_path, s3_client, bucket)
    yield w
    w.close()


class GetBytes:
    """Bytes the client's GetObject calls returned, by object suffix, from botocore's after-call event."""

    def __init__(self, s3: Any) -> None:
        self.by_suffix: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        s3.meta.events.register("after-call.s3.GetObject", self._seen, unique_id=f"get-bytes-{id(self)}")

    def _seen(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        key = http_response.url.rsplit("?", 1)[0]
        suffix = key.rsplit(".", 1)[-1]
        self.by_suffix[suffix] += int(parsed.get("ContentLength", 0))
        self.calls[suffix] += 1

    def reset(self) -> None:
        self.by_suffix.clear()
        self.calls.clear()


def _formats(pair: KeyPairFiles) -> dict[str, ObjectFormat]:
    ring = key_ring(pair)
    return {
        "plain": ObjectFormat(chunk_size=1024),
        "compressed": ObjectFormat(chunk_size=1024, compression=True),
        "encrypted": ObjectFormat(chunk_size=1024, encrypt=True, key_ring=ring),
        "both": ObjectFormat(
            chunk_size=1024, compression=True, encrypt=True, key_ring=ring, custom_metadata_fields=ALL_FIELDS
        ),
    }


@pytest.mark.parametrize("kind", ["plain", "compressed", "encrypted", "both"])
def test_the_independent_reader_reads_back_the_segment_and_each_index_as_the_local_log_held_them(world, key_pair, kind):
    broker = world.broker(_formats(key_pair)[kind])
    tid = world.writer.create_topic("orders")
    broker.produce(tid, 150, size=150)
    assert broker.tier(tid) >= 2
    plog = broker.log(tid)
    by_segment: dict[str, dict[str, bytes]] = {}
    for key, body in world.objects().items():
        parsed = parse_key(key, "tiered/")
        by_segment.setdefault(str(parsed.segment.segment_id), {})[parsed.suffix.value] = body
    broker.rlmm.refresh()
    remote = {str(s.segment_id): s for s in broker.rlmm.live_segments(tid, 0)}
    local = {s.base_offset: s for s in plog.closed_segments()}
    started_at = {  # the manifest carries the metadata of the copy as it started (Kafka's copyLogSegmentData)
        str(e.record.fields["remote_log_segment_id"]["id"]): e.record.fields["event_timestamp_ms"]
        for e in broker.store.read_remote_log_metadata()
        if e.record.name == "RemoteLogSegmentMetadataRecord"
    }
    assert set(by_segment) == set(remote)
    for segment_id, objects in by_segment.items():
        seg = remote[segment_id]
        back = read_objects(objects, {key_pair.key_pair_id: key_pair.private_key})
        held = local[seg.start_offset]
        assert back.segment == held.log_path.read_bytes()
        assert back.indexes == {
            "offset": held.index_path.read_bytes(),
            "timestamp": held.time_index_path.read_bytes(),
            "producerSnapshot": held.producer_snapshot_path.read_bytes(),
            "leaderEpoch": plog.leader_epoch_checkpoint(held.end_offset),
            "transaction": None,  # no transaction index: Aiven's "transaction": null
        }
        assert back.indexes["timestamp"] and back.indexes["leaderEpoch"] == b"0\n1\n0 0\n"
        manifest = back.manifest
        assert "tieredEpoch" not in manifest and manifest["compression"] == (kind in ("compressed", "both"))
        assert ("encryption" in manifest) == (kind in ("encrypted", "both"))
        assert manifest["remoteLogSegmentMetadata"] == {
            "remoteLogSegmentId": {
                "topicIdPartition": {"topicId": str(tid), "topicPartition": {"topic": "orders", "partition": 0}},
                "id": segment_id,
            },
            "startOffset": seg.start_offset,
            "endOffset": seg.end_offset,
            "maxTimestampMs": seg.max_timestamp_ms,
            "brokerId": 1,
            "eventTimestampMs": started_at[segment_id],
            "segmentLeaderEpochs": {"0": seg.start_offset},
        }
        if kind != "plain":
            assert objects["log"] != held.log_path.read_bytes()
    broker.trim_local(tid)
    assert broker.read_all(tid) == list(range(150))  # and our broker reads them back, from S3 only


def test_the_copy_records_aivens_custom_metadata_and_the_rlmm_keeps_it(world, key_pair):
    broker = world.broker(_formats(key_pair)["both"])
    tid = world.writer.create_topic("orders")
    broker.produce(tid, 60, size=150)
    assert broker.tier(tid) >= 1
    broker.rlmm.refresh()
    finished = [
        e.record.fields
        for e in broker.store.read_remote_log_metadata()
        if e.record.name == "RemoteLogSegmentMetadataUpdateRecord"
        and e.record.fields["remote_log_segment_state"] == SegmentState.COPY_SEGMENT_FINISHED
    ]
    segments = broker.rlmm.live_segments(tid, 0)
    assert [f["custom_metadata"] for f in finished] == [s.custom_metadata for s in segments]
    objects = world.objects()
    for seg in segments:
        fields = decode_custom_metadata(seg.custom_metadata)
        sizes = [len(objects[k]) for k in seg.object_keys("tiered/").values()]
        assert (fields.remote_size, fields.object_prefix, fields.object_key) == (
            sum(sizes),
            "tiered/",
            main_path(seg.key),
        )


def test_a_small_read_from_a_remote_segment_gets_about_one_chunk_and_a_repeat_comes_from_the_cache(world, key_pair):
    chunk = 16 * 1024
    fmt = ObjectFormat(chunk_size=chunk, compression=True, encrypt=True, key_ring=key_ring(key_pair))
    broker = world.broker(fmt, segment_bytes=1_000_000, index_interval_bytes=4096)
    tid = world.writer.create_topic("orders")
    broker.produce(tid, 2000, size=150)
    assert broker.tier(tid) == 1
    broker.trim_local(tid)
    [seg] = broker.rlmm.live_segments(tid, 0)
    assert seg.size_bytes > 300_000
    gets = GetBytes(world.s3)
    records = broker.rlm.fetch(tid, 0, 1234, max_bytes=1)
    assert records[0].offset == 1234
    log_bytes = gets.by_suffix["log"]
    # One range GET of the chunks holding the read window (max_bytes plus 16 KiB of slack): at most two chunks.
    assert gets.calls["log"] == 1 and 0 < log_bytes <= 2 * (chunk + 28)
    assert log_bytes * 10 < seg.size_bytes
    assert gets.calls["rsm-manifest"] == 1 and gets.calls["indexes"] == 1  # the manifest, then the offset index
    gets.reset()
    assert broker.rlm.fetch(tid, 0, 1234, max_bytes=1)[0].offset == 1234
    assert sum(gets.calls.values()) == 0  # manifest, index and chunks all cached
    stats = broker.rlm.reader.cache.stats()
    assert stats.hits >= 2 and stats.misses >= 2


def test_a_timestamp_lookup_on_a_remote_segment_reads_its_time_index_and_about_one_index_interval(world, key_pair):
    chunk = 8 * 1024
    fmt = ObjectFormat(chunk_size=chunk, encrypt=True, key_ring=key_ring(key_pair))
    broker = world.broker(fmt, segment_bytes=1_000_000)
    tid = world.writer.create_topic("orders")
    for i in range(2000):
        broker.produce(tid, 1, size=150, ts=1_000_000 + 10 * i)
    assert broker.tier(tid) == 1
    broker.trim_local(tid)
    gets = GetBytes(world.s3)
    assert broker.rlm.offset_for_timestamp(tid, 0, 1_000_000 + 10 * 1500 - 5) == (1500, 1_015_000)
    assert gets.calls["log"] == 1 and gets.by_suffix["log"] <= 3 * (chunk + 28)  # a 16 KiB window: three chunks
    assert broker.rlm.max_timestamp(tid, 0) == (1999, 1_000_000 + 10 * 1999)
    [seg] = broker.rlmm.live_segments(tid, 0)
    assert gets.by_suffix["log"] * 3 < seg.size_bytes


def test_reads_and_deletes_follow_the_prefix_a_segment_recorded_after_the_configured_one_changed(world, key_pair):
    fields = frozenset({CustomMetadataField.OBJECT_PREFIX})
    first = world.broker(ObjectFormat(chunk_size=1024, custom_metadata_fields=fields), prefix="tiered/")
    tid = world.writer.create_topic("orders")
    first.produce(tid, 80, size=150)
    assert first.tier(tid) > 0
    first.trim_local(tid)
    other_topic = topic_prefix("tiered/", "orders", world.writer.create_topic("orders-2"))
    sentinels = [f"{other_topic}0/sentinel", f"moved/orders-{tid}/0/sentinel", "tiered/sentinel"]
    for key in sentinels:
        world.s3.put_object(Bucket=world.bucket, Key=key, Body=b"keep")
    first.close()
    world.brokers.remove(first)
    moved = world.broker(ObjectFormat(chunk_size=1024), prefix="moved/")  # restarted with another configured prefix
    assert moved.read_all(tid) == list(range(80))  # read where the segments were recorded
    world.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    resp = moved.disable(tid, controller_epoch=world.writer.epoch)
    assert resp["error_code"] == 0 and resp["segments_remaining"] == 0
    assert sorted(world.objects()) == sorted(sentinels)


def test_a_segment_whose_recorded_key_leaves_its_topic_prefix_is_refused_and_nothing_is_deleted(world):
    broker = world.broker(ObjectFormat(chunk_size=1024))
    tid = world.writer.create_topic("orders")
    broker.produce(tid, 40, size=150)
    assert broker.tier(tid) > 0
    broker.rlmm.refresh()
    seg = broker.rlmm.live_segments(tid, 0)[0]
    victim = "tiered/payments-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB"
    world.s3.put_object(Bucket=world.bucket, Key=f"{victim}.log", Body=b"not yours")
    forged = replace(seg, custom_metadata=encode_custom_metadata(SegmentCustomMetadata(object_key=victim)))
    result = delete_segments([forged], rsm=broker.rsm, rlmm=broker.rlmm, broker_id=1, now_ms=lambda: 0)
    assert not result.complete and all(v.startswith("OutsideTopicPrefix") for v in result.failed_keys.values())
    assert world.objects(victim) == {f"{victim}.log": b"not yours"}
    assert {s.state for s in broker.rlmm.segments(tid) if s.segment_id == seg.segment_id} == {
        SegmentState.DELETE_SEGMENT_STARTED
    }
    assert json.loads(world.objects()[seg.object_keys("tiered/")[Suffix.MANIFEST]])["version"] == "1"
