"""A second, independent implementation of Aiven's segment format, written only from the format, for the tests.

It imports nothing of ``remote_storage.segment_format``: it parses the manifest with :mod:`json`, unpacks a
variable chunk index itself, unwraps the data key with textbook RSA and its own RSAES-OAEP decoding over SHA3-512
(RFC 8017 §7.1; the library uses pycryptodomex), decrypts with ``cryptography``'s AES-GCM and decompresses with
``zstandard`` directly. Its writer builds the three objects the same way in reverse, with the manifest's members in
another order than Aiven writes them (a reader must not care). So the library and this module agree only if both
follow the format as Aiven's sources define it (paths and commit in ``tests/remote_storage/golden/aiven/``).

Not for production: textbook RSA here is not constant time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from typing import Any

import zstandard
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

IV, TAG = 12, 16
HASH_LEN = 64  # SHA3-512
INDEX_NAMES = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")


# -- RSAES-OAEP with SHA3-512 for the hash and for MGF1, empty label ------------------------------------------------


def _mgf1(seed: bytes, length: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return out[:length]


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def oaep_unwrap(private_key: RSAPrivateKey, ciphertext: bytes) -> bytes:
    numbers = private_key.private_numbers()
    n = numbers.public_numbers.n
    k = (n.bit_length() + 7) // 8
    c = int.from_bytes(ciphertext, "big")
    # m = c^d mod n, by the Chinese remainder theorem (RFC 8017 §5.1.2).
    m1, m2 = pow(c, numbers.dmp1, numbers.p), pow(c, numbers.dmq1, numbers.q)
    encoded = (m2 + numbers.q * (numbers.iqmp * (m1 - m2) % numbers.p)).to_bytes(k, "big")
    masked_seed, masked_db = encoded[1 : 1 + HASH_LEN], encoded[1 + HASH_LEN :]
    seed = _xor(masked_seed, _mgf1(masked_db, HASH_LEN))
    db = _xor(masked_db, _mgf1(seed, k - HASH_LEN - 1))
    label_hash, rest = db[:HASH_LEN], db[HASH_LEN:].lstrip(b"\x00")
    if encoded[0] != 0 or label_hash != hashlib.sha3_512(b"").digest() or not rest.startswith(b"\x01"):
        raise ValueError("OAEP decoding error")
    return rest[1:]


def oaep_wrap(public_key: RSAPublicKey, message: bytes) -> bytes:
    numbers = public_key.public_numbers()
    k = (numbers.n.bit_length() + 7) // 8
    padding = b"\x00" * (k - len(message) - 2 * HASH_LEN - 2)
    db = hashlib.sha3_512(b"").digest() + padding + b"\x01" + message
    seed = os.urandom(HASH_LEN)
    masked_db = _xor(db, _mgf1(seed, len(db)))
    masked_seed = _xor(seed, _mgf1(masked_db, HASH_LEN))
    encoded = b"\x00" + masked_seed + masked_db
    return pow(int.from_bytes(encoded, "big"), numbers.e, numbers.n).to_bytes(k, "big")


# -- the variable chunk index's sizes ------------------------------------------------------------------------------


def unpack_sizes(packed: bytes) -> list[int]:
    (count,) = struct.unpack_from(">i", packed, 0)
    if count == 0:
        return []
    if count == 1:
        return [struct.unpack_from(">i", packed, 4)[0]]
    base, width = struct.unpack_from(">ib", packed, 4)
    values = [base + int.from_bytes(packed[9 + i * width : 9 + (i + 1) * width], "big") for i in range(count - 1)]
    return [*values, struct.unpack_from(">i", packed, 9 + (count - 1) * width)[0]]


def pack_sizes(values: list[int]) -> bytes:
    if len(values) <= 1:
        return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)
    base = min(values[:-1])
    width = max(max((v - base).bit_length() for v in values[:-1]) + 7, 8) // 8
    body = b"".join((v - base).to_bytes(width, "big") for v in values[:-1])
    return struct.pack(">iib", len(values), base, width) + body + struct.pack(">i", values[-1])


def _chunk_spans(index: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(original size, stored position, stored size) of each chunk."""
    chunk, size = index["originalChunkSize"], index["originalFileSize"]
    if index["type"] == "fixed":
        count = -(-size // chunk)
        stored = [index["transformedChunkSize"]] * (count - 1) + [index["finalTransformedChunkSize"]] * (count > 0)
    else:
        stored = unpack_sizes(zstandard.ZstdDecompressor().decompress(base64.b64decode(index["transformedChunks"])))
    originals = [chunk] * (len(stored) - 1) + [size - chunk * (len(stored) - 1)] * (len(stored) > 0)
    spans, position = [], 0
    for original, length in zip(originals, stored, strict=True):
        spans.append((original, position, length))
        position += length
    return spans


# -- reading ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadBack:
    segment: bytes
    indexes: dict[str, bytes | None]
    manifest: dict[str, Any]


def read_objects(objects: dict[str, bytes], private_keys: dict[str, RSAPrivateKey]) -> ReadBack:
    """The segment and its indexes from a bucket-like dict holding ``log``, ``indexes`` and ``rsm-manifest``."""
    manifest = json.loads(objects["rsm-manifest"])
    assert manifest["version"] == "1"
    aes = aad = None
    if manifest.get("encryption") is not None:
        key_id, _, wrapped = manifest["encryption"]["dataKey"].partition(":")
        aes = AESGCM(oaep_unwrap(private_keys[key_id], base64.b64decode(wrapped)))
        aad = base64.b64decode(manifest["encryption"]["aad"])

    def open_blob(blob: bytes) -> bytes:
        return blob if aes is None else aes.decrypt(blob[:IV], blob[IV:], aad)

    log, parts = objects["log"], []
    for original, position, length in _chunk_spans(manifest["chunkIndex"]):
        chunk = open_blob(log[position : position + length])
        if manifest["compression"]:
            chunk = zstandard.ZstdDecompressor().decompress(chunk)
        assert len(chunk) == original
        parts.append(chunk)
    indexes: dict[str, bytes | None] = {}
    for name in INDEX_NAMES:
        entry = manifest["segmentIndexes"][name]
        if entry is None:
            indexes[name] = None
        else:
            stored = objects["indexes"][entry["position"] : entry["position"] + entry["size"]]
            indexes[name] = open_blob(stored) if stored else b""
    return ReadBack(b"".join(parts), indexes, manifest)


# -- writing ---------------------------------------------------------------------------------------------------------


def write_objects(
    segment: bytes,
    indexes: dict[str, bytes | None],
    *,
    chunk_size: int,
    compression: bool,
    public_key: tuple[str, RSAPublicKey] | None,
    metadata: dict[str, Any],
) -> dict[str, bytes]:
    """The three objects of a segment, built from the format alone."""
    aes = aad = None
    encryption = None
    if public_key is not None:
        data_key, aad = os.urandom(32), os.urandom(32)
        aes = AESGCM(data_key)
        wrapped = base64.b64encode(oaep_wrap(public_key[1], data_key)).decode()
        encryption = {"aad": base64.b64encode(aad).decode(), "dataKey": f"{public_key[0]}:{wrapped}"}

    def seal(blob: bytes) -> bytes:
        if aes is None:
            return blob
        iv = os.urandom(IV)
        return iv + aes.encrypt(iv, blob, aad)

    chunks = [segment[i : i + chunk_size] for i in range(0, len(segment), chunk_size)]
    stored = [seal(zstandard.ZstdCompressor().compress(c) if compression else c) for c in chunks]
    if compression and stored:
        packed = zstandard.ZstdCompressor(write_content_size=True).compress(pack_sizes([len(s) for s in stored]))
        chunk_index: dict[str, Any] = {"transformedChunks": base64.b64encode(packed).decode(), "type": "variable"}
    else:
        fixed = chunk_size + (IV + TAG if aes is not None else 0)
        chunk_index = {"type": "fixed", "finalTransformedChunkSize": len(stored[-1]) if stored else 0}
        chunk_index["transformedChunkSize"] = fixed
    chunk_index |= {"originalFileSize": len(segment), "originalChunkSize": chunk_size}

    index_body, entries = b"", {}
    for name in INDEX_NAMES:
        contents = indexes.get(name)
        if contents is None:
            entries[name] = None
            continue
        blob = seal(contents) if contents else b""
        entries[name] = {"size": len(blob), "position": len(index_body)}
        index_body += blob
    manifest: dict[str, Any] = {
        "compression": compression,
        "remoteLogSegmentMetadata": metadata,
        "segmentIndexes": entries,
        "chunkIndex": chunk_index,
        "version": "1",
    }
    if encryption is not None:
        manifest["encryption"] = encryption
    return {"log": b"".join(stored), "indexes": index_body, "rsm-manifest": json.dumps(manifest).encode()}
