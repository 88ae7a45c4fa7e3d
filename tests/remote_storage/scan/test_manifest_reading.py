"""What the scan makes of a ``.rsm-manifest``'s bytes: Aiven's manifests give the stored size of the ``.log``, ours
from before Aiven's format say the ``.log`` is raw, anything else is unreadable, and nothing raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from remote_storage.scan import manifest_reading as mr
from remote_storage.scan.manifest_reading import ManifestReading, read_manifest
from tests.support.aiven_objects import aiven_objects, key_ring, legacy_manifest, segment_bytes

pytestmark = pytest.mark.unit

TOPIC_ID, SEGMENT_ID = Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), Uuid.from_string("adh9f8BMS4anaUnD8KWfWg")


def _objects(data: bytes, **kw: object):
    common = dict(topic="orders", topic_id=TOPIC_ID, partition=0, segment_id=SEGMENT_ID, start_offset=0)
    return aiven_objects(**common, end_offset=99, data=data, **kw)


@pytest.mark.parametrize("compression", [False, True])
@pytest.mark.parametrize("encrypted", [False, True])
def test_an_aiven_manifest_says_the_size_of_the_log_as_stored(compression: bool, encrypted: bool) -> None:
    data = segment_bytes(50_000, seed=3)
    objects = _objects(data, compression=compression, ring=key_ring() if encrypted else None)
    reading = read_manifest(objects.manifest_text)
    assert reading == ManifestReading(mr.AIVEN, transformed_size=len(objects.log))
    if compression or encrypted:
        assert len(objects.log) != len(data)  # the size the RLMM records is not the object's
    else:
        assert len(objects.log) == len(data)


def test_an_empty_segment_s_manifest_says_its_log_is_empty() -> None:
    assert read_manifest(_objects(b"").manifest_text) == ManifestReading(mr.AIVEN, transformed_size=0)


def test_a_manifest_of_ours_from_before_aiven_s_format_is_legacy_not_unreadable() -> None:
    body = legacy_manifest(topic="orders", topic_id=str(TOPIC_ID), partition=0, segment_id=str(SEGMENT_ID))
    assert read_manifest(body) == ManifestReading(mr.LEGACY)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe{", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version":"2"}', "only '1'"),
        (b'{"version":"1","compression":false}', "chunkIndex"),
        (b'{"topic":"orders"}', "version"),  # a flat JSON object without tieredEpoch is not one of ours
        (b"[" * 100_000 + b"]" * 100_000, "manifest"),  # deeper than the JSON reader goes
    ],
)
def test_anything_else_is_unreadable_with_the_reason(body: bytes, why: str) -> None:
    reading = read_manifest(body)
    assert reading.kind == mr.UNREADABLE
    assert reading.transformed_size is None
    assert reading.detail is not None and why in reading.detail


def test_a_chunk_index_that_does_not_hold_together_is_unreadable() -> None:
    text = _objects(segment_bytes(10_000), chunk_size=1000).manifest_text.decode()
    broken = text.replace('"originalFileSize":10000', '"originalFileSize":-1')
    assert broken != text
    reading = read_manifest(broken.encode())
    assert reading.kind == mr.UNREADABLE and "originalFileSize" in (reading.detail or "")


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_no_bytes_make_reading_a_manifest_raise(body: bytes) -> None:
    reading = read_manifest(body)
    assert reading.kind in mr.KINDS
    assert reading.detail is None or len(reading.detail) <= mr.MAX_DETAIL
