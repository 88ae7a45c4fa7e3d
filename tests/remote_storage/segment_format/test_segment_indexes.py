"""The ``.indexes`` object against Aiven's SegmentIndexesV1BuilderTest, with and without encryption."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote_storage.segment_format.encryption import OVERHEAD, DataKeyAndAad
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import dumps
from remote_storage.segment_format.segment_indexes import (
    IndexRange,
    IndexType,
    SegmentIndexes,
    SegmentIndexFiles,
    build_indexes_object,
    decode_index,
    read_index,
    segment_indexes_from_json,
    segment_indexes_to_json,
)
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

GOLDEN = load_golden("segment_indexes_v1_builder_test.json")
KEY = DataKeyAndAad(bytes(range(32)), bytes(32))


def _files(sizes: list[int | None]) -> SegmentIndexFiles:
    """Index files of these sizes (the transaction index absent when its size is None), each of its own byte."""
    offset, timestamp, producer_snapshot, leader_epoch, transaction = sizes
    return SegmentIndexFiles(
        b"\x01" * (offset or 0),
        b"\x02" * (timestamp or 0),
        b"\x03" * (producer_snapshot or 0),
        b"\x04" * (leader_epoch or 0),
        None if transaction is None else b"\x05" * transaction,
    )


def test_the_object_holds_the_indexes_in_aivens_order() -> None:
    assert [t.value for t in IndexType] == GOLDEN["order"]


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["name"])
def test_positions_and_sizes_are_aivens_including_empty_and_absent_indexes(case: dict[str, Any]) -> None:
    files = _files(case["sizes"])
    built = build_indexes_object(files)
    expected = [None if e is None else IndexRange(*e) for e in case["expected"]]
    assert [built.indexes.range_of(t) for t in IndexType] == expected
    assert built.body == b"".join(files.contents(t) or b"" for t in IndexType)
    for index_type in IndexType:
        assert read_index(built.body, built.indexes, index_type) == files.contents(index_type)


def test_with_encryption_each_non_empty_index_is_sealed_alone_and_an_empty_one_stays_zero_bytes() -> None:
    files = _files([3, 0, 5, 2, None])
    built = build_indexes_object(files, encryption_key=KEY, random_bytes=os.urandom)
    sizes = [r.size if r else None for r in (built.indexes.range_of(t) for t in IndexType)]
    assert sizes == [3 + OVERHEAD, 0, 5 + OVERHEAD, 2 + OVERHEAD, None]
    assert len(built.body) == 10 + 3 * OVERHEAD
    for index_type in IndexType:
        assert read_index(built.body, built.indexes, index_type, encryption_key=KEY) == files.contents(index_type)
    index_range = built.indexes.leader_epoch
    stored = built.body[index_range.position : index_range.end]
    assert decode_index(stored, IndexType.LEADER_EPOCH, encryption_key=KEY) == files.leader_epoch


def test_an_index_with_the_wrong_key_or_outside_the_object_is_refused() -> None:
    built = build_indexes_object(_files([4, 4, 4, 4, 4]), encryption_key=KEY)
    with pytest.raises(SegmentFormatError, match="the timestamp index does not decrypt"):
        read_index(built.body, built.indexes, IndexType.TIMESTAMP, encryption_key=DataKeyAndAad(bytes(32), bytes(32)))
    with pytest.raises(SegmentFormatError, match=r"of a 10-byte \.indexes object"):
        read_index(built.body[:10], built.indexes, IndexType.TRANSACTION, encryption_key=KEY)


def test_segment_indexes_json_writes_transaction_null_and_requires_the_member() -> None:
    indexes = SegmentIndexes(IndexRange(0, 1), IndexRange(1, 1), IndexRange(2, 1), IndexRange(3, 1), None)
    text = dumps(segment_indexes_to_json(indexes))
    assert text.endswith('"transaction":null}')
    assert segment_indexes_from_json(json.loads(text)) == indexes
    tree = json.loads(text)
    del tree["transaction"]
    with pytest.raises(SegmentFormatError, match="transaction is missing"):
        segment_indexes_from_json(tree)
    tree = json.loads(text)
    tree["offset"] = None
    with pytest.raises(SegmentFormatError, match=r"segmentIndexes\.offset is not a JSON object"):
        segment_indexes_from_json(tree)


@given(st.lists(st.binary(max_size=40), min_size=4, max_size=4), st.none() | st.binary(max_size=40), st.booleans())
def test_any_indexes_read_back_exactly(four: list[bytes], transaction: bytes | None, encrypted: bool) -> None:
    files = SegmentIndexFiles(*four, transaction=transaction)
    key = KEY if encrypted else None
    built = build_indexes_object(files, encryption_key=key)
    ranges = [built.indexes.range_of(t) for t in IndexType]
    present = [r for r in ranges if r is not None]
    assert [r.position for r in present] == [sum(r.size for r in present[:i]) for i in range(len(present))]
    assert sum(r.size for r in present) == len(built.body)
    assert segment_indexes_from_json(json.loads(dumps(segment_indexes_to_json(built.indexes)))) == built.indexes
    for index_type in IndexType:
        assert read_index(built.body, built.indexes, index_type, encryption_key=key) == files.contents(index_type)
