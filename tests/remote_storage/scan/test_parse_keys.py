"""The Spark scan's key parser cuts a key below the prefix by bytes: a key that starts with the prefix parses to the
parts remote_storage.keys.parse_key gives it, and a key whose multi-byte character straddles the prefix's last
byte is outside the prefix, never parsed, and fails nothing."""

from __future__ import annotations

from typing import Any

import pytest

from remote_storage.keys import parse_key
from remote_storage.scan.locate import parse_keys

pytestmark = pytest.mark.spark

TOPIC_ID = "o96aK1zq8YfxuVLbdIaeIw"
SEGMENT_ID = "AAAAAAAAAAAAAAAAAAAAAw"
FILE = f"00000000000000000042-{SEGMENT_ID}"


@pytest.mark.parametrize("prefix", ["tiered/", "t\u00e9/\u20ac/", ""])
def test_keys_under_a_prefix_parse_and_keys_straddling_its_last_byte_do_not(spark: Any, prefix: str) -> None:
    valid = [f"{prefix}orders-{TOPIC_ID}/3/{FILE}.log", f"{prefix}a.b-c-{TOPIC_ID}/0/{FILE}.rsm-manifest"]
    cut = len(prefix.encode())
    # Characters of two, three and four UTF-8 bytes whose bytes run across the cut.
    straddling = (
        [
            prefix.encode()[: cut - 1].decode("utf-8", "ignore") + ch + f"-{TOPIC_ID}/0/{FILE}.log"
            for ch in ("\u00e9", "\u20ac", "\U0001f600")
        ]
        if cut
        else []
    )
    rows = [(k, 1, 0) for k in valid + straddling]
    df = spark.createDataFrame(rows, "key string, size bigint, last_modified_ms bigint")
    got = {r["key"]: r for r in parse_keys(df, prefix).collect()}
    for key in valid:
        want = parse_key(key, prefix)
        seg, row = want.segment, got[key]
        assert row["under_prefix"] and row["parsed"]
        parts = (row["topic"], row["topic_id"], row["partition"], row["start_offset"], row["segment_id"], row["suffix"])
        expected = (
            seg.topic,
            str(seg.topic_id),
            seg.partition,
            seg.start_offset,
            str(seg.segment_id),
            want.suffix.value,
        )
        assert parts == expected
    for key in straddling:
        row = got[key]
        assert not row["under_prefix"] and not row["parsed"], key
        assert row["topic"] is None and row["segment_id"] is None
