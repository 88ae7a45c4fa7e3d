"""Segments the landed code tiered (before the objects became Aiven's) stay readable and deletable: a flat JSON
manifest of our own, a raw ``.log`` and an ``.indexes`` that is the offset index alone. The objects are a fixture
written by the landed code's broker (tests/remote_storage/golden/landed/, with how it was made)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.object_format import ObjectFormat
from remote_storage.rlmm import RemoteSegment, copy_started_record, update_record
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter
from tests.support.key_pairs import key_ring, write_key_pair

pytestmark = pytest.mark.integration

LANDED = Path(__file__).resolve().parents[2] / "remote_storage" / "golden" / "landed"


@pytest.fixture
def landed(tmp_path: Path, s3_client: Any, bucket: str):
    """The fixture's objects in the bucket, its topic and segment in the metadata, and a broker of today's code
    (compression and encryption on: they apply to what it writes, not to what it reads) whose local log starts
    after the tiered segment."""
    doc = json.loads((LANDED / "segment.json").read_text())
    seg_doc = doc["segment"]
    tid = Uuid.from_string(seg_doc["topic_id"])
    for key in doc["keys"]:
        tags = "&".join(f"{t['Key']}={t['Value']}" for t in doc["tags"][key])
        body = (LANDED / key.rsplit("/", 1)[1]).read_bytes()
        s3_client.put_object(Bucket=bucket, Key=key, Body=body, Tagging=tags)
    writer = ControllerWriter(SqliteMetadataStore(tmp_path / "metadata.db"))
    assignment = {"replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}
    enabled = {"tiered_epoch": 1, "tiered_state": int(TieredState.ENABLED), "policy": 0}
    writer.store.append(
        [
            make_record("TopicRecord", name="orders", topic_id=tid),
            make_record("PartitionRecord", partition_id=0, topic_id=tid, **assignment),
            make_record("TieredStateRecord", topic_id=tid, **enabled),
        ],
        controller_epoch=writer.epoch,
    )
    fields = {k: seg_doc[k] for k in ("start_offset", "end_offset", "max_timestamp_ms", "size_bytes", "tiered_epoch")}
    seg = RemoteSegment("orders", tid, 0, Uuid.from_string(seg_doc["segment_id"]), **fields, broker_id=1)
    writer.store.append_remote_log_metadata(
        [
            copy_started_record(seg, now_ms=1),
            update_record(seg, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=2),
        ]
    )
    directory = tmp_path / "broker-1" / "orders-0"  # the local log holds nothing of it any more
    directory.mkdir(parents=True)
    (directory / "offsets.checkpoint").write_text(json.dumps({"log_start_offset": 0, "local_log_start_offset": 30}))
    keys = write_key_pair(tmp_path / "keys", "k1")
    today = ObjectFormat(chunk_size=1024, compression=True, encrypt=True, key_ring=key_ring(keys))
    broker = BrokerUnderTest(
        broker_id=1,
        data_dir=tmp_path / "broker-1",
        store_path=tmp_path / "metadata.db",
        s3_client=s3_client,
        bucket=bucket,
        object_format=today,
    )
    plog = broker.log(tid)
    assert (plog.log_start_offset, plog.local_log_start_offset) == (0, 30)
    yield writer, broker, tid, doc
    broker.close()
    writer.store.close()


def test_every_record_of_a_landed_segment_is_read_back_by_ranges(landed):
    _writer, broker, tid, _doc = landed
    assert broker.read_all(tid) == list(range(30))
    layout = broker.rlm.reader.layout(broker.rlmm.live_segments(tid, 0)[0])
    assert layout.landed_format and layout.chunk_index.original_chunk_size == 1024  # read in 1 KiB ranges
    records = broker.rlm.fetch(tid, 0, 17, max_bytes=1)
    assert records[0].value == b"17:" + b"x" * 40


def test_timestamp_lookups_on_a_landed_segment_scan_it_without_a_time_index(landed):
    _writer, broker, tid, _doc = landed
    assert broker.rlm.offset_for_timestamp(tid, 0, 1155) == (16, 1160)
    assert broker.rlm.offset_for_timestamp(tid, 0, 0) == (0, 1000)
    assert broker.rlm.max_timestamp(tid, 0) == (29, 1290)


def test_a_landed_segment_is_deleted_by_the_delete_policy(landed, s3_client, bucket):
    writer, broker, tid, doc = landed
    writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    resp = broker.disable(tid, controller_epoch=writer.epoch)
    assert resp["error_code"] == 0 and resp["segments_deleted"] == 1
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    broker.rlmm.refresh()
    assert [s.state for s in broker.rlmm.segments(tid)] == [SegmentState.DELETE_SEGMENT_FINISHED]
    assert len(doc["keys"]) == 3
