"""Object keys against Aiven's ObjectKeyFactoryTest, and the main path against our own key layout."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from remote_storage.keys import SegmentKey, Suffix, build_key
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata
from remote_storage.segment_format.object_keys import main_path, segment_object_key
from tests.remote_storage.segment_format.golden import load_golden

pytestmark = pytest.mark.unit

GOLDEN = load_golden("object_key_factory_test.json")
SEGMENT = SegmentKey(
    topic=GOLDEN["segment"]["topic"],
    topic_id=Uuid.from_string(GOLDEN["segment"]["topicId"]),
    partition=GOLDEN["segment"]["partition"],
    start_offset=GOLDEN["segment"]["startOffset"],
    segment_id=Uuid.from_string(GOLDEN["segment"]["segmentId"]),
)


def _custom(fields: dict[str, str] | None) -> SegmentCustomMetadata | None:
    if fields is None:
        return None
    return SegmentCustomMetadata(object_prefix=fields.get("1"), object_key=fields.get("2"))


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["name"])
def test_keys_are_aivens_for_each_case_of_its_key_factory_test(case: dict[str, Any]) -> None:
    for suffix_text, expected in case.get("expected", {}).items():
        key = segment_object_key(
            configured_prefix=case["prefix"],
            segment=SEGMENT,
            suffix=Suffix(suffix_text),
            custom_metadata=_custom(case["customFields"]),
        )
        assert key.value == expected
        assert key.shown(mask_prefix=False) == expected
    for suffix_text, expected in case.get("expectedShown", {}).items():
        key = segment_object_key(
            configured_prefix=case["prefix"],
            segment=SEGMENT,
            suffix=Suffix(suffix_text),
            custom_metadata=_custom(case["customFields"]),
        )
        assert key.shown(mask_prefix=case["maskPrefix"]) == expected


def test_a_masked_key_still_has_its_real_prefix_as_its_value() -> None:
    key = segment_object_key(configured_prefix="real-prefix/", segment=SEGMENT, suffix=Suffix.LOG)
    assert key.value.startswith("real-prefix/topic-")
    assert key.shown(mask_prefix=True).startswith("<prefix>/topic-")


uuids = st.binary(min_size=16, max_size=16).map(Uuid)
segments = st.builds(
    SegmentKey,
    topic=st.text(alphabet="abcXYZ019._-", min_size=1, max_size=40).filter(lambda n: n not in (".", "..")),
    topic_id=uuids,
    partition=st.integers(0, 2**31 - 1),
    start_offset=st.integers(0, 2**63 - 1),
    segment_id=uuids,
)


@given(segments, st.sampled_from(list(Suffix)), st.sampled_from(["", "p/", "a/b-"]))
def test_without_custom_metadata_a_key_is_the_one_our_layout_builds(
    segment: SegmentKey, suffix: Suffix, prefix: str
) -> None:
    key = segment_object_key(configured_prefix=prefix, segment=segment, suffix=suffix)
    assert key.value == build_key(prefix, segment, suffix)
    assert key.value == f"{prefix}{main_path(segment)}.{suffix.value}"


@given(segments, st.sampled_from(list(Suffix)))
def test_empty_custom_metadata_changes_no_key(segment: SegmentKey, suffix: Suffix) -> None:
    plain = segment_object_key(configured_prefix="p/", segment=segment, suffix=suffix)
    with_empty = segment_object_key(
        configured_prefix="p/", segment=segment, suffix=suffix, custom_metadata=SegmentCustomMetadata(remote_size=9)
    )
    assert plain == with_empty
