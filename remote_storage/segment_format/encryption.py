"""AES-GCM encryption of one chunk (or one index), with a per-segment data key and AAD.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/security/AesEncryptionProvider.java``,
``transform/EncryptionChunkEnumeration.java``, ``transform/DecryptionChunkEnumeration.java`` and
``manifest/SegmentEncryptionMetadataV1.java`` (commit in :mod:`remote_storage.segment_format`).

Each segment gets a fresh 256-bit data key and, drawn separately, 32 bytes of AAD (Aiven draws both as AES-256 keys
and warns never to merge the two draws). Each encrypted blob is laid out as::

    iv (12 bytes, random per blob) || ciphertext (as long as the plaintext) || tag (16 bytes)

that is ``AES/GCM/NoPadding`` with Java's defaults: a 96-bit IV and a 128-bit tag appended to the ciphertext, the
AAD fed before the data. So an encrypted blob is always ``len(plaintext) + 28`` bytes, which keeps a chunk index of
encrypted-only chunks in the fixed kind. Both keys travel in the manifest: the AAD in clear (base64), the data key
wrapped by :mod:`.key_ring`.

Invariants: an IV is never reused with a data key (each blob draws its own from the injected ``random_bytes``);
:func:`decrypt` authenticates before returning anything, and any failure (wrong key or AAD, a flipped bit, a
truncated blob) is one :class:`SegmentFormatError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from orchestrator.errors import InvalidArgument
from remote_storage.segment_format.errors import SegmentFormatError

IV_SIZE = 12  # SegmentEncryptionMetadataV1.IV_SIZE
TAG_SIZE = 16  # AesEncryptionProvider.GCM_TAG_LENGTH, 128 bits
OVERHEAD = IV_SIZE + TAG_SIZE
DATA_KEY_SIZE = 32  # AesEncryptionProvider.KEY_SIZE, 256 bits
AAD_SIZE = 32  # Aiven's AAD is drawn as a second AES-256 key

RandomBytes = Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class DataKeyAndAad:
    """A segment's AES data key and AAD. The key never appears in a repr or a log."""

    data_key: bytes
    aad: bytes

    def __repr__(self) -> str:
        return f"DataKeyAndAad(data_key=<{len(self.data_key)} bytes>, aad=<{len(self.aad)} bytes>)"


def new_data_key_and_aad(random_bytes: RandomBytes = os.urandom) -> DataKeyAndAad:
    """A fresh data key and AAD for one segment (two separate draws, as Aiven insists)."""
    data_key = random_bytes(DATA_KEY_SIZE)
    aad = random_bytes(AAD_SIZE)
    return DataKeyAndAad(data_key, aad)


def encrypted_size(plaintext_size: int) -> int:
    return plaintext_size + OVERHEAD


def _cipher(key: DataKeyAndAad) -> AESGCM:
    try:
        return AESGCM(key.data_key)
    except ValueError as exc:
        raise InvalidArgument(f"an AES data key is 16, 24 or 32 bytes, got {len(key.data_key)}") from exc


def encrypt(plaintext: bytes | memoryview, key: DataKeyAndAad, *, random_bytes: RandomBytes = os.urandom) -> bytes:
    """``iv || ciphertext || tag`` of ``plaintext`` under ``key``, with a fresh IV."""
    iv = random_bytes(IV_SIZE)
    if len(iv) != IV_SIZE:
        raise InvalidArgument(f"random_bytes({IV_SIZE}) returned {len(iv)} bytes")
    return iv + _cipher(key).encrypt(iv, plaintext, key.aad)


def decrypt(blob: bytes | memoryview, key: DataKeyAndAad, *, what: str) -> bytes:
    """The plaintext of an ``iv || ciphertext || tag`` blob; ``what`` names it in errors."""
    if len(blob) < OVERHEAD:
        raise SegmentFormatError(f"{what}: {len(blob)} bytes, shorter than an AES-GCM IV and tag ({OVERHEAD})")
    view = memoryview(blob)
    try:
        return _cipher(key).decrypt(view[:IV_SIZE], view[IV_SIZE:], key.aad)
    except InvalidTag as exc:
        raise SegmentFormatError(f"{what} does not decrypt: wrong data key or AAD, or the bytes were altered") from exc
