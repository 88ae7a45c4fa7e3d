"""RSA key pairs for the encryption tests: generated once per process, written as PEM files the way an operator
would give them to a broker (public key SubjectPublicKeyInfo, private key PKCS#8)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from remote_storage.segment_format.key_ring import KeyRing, RsaKeyPair


@dataclass(frozen=True)
class KeyPairFiles:
    key_pair_id: str
    public_file: Path
    private_file: Path
    private_key: RSAPrivateKey  # for the independent reader

    @property
    def setting(self) -> list[str]:
        """The entry of ``[rsm] encryption_key_pairs`` naming these files."""
        return [self.key_pair_id, str(self.public_file), str(self.private_file)]

    def key_pair(self) -> RsaKeyPair:
        return RsaKeyPair.from_pem(self.public_file.read_bytes(), self.private_file.read_bytes())


@functools.cache
def private_key(name: str) -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_key_pair(directory: Path, key_pair_id: str) -> KeyPairFiles:
    key = private_key(key_pair_id)
    directory.mkdir(parents=True, exist_ok=True)
    public_file, private_file = directory / f"{key_pair_id}-public.pem", directory / f"{key_pair_id}-private.pem"
    public_file.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    private_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return KeyPairFiles(key_pair_id, public_file, private_file, key)


def key_ring(*pairs: KeyPairFiles, active: str | None = None) -> KeyRing:
    return KeyRing(active or pairs[0].key_pair_id, {p.key_pair_id: p.key_pair() for p in pairs})
