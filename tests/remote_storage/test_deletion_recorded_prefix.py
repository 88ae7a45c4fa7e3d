"""Where a segment's objects are found, and the one prefix a delete of them may touch, when its custom metadata
recorded a prefix or a key (Aiven's OBJECT_PREFIX, OBJECT_KEY): whatever was recorded, a delete never leaves
``<recorded prefix><topic>-<topicId>/``. moto's S3 server on loopback and a real SQLite store."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState, TieredState, make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.deletion import delete_segments
from remote_storage.keys import Suffix, topic_prefix
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment, copy_started_record, update_record
from remote_storage.s3 import S3RemoteStorage
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata, encode_custom_metadata
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.object_keys import main_path

pytestmark = pytest.mark.integration

TID = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAA")
OTHER = Uuid.from_string("BBBBBBBBBBBBBBBBBBBBBA")


def _segment(custom: SegmentCustomMetadata | None = None, start: int = 0) -> RemoteSegment:
    seg = RemoteSegment("orders", TID, 0, Uuid.random(), start, start + 9, 0, 10, 1)
    return seg if custom is None else replace(seg, custom_metadata=encode_custom_metadata(custom))


def test_without_recorded_fields_the_objects_are_under_the_configured_prefix():
    seg = _segment()
    assert seg.object_keys("tiered/")[Suffix.LOG] == f"tiered/{main_path(seg.key)}.log"
    assert seg.objects_topic_prefix("tiered/") == topic_prefix("tiered/", "orders", TID)
    empty = _segment(SegmentCustomMetadata(remote_size=30))  # REMOTE_SIZE alone moves nothing
    assert empty.object_keys("tiered/") == replace(empty, custom_metadata=None).object_keys("tiered/")


def test_a_recorded_prefix_and_key_say_where_the_objects_are_and_the_prefix_bounds_the_delete():
    seg = _segment(SegmentCustomMetadata(object_prefix="old/", object_key="orders-AAAAAAAAAAAAAAAAAAAAAA/0/x"))
    assert seg.object_keys("tiered/") == {
        Suffix.LOG: "old/orders-AAAAAAAAAAAAAAAAAAAAAA/0/x.log",
        Suffix.INDEXES: "old/orders-AAAAAAAAAAAAAAAAAAAAAA/0/x.indexes",
        Suffix.MANIFEST: "old/orders-AAAAAAAAAAAAAAAAAAAAAA/0/x.rsm-manifest",
    }
    assert seg.objects_topic_prefix("tiered/") == "old/orders-AAAAAAAAAAAAAAAAAAAAAA/"


def test_custom_metadata_that_does_not_decode_is_an_error_not_a_guess():
    seg = replace(_segment(), custom_metadata=b"\x01\x01\x05")
    with pytest.raises(SegmentFormatError):
        seg.object_keys("tiered/")


class World:
    def __init__(self, tmp_path: Any, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket
        self.store = SqliteMetadataStore(tmp_path / "store.db")
        lease = self.store.acquire_lease(holder="t", now_ms=0, ttl_ms=10**12)
        assert lease is not None
        enabled = {"tiered_epoch": 1, "tiered_state": int(TieredState.ENABLED), "policy": 0}
        self.store.append(
            [
                make_record("TopicRecord", name="orders", topic_id=TID),
                make_record("TieredStateRecord", topic_id=TID, **enabled),
            ],
            controller_epoch=lease.controller_epoch,
        )
        self.rlmm = RemoteLogMetadataManager(self.store)
        self.rsm = S3RemoteStorage(client=s3, bucket=bucket, prefix="tiered/", sleep=lambda _s: None)
        self.requested: list[str] = []
        s3.meta.events.register("before-parameter-build.s3.DeleteObjects", self._asked)
        self.next_offset = 0

    def _asked(self, params: dict[str, Any], **_: Any) -> None:
        self.requested += [o["Key"] for o in params["Delete"]["Objects"]]

    def copied(self, custom: SegmentCustomMetadata) -> RemoteSegment:
        seg = _segment(custom, start=self.next_offset)
        self.next_offset += 10
        self.store.append_remote_log_metadata(
            [
                copy_started_record(seg, now_ms=0),
                update_record(
                    seg, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=0, custom_metadata=seg.custom_metadata
                ),
            ]
        )
        self.rlmm.refresh()
        [folded] = [s for s in self.rlmm.segments(TID) if s.segment_id == seg.segment_id]
        assert folded.custom_metadata == seg.custom_metadata
        return folded

    def put(self, key: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"x")

    def keys(self) -> set[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return {o["Key"] for p in pages for o in p.get("Contents", [])}


PREFIXES = st.sampled_from(
    ["", "tiered/", "old/", "a", "tiered/orders-", "../", "tiered/orders-AAAAAAAAAAAAAAAAAAAAAA/"]
)
KEYS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-CCCCCCCCCCCCCCCCCCCCCC",
            "orders-AAAAAAAAAAAAAAAAAAAAAA/../payments-BBBBBBBBBBBBBBBBBBBBBB/0/x",
            "orders-BBBBBBBBBBBBBBBBBBBBBB/0/x",
            "orders-AAAAAAAAAAAAAAAAAAAAAAx/0/x",
            "orders-AAAAAAAAAAAAAAAAAAAAAA",
            "",
            "/orders-AAAAAAAAAAAAAAAAAAAAAA/0/x",
        ]
    ),
    st.text(alphabet="ab/-.AB", max_size=12),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=PREFIXES, key=KEYS)
def test_whatever_a_segment_recorded_a_delete_never_leaves_its_topics_prefix_within_the_recorded_prefix(
    tmp_path_factory, s3_client, bucket, prefix, key
):
    world = World(tmp_path_factory.mktemp("store"), s3_client, bucket)
    seg = world.copied(SegmentCustomMetadata(object_prefix=prefix, object_key=key))
    allowed = topic_prefix(prefix, "orders", TID)
    objects = list(seg.object_keys("tiered/").values())
    bystanders = {  # another topic id's objects, the configured prefix's, and a neighbour of the recorded key
        f"{prefix}orders-{OTHER}/0/x.log",
        f"tiered/orders-{TID}/0/untouched.log",
        f"{prefix}orders-{TID}x/0/x.log",
    } - {k for k in objects if k.startswith(allowed)}
    for k in {*objects, *bystanders}:
        world.put(k)
    result = delete_segments([seg], rsm=world.rsm, rlmm=world.rlmm, broker_id=1, now_ms=lambda: 0)
    assert all(k.startswith(allowed) for k in world.requested)
    left = world.keys()
    assert bystanders <= left
    if all(k.startswith(allowed) for k in objects):
        assert result.complete and not set(objects) & left
    else:  # a recorded key outside the topic's prefix: refused whole, nothing asked of S3
        assert not result.complete and world.requested == [] and set(objects) <= left
    for k in left:
        s3_client.delete_object(Bucket=bucket, Key=k)
    world.store.close()
