"""Fixtures of the segment format's tests: one RSA key pair per session, and a key ring read from its PEM files."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from remote_storage.segment_format.key_ring import KeyRing, RsaKeyPair
from tests.remote_storage.segment_format.golden import KEY_PAIR_ID, pem


@pytest.fixture(scope="session")
def rsa_private_key() -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def other_rsa_private_key() -> RSAPrivateKey:
    """A second key pair: a rotated-to key, or one that does not match."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def key_ring(rsa_private_key: RSAPrivateKey) -> KeyRing:
    """A ring of one key pair read from PEM files as Aiven's tests write them (label "SOME KEY")."""
    public_der = rsa_private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_der = rsa_private_key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pair = RsaKeyPair.from_pem(pem("SOME KEY", public_der), pem("SOME KEY", private_der))
    return KeyRing(KEY_PAIR_ID, {KEY_PAIR_ID: pair})
