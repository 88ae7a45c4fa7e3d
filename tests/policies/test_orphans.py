"""The reference classifier's rules for Aiven's objects: where a segment's objects are (its recorded prefix or key),
and its size judged through the format (custom metadata's remote size, the RLMM, or the manifest's chunk index)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.ids import Uuid
from policies.orphans import BucketObject, Metadata, classify, classify_object, found_objects, manifests_needed
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SegmentKey, Suffix, build_key
from remote_storage.scan import contract as c
from remote_storage.scan import manifest_reading as mr
from remote_storage.scan.manifest_reading import ManifestReading

pytestmark = pytest.mark.unit

PREFIX = "tiered/"
NOW = 1_700_000_000_000
OLD = NOW - 10 * 86_400_000
GRACE = 3_600_000
TID = "lZ6vvmajTWKDBUTV6SQAtQ"
SIDS = [str(Uuid(bytes([i]) * 16)) for i in range(1, 9)]


def _topic(**kw: object) -> TopicMeta:
    fields: dict[str, object] = dict(
        topic_id=TID,
        name="orders",
        state="ENABLED",
        tiered_epoch=1,
        policy="NONE",
        retention_ms=-1,
        retention_bytes=-1,
        deleted=False,
    )
    return TopicMeta(**{**fields, **kw})


def _segment(i: int, **kw: object) -> SegmentMeta:
    fields: dict[str, object] = dict(
        topic_id=TID,
        topic="orders",
        partition=0,
        segment_id=SIDS[i],
        start_offset=i * 10,
        end_offset=i * 10 + 9,
        size_bytes=1000,
        tiered_epoch=1,
        state="COPY_SEGMENT_FINISHED",
        max_timestamp_ms=NOW,
        event_timestamp_ms=NOW,
    )
    return SegmentMeta(**{**fields, **kw})


def _key(seg: SegmentMeta, suffix: Suffix, prefix: str = PREFIX) -> str:
    layout = SegmentKey(
        seg.topic, Uuid.from_string(seg.topic_id), seg.partition, seg.start_offset, Uuid.from_string(seg.segment_id)
    )
    return build_key(prefix, layout, suffix)


def _objects(
    seg: SegmentMeta, *, log: int, indexes: int = 50, manifest: int | None = 300, prefix: str = PREFIX
) -> list[BucketObject]:
    sizes = {Suffix.LOG: log, Suffix.INDEXES: indexes, Suffix.MANIFEST: manifest}
    return [BucketObject(_key(seg, s, prefix), n, OLD) for s, n in sizes.items() if n is not None]


def _meta(segments: list[SegmentMeta], topic: TopicMeta | None = None) -> Metadata:
    return Metadata.build([topic or _topic()], segments, [(TID, 1, "ENABLED")], now_ms=NOW)


def _run(segments, objects, *, manifests=None, topic=None):
    return classify(objects, _meta(segments, topic), prefix=PREFIX, now_ms=NOW, grace_ms=GRACE, manifests=manifests)


def _anomalies(result) -> set[tuple[str, str | None, str | None]]:
    return {(a.type, a.segment_id, a.key) for a in result.anomalies}


# -- where a segment's objects are ---------------------------------------------------------------------------------


def test_objects_under_the_prefix_a_segment_records_are_that_segment_s_never_outside_the_prefix() -> None:
    seg = _segment(0, object_prefix="old-cluster/")
    result = _run([seg], _objects(seg, log=1000, prefix="old-cluster/"))
    assert {(v.category, v.object_prefix, v.segment_id) for v in result.objects} == {(c.LIVE, "old-cluster/", SIDS[0])}
    assert not result.anomalies


def test_a_segment_recorded_elsewhere_whose_objects_are_nowhere_is_missing_its_objects() -> None:
    seg = _segment(0, object_prefix="old-cluster/")
    stray = BucketObject(_key(seg, Suffix.LOG, "other/"), 1000, OLD)
    result = _run([seg], [stray])
    assert [v.category for v in result.objects] == [c.OUTSIDE_PREFIX]
    assert _anomalies(result) == {(c.MISSING_OBJECTS, SIDS[0], None)}


def test_a_deleted_topic_s_objects_at_its_recorded_prefix_are_deleted_topic_and_reclaimable() -> None:
    seg = _segment(0, object_prefix="old-cluster/")
    result = _run([seg], _objects(seg, log=1000, prefix="old-cluster/"), topic=_topic(deleted=True))
    assert {(v.category, v.reclaimable, v.object_prefix) for v in result.objects} == {
        (c.DELETED_TOPIC, True, "old-cluster/")
    }


def test_an_explicit_key_is_found_under_the_scanned_prefix_whatever_its_shape() -> None:
    seg = _segment(0, object_key="custom/layout/segment-0")
    objects = [BucketObject(f"{PREFIX}custom/layout/segment-0.{s.value}", 10, OLD) for s in Suffix]
    result = _run([replace(seg, size_bytes=10)], objects)
    assert {(v.category, v.object_prefix, v.segment_id) for v in result.objects} == {(c.LIVE, PREFIX, SIDS[0])}
    assert not result.anomalies


def test_a_key_two_segments_record_belongs_to_the_smaller_topic_and_segment_id() -> None:
    first, second = _segment(0, object_key="shared/key"), _segment(1, object_key="shared/key")
    result = _run([second, first], [BucketObject(f"{PREFIX}shared/key.log", 1000, OLD)])
    assert [v.segment_id for v in result.objects] == [min(SIDS[0], SIDS[1])]


def test_custom_metadata_that_did_not_decode_is_an_anomaly_and_the_layout_still_finds_the_objects() -> None:
    seg = _segment(0, custom_metadata_error="custom metadata: truncated the field count")
    result = _run([seg], _objects(seg, log=1000))
    assert {v.category for v in result.objects} == {c.LIVE}
    assert _anomalies(result) == {(c.CUSTOM_METADATA_UNREADABLE, SIDS[0], None)}


# -- sizes judged through the format -------------------------------------------------------------------------------


def test_a_raw_log_of_the_rlmm_s_size_is_right_and_needs_no_manifest() -> None:
    seg = _segment(0)
    objects = _objects(seg, log=1000)
    assert not _run([seg], objects).anomalies
    assert manifests_needed(_meta([seg]), _found(seg, objects)) == []


def test_remote_size_is_the_bytes_of_all_three_objects() -> None:
    seg = _segment(0, remote_size=400 + 50 + 300)
    assert not _run([seg], _objects(seg, log=400)).anomalies  # compressed: the .log is not the RLMM's 1000 bytes
    wrong = replace(seg, remote_size=400)  # the .log alone: not what REMOTE_SIZE means
    assert _anomalies(_run([wrong], _objects(seg, log=400))) == {(c.SIZE_MISMATCH, SIDS[0], _key(seg, Suffix.LOG))}
    assert manifests_needed(_meta([wrong]), _found(wrong, _objects(seg, log=400))) == []


def test_with_remote_size_and_an_object_missing_only_the_object_set_is_reported() -> None:
    seg = _segment(0, remote_size=9999)
    assert _anomalies(_run([seg], _objects(seg, log=400, indexes=None))) == {(c.INCOMPLETE_OBJECT_SET, SIDS[0], None)}


def test_a_transformed_log_is_judged_by_what_its_manifest_says() -> None:
    seg = _segment(0)
    objects = _objects(seg, log=640)
    manifest_key = _key(seg, Suffix.MANIFEST)
    assert manifests_needed(_meta([seg]), _found(seg, objects)) == [(TID, SIDS[0], manifest_key)]
    log_key = _key(seg, Suffix.LOG)
    cases = {
        ManifestReading(mr.AIVEN, transformed_size=640): set(),
        ManifestReading(mr.AIVEN, transformed_size=641): {(c.SIZE_MISMATCH, SIDS[0], log_key)},
        ManifestReading(mr.LEGACY): {(c.SIZE_MISMATCH, SIDS[0], log_key)},
        ManifestReading(mr.UNREADABLE, detail="manifest is not JSON"): {(c.MANIFEST_UNREADABLE, SIDS[0], manifest_key)},
        ManifestReading(mr.GONE): set(),
    }
    for reading, expected in cases.items():
        assert _anomalies(_run([seg], objects, manifests={(TID, SIDS[0]): reading})) == expected, reading
    assert _anomalies(_run([seg], objects, manifests={})) == set()  # read, and gone since the inventory
    assert _anomalies(_run([seg], objects, manifests=None)) == {(c.SIZE_MISMATCH, SIDS[0], log_key)}  # not read


def test_a_log_without_its_manifest_is_a_missing_manifest_not_a_size_mismatch() -> None:
    seg = _segment(0)
    objects = _objects(seg, log=640, manifest=None)
    assert _anomalies(_run([seg], objects)) == {(c.MANIFEST_MISSING, SIDS[0], None)}
    assert manifests_needed(_meta([seg]), _found(seg, objects)) == []
    without_indexes = _objects(seg, log=1000, indexes=None, manifest=None)
    assert _anomalies(_run([seg], without_indexes)) == {(c.MANIFEST_MISSING, SIDS[0], None)}
    only_indexes = [o for o in _objects(seg, log=1000) if o.key.endswith(".indexes")]
    assert _anomalies(_run([seg], only_indexes)) == {(c.INCOMPLETE_OBJECT_SET, SIDS[0], None)}


@pytest.mark.parametrize("topic", [_topic(deleted=True), _topic(state="DISABLED", policy="DELETE")])
def test_sizes_of_segments_whose_data_is_going_are_not_judged(topic: TopicMeta) -> None:
    seg = _segment(0)
    objects = _objects(seg, log=1)
    assert not {a for a in _anomalies(_run([seg], objects, topic=topic)) if a[0] == c.SIZE_MISMATCH}
    assert manifests_needed(_meta([seg], topic), _found(seg, objects)) == []


def test_a_segment_recorded_elsewhere_is_sized_by_the_objects_found_there() -> None:
    seg = _segment(0, object_prefix="old-cluster/", remote_size=100 + 50 + 300)
    assert not _run([seg], _objects(seg, log=100, prefix="old-cluster/")).anomalies
    needing = _segment(1, object_prefix="old-cluster/")
    objects = _objects(needing, log=100, prefix="old-cluster/")
    expected = [(TID, SIDS[1], _key(needing, Suffix.MANIFEST, "old-cluster/"))]
    assert manifests_needed(_meta([needing]), _found(needing, objects)) == expected


def _found(seg: SegmentMeta, objects: list[BucketObject]):
    meta = _meta([seg])
    return found_objects(classify_object(o, meta, prefix=PREFIX, now_ms=NOW, grace_ms=GRACE) for o in objects)
