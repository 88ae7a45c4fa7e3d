"""JSON text as Jackson writes it: compact, in order, with Jackson's escapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import dumps, loads_object, require_int

pytestmark = pytest.mark.unit


def test_objects_are_compact_and_keep_their_member_order() -> None:
    assert dumps({"b": 1, "a": [True, False, None], "c": {"x": -7}}) == '{"b":1,"a":[true,false,null],"c":{"x":-7}}'


def test_strings_escape_what_jackson_escapes_and_nothing_else() -> None:
    assert dumps('q"b\\s/') == '"q\\"b\\\\s/"'
    assert dumps("\b\t\n\f\r") == '"\\b\\t\\n\\f\\r"'
    assert dumps("\x00\x1f\x7f") == '"\\u0000\\u001F\x7f"'  # upper-case hex; DEL is not a control escape
    assert dumps("é☃\U0001f600") == '"é☃\U0001f600"'  # non-ASCII written as itself


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_what_is_written_parses_back_to_the_same_value(value: object) -> None:
    assert json.loads(dumps(value)) == value


def test_a_boolean_is_not_an_integer_and_a_bound_is_checked() -> None:
    with pytest.raises(SegmentFormatError, match=r"m\.size is not an integer"):
        require_int({"size": True}, "size", "m", lo=0, hi=10)
    with pytest.raises(SegmentFormatError, match=r"out of range \[0, 10\]: 11"):
        require_int({"size": 11}, "size", "m", lo=0, hi=10)
    with pytest.raises(SegmentFormatError, match="thing is not JSON"):
        loads_object(b"\xff", "thing")
