import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import InvalidRequest, InvalidTopic
from orchestrator.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid, topic_names_collide, validate_topic_name

pytestmark = pytest.mark.unit


def test_random_ids_are_22_character_url_safe_base64_v4_uuids():
    for _ in range(200):
        tid = Uuid.random()
        text = str(tid)
        assert len(text) == 22 and "=" not in text and not text.startswith("-")
        assert tid.to_uuid().version == 4
        assert Uuid.from_string(text) == tid


def test_reserved_ids_are_never_handed_out():
    draws = iter([bytes(16), bytes(15) + b"\x01", b"\xff" * 16])
    tid = Uuid.random(randbytes=lambda n: next(draws))
    # The all-zero draw becomes a valid v4 uuid after the version bits are set, so only check it is not reserved.
    assert not tid.is_reserved
    assert ZERO_UUID.is_zero and ZERO_UUID.is_reserved and METADATA_TOPIC_ID.is_reserved
    assert str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_random_never_returns_an_id_starting_with_a_dash():
    # 0xf8 as the first byte prints as '-' in URL-safe base64; the generator must draw again.
    draws = iter([b"\xf8" + b"\x11" * 15, b"\x12" * 16])
    tid = Uuid.random(randbytes=lambda n: next(draws))
    assert not str(tid).startswith("-")
    assert tid.raw[0] == 0x12


@given(st.binary(min_size=16, max_size=16))
def test_string_form_round_trips_and_matches_the_standard_encoding(raw):
    tid = Uuid(raw)
    assert Uuid.from_string(str(tid)) == tid
    assert str(tid) == base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert Uuid.from_uuid(uuid.UUID(bytes=raw)) == tid


@pytest.mark.parametrize(
    "bad",
    ["", "short", "A" * 21, "A" * 23, "AAAAAAAAAAAAAAAAAAAA+/", "AAAAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAAB"],
)
def test_bad_id_strings_are_rejected_with_the_input_named(bad):
    with pytest.raises(InvalidRequest) as err:
        Uuid.from_string(bad)
    assert err.value.code == 42
    assert repr(bad)[1:-1] in str(err.value)


def test_a_uuid_must_be_16_bytes():
    with pytest.raises(InvalidRequest):
        Uuid(b"\x00" * 15)


@pytest.mark.parametrize("name", ["a", "orders", "orders.v2", "my_topic-1", "A" * 249, "..a", "a.."])
def test_legal_topic_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name,why",
    [
        ("", "empty"),
        (".", "cannot be"),
        ("..", "cannot be"),
        ("a" * 250, "limit is 249"),
        ("a b", "illegal"),
        ("a/b", "illegal"),
        ("é", "illegal"),
        ("a:b", "illegal"),
    ],
)
def test_illegal_topic_names_are_rejected_with_the_reason(name, why):
    with pytest.raises(InvalidTopic) as err:
        validate_topic_name(name)
    assert why in str(err.value) and err.value.code == 17


def test_names_differing_only_by_dot_and_underscore_collide():
    assert topic_names_collide("a.b", "a_b")
    assert not topic_names_collide("a.b", "a.b") and not topic_names_collide("ab", "a_b")
