import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from remote_storage.keys import (
    KeyParseError,
    SegmentKey,
    Suffix,
    build_key,
    parse_key,
    segment_keys,
    topic_prefix,
)

pytestmark = pytest.mark.unit

topic_names = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=60).filter(lambda n: n not in (".", ".."))
uuids = st.binary(min_size=16, max_size=16).map(Uuid)
segments = st.builds(
    SegmentKey,
    topic=topic_names,
    topic_id=uuids,
    partition=st.integers(0, 10_000),
    start_offset=st.integers(0, 2**63 - 1),
    segment_id=uuids,
)


def test_the_layout_matches_the_open_source_s3_rsm():
    tid = Uuid.from_string("Wgh6vRUiRYmIz1M8-5BKmA")
    sid = Uuid.from_string("ePuYRkpVRvOkgrnzqyhYqQ")
    key = build_key("tiered/", SegmentKey("orders-v2.eu", tid, 3, 12345, sid), Suffix.LOG)
    assert key == "tiered/orders-v2.eu-Wgh6vRUiRYmIz1M8-5BKmA/3/00000000000000012345-ePuYRkpVRvOkgrnzqyhYqQ.log"


@given(segments, st.sampled_from(list(Suffix)), st.sampled_from(["", "p/", "a/b-"]))
def test_keys_round_trip_even_when_names_contain_dashes_and_dots(segment, suffix, prefix):
    key = build_key(prefix, segment, suffix)
    parsed = parse_key(key, prefix)
    assert parsed.segment == segment and parsed.suffix == suffix
    assert key.startswith(topic_prefix(prefix, segment.topic, segment.topic_id))


@given(segments, uuids)
def test_same_name_different_id_prefixes_are_disjoint(segment, other_id):
    a = topic_prefix("", segment.topic, segment.topic_id)
    b = topic_prefix("", segment.topic, other_id)
    if other_id != segment.topic_id:
        assert not a.startswith(b) and not b.startswith(a)
    for key in segment_keys("", segment).values():
        assert key.startswith(a)


@pytest.mark.parametrize(
    "key,reason",
    [
        ("other/t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "outside the prefix"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/x/y", "wrong number of path elements"),
        ("p/t_AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "no topic id"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/01/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "bad partition"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/-1/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "bad partition"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/0000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "bad file name"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.txt", "bad file name"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAB/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "bad topic name or id"),
        ("p/a b-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log", "bad topic name or id"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAB.log", "bad segment id"),
    ],
)
def test_junk_keys_are_refused_with_a_reason(key, reason):
    with pytest.raises(KeyParseError) as err:
        parse_key(key, "p/")
    assert err.value.reason == reason and err.value.name == "INVALID_OBJECT_KEY"
    assert str(err.value).startswith("INVALID_OBJECT_KEY: ")
