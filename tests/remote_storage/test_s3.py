import json

import pytest

from orchestrator.errors import InvalidArgument
from orchestrator.ids import Uuid
from remote_storage.keys import SegmentKey, Suffix, build_key, topic_prefix
from remote_storage.s3 import DELETE_BATCH, MIN_PART_SIZE, S3RemoteStorage
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.manifest import manifest_from_json
from remote_storage.segment_format.segment_indexes import SegmentIndexFiles
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.integration


def _segment(topic="orders", topic_id=None, partition=0, start=0) -> SegmentKey:
    return SegmentKey(topic, topic_id or Uuid.random(), partition, start, Uuid.random())


def _copy(rsm, seg, log_file, *, tiered_epoch=1, offset_index=b""):
    """copy_segment with the other four indexes empty and the segment's metadata made up from its key."""
    metadata = RemoteLogSegmentMetadata(
        seg.topic_id,
        seg.topic,
        seg.partition,
        seg.segment_id,
        seg.start_offset,
        seg.start_offset + 9,
        0,
        1,
        0,
        ((0, 0),),
    )
    indexes = SegmentIndexFiles(offset=offset_index, timestamp=b"", producer_snapshot=b"", leader_epoch=b"")
    return rsm.copy_segment(seg, log_file=log_file, index_files=indexes, metadata=metadata, tiered_epoch=tiered_epoch)


@pytest.fixture
def rsm(s3_client, bucket):
    sleeps: list[float] = []
    storage = S3RemoteStorage(client=s3_client, bucket=bucket, prefix="tiered/", sleep=sleeps.append)
    storage.sleeps = sleeps  # type: ignore[attr-defined]
    return storage


def test_a_segment_is_uploaded_as_three_tagged_objects_and_fetched_by_range(rsm, tmp_path):
    log_file = tmp_path / "00000000000000000000.log"
    log_file.write_bytes(bytes(range(256)) * 40)
    seg = _segment()
    up = _copy(rsm, seg, log_file, tiered_epoch=3, offset_index=b"idx")
    assert up.sizes[Suffix.LOG] == 10240 and up.total_bytes > 10240
    for suffix in Suffix:
        key = build_key("tiered/", seg, suffix)
        assert rsm.tags(key) == {"tieredEpoch": "3"}
        assert rsm.head(key) is not None
    assert rsm.fetch(up.keys[Suffix.LOG], start=256, end=259) == bytes([0, 1, 2, 3])
    # The manifest is Aiven's SegmentManifestV1: the tiered epoch is only the tag, never a member of the JSON.
    text = rsm.fetch(up.keys[Suffix.MANIFEST])
    assert manifest_from_json(text) == up.manifest and "tieredEpoch" not in json.loads(text)


def test_large_logs_use_multipart_uploads_and_stay_byte_identical(s3_client, bucket, tmp_path):
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    faults = FaultInjector(s3_client)
    data = (b"0123456789abcdef" * (MIN_PART_SIZE // 16)) * 2 + b"tail"
    log_file = tmp_path / "big.log"
    log_file.write_bytes(data)
    seg = _segment()
    _copy(rsm, seg, log_file)
    assert faults.calls["CreateMultipartUpload"] == 1 and faults.calls["UploadPart"] == 3
    assert rsm.fetch(build_key("", seg, Suffix.LOG)) == data
    assert rsm.tags(build_key("", seg, Suffix.LOG)) == {"tieredEpoch": "1"}


def test_throttling_server_errors_and_resets_are_retried_once_each_without_duplicates(rsm, s3_client, tmp_path):
    faults = FaultInjector(s3_client)
    faults.fail("PutObject", "slowdown", "internal", "reset")
    log_file = tmp_path / "a.log"
    log_file.write_bytes(b"x" * 1000)
    seg = _segment()
    _copy(rsm, seg, log_file, offset_index=b"i")
    # 3 objects + 3 faults: each fault costs exactly one extra attempt (one retry layer, nothing multiplied).
    assert faults.calls["PutObject"] == 6
    assert len(rsm.sleeps) == 3
    keys = [o.key for o in rsm.list_objects("tiered/")]
    assert sorted(keys) == sorted(build_key("tiered/", seg, s) for s in Suffix)


def test_a_permanent_error_surfaces_at_once(rsm, s3_client, tmp_path):
    broken = S3RemoteStorage(client=s3_client, bucket="no-such-bucket-here", sleep=rsm.sleeps.append)
    log_file = tmp_path / "a.log"
    log_file.write_bytes(b"x")
    with pytest.raises(Exception, match="NoSuchBucket"):
        _copy(broken, _segment(), log_file)
    assert rsm.sleeps == []


def test_deletes_go_in_batches_of_at_most_1000_keys_and_are_idempotent(rsm, s3_client):
    tid = Uuid.random()
    prefix = topic_prefix("tiered/", "orders", tid)
    keys = [f"{prefix}0/{i:020d}-x.log" for i in range(2345)]
    for k in keys[::8]:  # most keys never existed: deleting a missing key is not an error
        s3_client.put_object(Bucket=rsm.bucket, Key=k, Body=b"")
    faults = FaultInjector(s3_client)
    out = rsm.delete_keys(keys, within_prefix=prefix)
    assert out.ok and len(out.deleted) == 2345
    assert faults.calls["DeleteObjects"] == 3 and DELETE_BATCH == 1000
    assert list(rsm.list_objects(prefix)) == []
    assert rsm.delete_keys(keys, within_prefix=prefix).ok


def test_retriable_failures_of_a_delete_are_retried(rsm, s3_client):
    prefix = topic_prefix("", "t", Uuid.random())
    keys = [f"{prefix}0/{i}.log" for i in range(10)]
    for k in keys:
        s3_client.put_object(Bucket=rsm.bucket, Key=k, Body=b"")
    faults = FaultInjector(s3_client)
    faults.fail("DeleteObjects", "reset", "slowdown")
    assert rsm.delete_keys(keys, within_prefix=prefix).ok
    assert faults.calls["DeleteObjects"] == 3
    assert list(rsm.list_objects(prefix)) == []


def test_per_key_errors_are_retried_or_reported_never_dropped(rsm, s3_client):
    prefix = topic_prefix("", "t", Uuid.random())
    keys = [f"{prefix}0/{i}.log" for i in range(5)]
    for k in keys:
        s3_client.put_object(Bucket=rsm.bucket, Key=k, Body=b"")
    answers = iter(
        [
            {keys[0]: "InternalError", keys[1]: "AccessDenied"},  # first call: one retriable, one permanent
            {},  # second call, for keys[0] only: success
        ]
    )

    def per_key_errors(parsed, **kwargs):
        errs = next(answers)
        parsed["Errors"] = [{"Key": k, "Code": c, "Message": c} for k, c in errs.items()]

    s3_client.meta.events.register("after-call.s3.DeleteObjects", per_key_errors)
    out = rsm.delete_keys(keys, within_prefix=prefix)
    assert out.failed == {keys[1]: "AccessDenied"}
    assert set(out.deleted) == set(keys) - {keys[1]}


def test_deleting_outside_the_topic_prefix_is_refused_before_any_request(rsm, s3_client):
    tid = Uuid.random()
    mine = topic_prefix("tiered/", "orders", tid)
    other = topic_prefix("tiered/", "orders", Uuid.random())  # same name, re-created topic
    s3_client.put_object(Bucket=rsm.bucket, Key=f"{other}0/a.log", Body=b"keep")
    faults = FaultInjector(s3_client)
    with pytest.raises(InvalidArgument, match="outside"):
        rsm.delete_keys([f"{mine}0/a.log", f"{other}0/a.log"], within_prefix=mine)
    with pytest.raises(InvalidArgument, match="prefix"):
        rsm.delete_keys([f"{other}0/a.log"], within_prefix="")
    assert faults.calls["DeleteObjects"] == 0
    assert rsm.fetch(f"{other}0/a.log") == b"keep"


def test_manifest_is_written_last(rsm, s3_client, tmp_path):
    order: list[str] = []
    s3_client.meta.events.register(
        "before-send.s3.PutObject", lambda request, **kw: order.append(request.url.rsplit(".", 1)[-1]) and None
    )
    log_file = tmp_path / "a.log"
    log_file.write_bytes(b"x")
    _copy(rsm, _segment(), log_file)
    assert order[-1] == "rsm-manifest" and len(order) == 3
    json.dumps(order)
