"""The wrapped data key's text against Aiven's EncryptedDataKeyTest, and the key ring's RSA-OAEP over SHA3-512."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.errors import SegmentFormatError, UnknownKeyPair
from remote_storage.segment_format.key_ring import EncryptedDataKey, KeyRing, RsaKeyPair
from tests.remote_storage.segment_format.aiven_reference import oaep_unwrap, oaep_wrap
from tests.remote_storage.segment_format.golden import KEY_PAIR_ID, load_golden, pem

pytestmark = pytest.mark.unit

GOLDEN = load_golden("encrypted_data_key_test.json")


def test_a_wrapped_key_is_written_as_aiven_writes_it() -> None:
    case = GOLDEN["serialize"]
    assert EncryptedDataKey(case["keyPairId"], bytes(case["encryptedKey"])).to_text() == case["text"]


def test_aivens_good_string_parses() -> None:
    case = GOLDEN["parseGoodString"]
    assert EncryptedDataKey.from_text(case["text"]) == EncryptedDataKey(case["keyPairId"], bytes(case["encryptedKey"]))


@pytest.mark.parametrize("text", GOLDEN["parseBadStrings"])
def test_aivens_bad_strings_are_refused_with_aivens_message(text: str) -> None:
    with pytest.raises(SegmentFormatError) as refused:
        EncryptedDataKey.from_text(text)
    assert refused.value.message == GOLDEN["badStringMessage"].format(text=text)


def test_a_data_key_wrapped_by_the_ring_unwraps_with_a_textbook_oaep_decoder(
    key_ring: KeyRing, rsa_private_key: RSAPrivateKey
) -> None:
    data_key = bytes(range(32))
    wrapped = key_ring.wrap(data_key)
    assert wrapped.key_pair_id == KEY_PAIR_ID
    assert len(wrapped.encrypted_key) == 256  # a 2048-bit modulus
    assert oaep_unwrap(rsa_private_key, wrapped.encrypted_key) == data_key
    assert wrapped != key_ring.wrap(data_key)  # OAEP is randomized


def test_a_data_key_wrapped_by_a_textbook_oaep_encoder_unwraps_with_the_ring(
    key_ring: KeyRing, rsa_private_key: RSAPrivateKey
) -> None:
    data_key = bytes(range(100, 132))
    wrapped = EncryptedDataKey(KEY_PAIR_ID, oaep_wrap(rsa_private_key.public_key(), data_key))
    assert key_ring.unwrap(wrapped) == data_key


def _pair(private_key: RSAPrivateKey, *, with_private: bool = True) -> RsaKeyPair:
    public = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return RsaKeyPair.from_pem(public, private if with_private else None)


def test_an_older_key_pair_still_unwraps_what_it_wrapped_after_the_active_pair_changes(
    key_ring: KeyRing, other_rsa_private_key: RSAPrivateKey
) -> None:
    newer = other_rsa_private_key
    wrapped_by_old = key_ring.wrap(b"k" * 32)
    rotated = KeyRing("newer", {KEY_PAIR_ID: key_ring.key_pairs[KEY_PAIR_ID], "newer": _pair(newer)})
    assert rotated.wrap(b"n" * 32).key_pair_id == "newer"
    assert rotated.unwrap(wrapped_by_old) == b"k" * 32


def test_a_key_pair_missing_from_the_ring_or_without_its_private_key_cannot_unwrap(
    key_ring: KeyRing, rsa_private_key: RSAPrivateKey
) -> None:
    wrapped = key_ring.wrap(bytes(32))
    with pytest.raises(UnknownKeyPair, match="not in the key ring"):
        KeyRing("other", {"other": key_ring.key_pairs[KEY_PAIR_ID]}).unwrap(wrapped)
    public_only = KeyRing(KEY_PAIR_ID, {KEY_PAIR_ID: _pair(rsa_private_key, with_private=False)})
    with pytest.raises(UnknownKeyPair, match="no private key"):
        public_only.unwrap(wrapped)
    assert public_only.wrap(bytes(32)).key_pair_id == KEY_PAIR_ID  # a ring that only writes needs no private key


def test_a_wrapped_key_that_was_altered_does_not_unwrap(key_ring: KeyRing) -> None:
    wrapped = key_ring.wrap(bytes(32))
    flipped = bytes([wrapped.encrypted_key[0] ^ 1]) + wrapped.encrypted_key[1:]
    with pytest.raises(SegmentFormatError, match="does not unwrap"):
        key_ring.unwrap(EncryptedDataKey(KEY_PAIR_ID, flipped))


def test_the_ring_refuses_ids_aiven_could_not_read_back_and_an_active_id_it_does_not_hold(key_ring: KeyRing) -> None:
    pair = key_ring.key_pairs[KEY_PAIR_ID]
    with pytest.raises(InvalidArgument, match="must be provided"):
        KeyRing("missing", {KEY_PAIR_ID: pair})
    for bad in ("", "  ", "a:b"):
        with pytest.raises(InvalidArgument, match="key pair id"):
            KeyRing(bad, {bad: pair})


def test_key_files_that_are_not_rsa_pem_or_do_not_match_are_refused(
    rsa_private_key: RSAPrivateKey, other_rsa_private_key: RSAPrivateKey
) -> None:
    other = other_rsa_private_key
    public = rsa_private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    other_private = other.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(InvalidArgument, match="not an RSA key"):
        RsaKeyPair.from_pem(b"-----BEGIN SOME KEY-----\nAAAA\n-----END SOME KEY-----\n")
    with pytest.raises(InvalidArgument, match="holds a public key"):
        RsaKeyPair.from_pem(pem("SOME KEY", public), pem("SOME KEY", public))
    with pytest.raises(InvalidArgument, match="does not belong"):
        RsaKeyPair.from_pem(pem("SOME KEY", public), pem("SOME KEY", other_private))
