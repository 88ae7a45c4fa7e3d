"""The RSA key ring that wraps each segment's data key, and the wrapped key's text in the manifest.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/security/RsaEncryptionProvider.java``,
``EncryptedDataKey.java``, ``RsaKeyReader.java``, ``manifest/serde/DataKeySerializer.java`` and
``config/RemoteStorageManagerConfig.java`` (commit in :mod:`remote_storage.segment_format`).

* Key pairs are named by id, as Aiven's settings name them (``encryption.key.pairs=k1,k2``,
  ``encryption.key.pair.id=k1``, ``encryption.key.pairs.k1.public.key.file``/``.private.key.file``): new data keys
  are wrapped with the active pair; a manifest says which pair wrapped its key, so older pairs still unwrap.
* Key files are PEM: the public key X.509 SubjectPublicKeyInfo, the private key PKCS#8 (Aiven's reader takes the
  first PEM block whatever its label; so does :meth:`RsaKeyPair.from_pem`).
* Wrapping is Bouncy Castle's ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``: RSAES-OAEP (RFC 8017) with SHA3-512 as
  both the OAEP hash and MGF1's hash, and an empty label. (``cryptography`` offers OAEP with SHA-1/SHA-2 only, hence
  pycryptodomex here.) With SHA3-512, a 2048-bit key wraps at most 126 bytes, plenty for a 32-byte AES key.
* pycryptodomex is imported when a key is first read or used, not with this module: every broker imports the
  object format, and only a broker that encrypts needs RSA (the import costs about 50 ms of each start-up).
* In the manifest the wrapped key is ``"<key pair id>:<standard base64 of the RSA ciphertext>"``; so a key pair id
  is never blank and never holds a ``:``.
"""

from __future__ import annotations

import base64
import binascii
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.errors import SegmentFormatError, UnknownKeyPair

if TYPE_CHECKING:
    from Cryptodome.Cipher import PKCS1_OAEP
    from Cryptodome.PublicKey import RSA

RSA_TRANSFORMATION = "RSA/NONE/OAEPWithSHA3-512AndMGF1Padding"  # Aiven's name for the wrapping, for messages
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def check_key_pair_id(key_pair_id: str) -> str:
    if not key_pair_id.strip() or ":" in key_pair_id:
        raise InvalidArgument(f"a key pair id is not blank and holds no ':', got {key_pair_id!r}")
    return key_pair_id


@dataclass(frozen=True, slots=True)
class EncryptedDataKey:
    """A data key wrapped with the key pair ``key_pair_id``."""

    key_pair_id: str
    encrypted_key: bytes

    def __post_init__(self) -> None:
        check_key_pair_id(self.key_pair_id)
        if not self.encrypted_key:
            raise InvalidArgument("an encrypted data key is not empty")

    def to_text(self) -> str:
        """``"<key pair id>:<base64>"``, the manifest's ``encryption.dataKey``."""
        return f"{self.key_pair_id}:{base64.b64encode(self.encrypted_key).decode('ascii')}"

    @classmethod
    def from_text(cls, text: str) -> EncryptedDataKey:
        """Parse ``encryption.dataKey``; refuses what Aiven refuses (no or several ``:``, a blank id, an empty or
        non-base64 key), with Aiven's message."""
        malformed = SegmentFormatError(f"Malformed encrypted data key string: {text}")
        key_pair_id, colon, key_text = text.partition(":")
        if not colon or ":" in key_text or not _BASE64.fullmatch(key_text) or len(key_text) % 4 == 1:
            raise malformed
        try:
            key = base64.b64decode(key_text + "=" * (-len(key_text) % 4), validate=True)
            return cls(key_pair_id, key)
        except (binascii.Error, ValueError, InvalidArgument) as exc:
            raise malformed from exc


@dataclass(frozen=True, slots=True, eq=False)
class RsaKeyPair:
    """One key pair of the ring; a ring that only writes may hold the public key alone."""

    public_key: RSA.RsaKey
    private_key: RSA.RsaKey | None = None

    @classmethod
    def from_pem(cls, public_pem: bytes | str, private_pem: bytes | str | None = None) -> RsaKeyPair:
        """A key pair from the contents of its PEM files (reading the files is the caller's job)."""
        public = _import(public_pem, "public key").public_key()
        private = None
        if private_pem is not None:
            private = _import(private_pem, "private key")
            if not private.has_private():
                raise InvalidArgument("the private key file holds a public key")
            if private.public_key() != public:
                raise InvalidArgument("the private key does not belong to the public key")
        return cls(public, private)


def _import(pem: bytes | str, what: str) -> RSA.RsaKey:
    from Cryptodome.PublicKey import RSA

    try:
        return RSA.import_key(pem)
    except (ValueError, IndexError, TypeError) as exc:
        raise InvalidArgument(f"the {what} is not an RSA key in PEM: {exc}") from exc


def _oaep(key: RSA.RsaKey, random_bytes: Callable[[int], bytes] | None) -> PKCS1_OAEP.PKCS1OAEP_Cipher:
    # MGF1 defaults to the OAEP hash (SHA3-512), as in Bouncy Castle's OAEPWithSHA3-512AndMGF1Padding. The cast:
    # the stubs' HashLike protocol wants ``new(data=None)`` with a default, which the module has and its stub omits.
    from Cryptodome.Cipher import PKCS1_OAEP
    from Cryptodome.Hash import SHA3_512

    return PKCS1_OAEP.new(key, hashAlgo=cast(Any, SHA3_512), randfunc=random_bytes)


@dataclass(frozen=True, slots=True, eq=False)
class KeyRing:
    """Key pairs by id, and the one that wraps new data keys."""

    active_key_pair_id: str
    key_pairs: Mapping[str, RsaKeyPair]

    def __post_init__(self) -> None:
        for key_pair_id in self.key_pairs:
            check_key_pair_id(key_pair_id)
        if self.active_key_pair_id not in self.key_pairs:
            # Aiven's check, with Aiven's message.
            raise InvalidArgument(f"Encryption key '{self.active_key_pair_id}' must be provided")
        object.__setattr__(self, "key_pairs", types.MappingProxyType(dict(self.key_pairs)))

    def wrap(self, data_key: bytes, *, random_bytes: Callable[[int], bytes] | None = None) -> EncryptedDataKey:
        """``data_key`` wrapped with the active key pair (OAEP draws from ``random_bytes``, or the OS)."""
        public = self.key_pairs[self.active_key_pair_id].public_key
        try:
            encrypted = _oaep(public, random_bytes).encrypt(data_key)
        except ValueError as exc:
            raise InvalidArgument(f"a {len(data_key)}-byte data key does not fit {RSA_TRANSFORMATION}") from exc
        return EncryptedDataKey(self.active_key_pair_id, encrypted)

    def unwrap(self, encrypted: EncryptedDataKey) -> bytes:
        """The data key, unwrapped with the key pair the manifest names."""
        pair = self.key_pairs.get(encrypted.key_pair_id)
        if pair is None or pair.private_key is None:
            held = "is not in the key ring" if pair is None else "has no private key here"
            raise UnknownKeyPair(f"the data key was wrapped with key pair {encrypted.key_pair_id!r}, which {held}")
        try:
            return _oaep(pair.private_key, None).decrypt(encrypted.encrypted_key)
        except (ValueError, TypeError) as exc:
            raise SegmentFormatError(
                f"the data key wrapped with key pair {encrypted.key_pair_id!r} does not unwrap ({RSA_TRANSFORMATION})"
            ) from exc
