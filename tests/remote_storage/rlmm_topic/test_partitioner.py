"""The ``__remote_log_metadata`` partition of a topic-partition, judged three ways.

* Kafka's own ``Utils.murmur2`` test vectors (``golden/kafka_murmur2_vectors.json``, path and commit inside);
* kafka-python's ``murmur2`` (it returns the hash as an unsigned 32-bit number) on arbitrary bytes;
* a second implementation written here from the MurmurHash2 description and Java's ``int``/``long`` semantics
  through ``ctypes`` fixed-width integers (no shared code with the module under test), on arbitrary ids.

Plus worked examples whose intermediate values are computed by hand in the docstrings.
"""

from __future__ import annotations

import ctypes
import json
import struct
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from remote_storage.rlmm_topic.partitioner import (
    long_hash_code,
    metadata_partition,
    murmur2,
    objects_hash,
    to_positive,
    topic_partition_hash,
)

with warnings.catch_warnings():
    # kafka-python reads its bundled schema files with a deprecated importlib.resources call at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

pytestmark = pytest.mark.unit

VECTORS = json.loads((Path(__file__).with_name("golden") / "kafka_murmur2_vectors.json").read_text(encoding="utf-8"))


# --- the second implementation


def reference_murmur2(data: bytes) -> int:
    """MurmurHash2, 32-bit, seed 0x9747b28c: 4-byte little-endian blocks, then the tail, then the final mix."""
    m = 0x5BD1E995
    h = ctypes.c_uint32(0x9747B28C ^ len(data)).value
    blocks = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: blocks * 4]):
        k = ctypes.c_uint32(k * m).value
        k ^= k >> 24
        k = ctypes.c_uint32(k * m).value
        h = ctypes.c_uint32(h * m).value ^ k
    tail = data[blocks * 4 :]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = ctypes.c_uint32(h * m).value
    h ^= h >> 13
    h = ctypes.c_uint32(h * m).value
    h ^= h >> 15
    return ctypes.c_int32(h).value


def reference_partition(topic_id: Uuid, partition: int, partitions: int) -> int:
    msb, lsb = struct.unpack(">qq", topic_id.raw)

    def long_hash(v: int) -> int:
        u = ctypes.c_uint64(v).value
        return ctypes.c_int32(u ^ (u >> 32)).value

    h = 1
    for element in (long_hash(lsb), long_hash(msb), partition):
        h = ctypes.c_int32(31 * h + element).value
    return (reference_murmur2(struct.pack(">i", h)) & 0x7FFFFFFF) % partitions


# --- murmur2


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["input"][:12])
def test_murmur2_gives_kafkas_own_test_vectors(vector: dict[str, object]) -> None:
    data = str(vector["input"]).encode("ascii")
    assert murmur2(data) == vector["murmur2"]
    assert reference_murmur2(data) == vector["murmur2"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=40))
def test_murmur2_agrees_with_kafka_python_and_the_reference_on_any_bytes(data: bytes) -> None:
    ours = murmur2(data)
    assert ours == reference_murmur2(data)
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= ours < 2**31


# --- Java's hashes


def test_long_hash_code_folds_the_halves_as_java_does() -> None:
    """(int) (v ^ (v >>> 32)): -1 folds to 0; Long.MIN_VALUE to 0x80000000, i.e. Integer.MIN_VALUE."""
    assert long_hash_code(2) == 2
    assert long_hash_code(-1) == 0
    assert long_hash_code(-(2**63)) == -(2**31)
    assert long_hash_code(2**32) == 1
    assert long_hash_code(0x1234_5678_0000_0001) == 0x1234_5679


def test_objects_hash_overflows_as_java_int_arithmetic_does() -> None:
    """Objects.hash(a, b, c) = 31 * (31 * (31 + a) + b) + c, wrapped to 32 bits at every step."""
    assert objects_hash(2, 1, 0) == 31744  # 31 * (31 * 33 + 1)
    # 31 + MIN = -2147483617; * 31 = -66571992127 -> -2147482687; * 31 + 7 = -66571963290 -> -2147453850
    assert objects_hash(-(2**31), 0, 7) == -2147453850


def test_to_positive_masks_the_sign_bit_rather_than_negating() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


# --- the partition


def test_a_worked_example_step_by_step() -> None:
    """Topic id 00..01 00..02: msb 1, lsb 2; partition 0. Objects.hash(2, 1, 0) = 31744 = bytes 00 00 7c 00."""
    topic_id = Uuid(bytes(7) + b"\x01" + bytes(7) + b"\x02")
    assert topic_partition_hash(topic_id, 0) == 31744
    hashed = murmur2(b"\x00\x00\x7c\x00")
    assert hashed == reference_murmur2(b"\x00\x00\x7c\x00")
    assert metadata_partition(topic_id, 0, partitions=50) == to_positive(hashed) % 50 == 30


@pytest.mark.parametrize(
    ("topic_id", "partition", "partitions", "expected"),
    [
        ("AAAAAAAAAAEAAAAAAAAAAg", 0, 50, 30),
        ("__________-AAAAAAAAAAA", 7, 50, 22),  # msb -1, lsb Long.MIN_VALUE: the hash goes through the sign
        ("xX9kP3q1T0uC5cZx2o8y1w", 0, 50, 16),
        ("xX9kP3q1T0uC5cZx2o8y1w", 3, 50, 38),
        ("xX9kP3q1T0uC5cZx2o8y1w", 3, 7, 4),
        ("AAECAwQFBgcICQoLDA0ODw", 2147483647, 50, 37),
    ],
)
def test_kept_vectors(topic_id: str, partition: int, partitions: int, expected: int) -> None:
    tid = Uuid.from_string(topic_id)
    assert metadata_partition(tid, partition, partitions=partitions) == expected
    assert reference_partition(tid, partition, partitions) == expected


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(min_size=16, max_size=16), st.integers(0, 2**31 - 1), st.integers(1, 500))
def test_the_partition_agrees_with_the_reference_for_any_id_partition_and_count(
    raw: bytes, partition: int, partitions: int
) -> None:
    tid = Uuid(raw)
    got = metadata_partition(tid, partition, partitions=partitions)
    assert got == reference_partition(tid, partition, partitions)
    assert 0 <= got < partitions


def test_one_partition_takes_everything_and_zero_is_refused() -> None:
    assert metadata_partition(Uuid.random(), 3, partitions=1) == 0
    with pytest.raises(ValueError):
        metadata_partition(Uuid.random(), 3, partitions=0)
