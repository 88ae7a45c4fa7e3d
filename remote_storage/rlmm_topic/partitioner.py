"""Which ``__remote_log_metadata`` partition holds a topic-partition's records, as Kafka's
``RemoteLogMetadataTopicPartitioner`` decides it.

Kafka computes ``toPositive(murmur2(bytes)) % partitions`` where ``bytes`` are the 4 big-endian bytes of
``Objects.hash(topicId.getLeastSignificantBits(), topicId.getMostSignificantBits(), partition)``. Written out with
Java's semantics, because every step overflows or depends on sign:

* the topic id's two halves are Java ``long`` values: the first 8 bytes (most significant) and the last 8 (least
  significant) of the 16, each read big-endian as a *signed* 64-bit integer;
* ``Objects.hash(a, b, c)`` is ``Arrays.hashCode``: ``h = 1; h = 31 * h + e.hashCode()`` for each element, in
  32-bit two's complement (overflow wraps); ``Long.hashCode(v)`` is ``(int) (v ^ (v >>> 32))`` (an unsigned shift,
  then the low 32 bits as a signed int) and ``Integer.hashCode(i)`` is ``i``;
* ``murmur2`` is Kafka's ``Utils.murmur2`` (MurmurHash2, seed ``0x9747b28c``), in 32-bit arithmetic;
* ``toPositive(n)`` is ``n & 0x7fffffff`` (not ``abs``: ``Integer.MIN_VALUE`` maps to 0).

Everything is computed on Python ints masked to 32 bits; :func:`java_int` turns an unsigned 32-bit value into the
signed one Java would hold.
"""

from __future__ import annotations

from orchestrator.ids import Uuid

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C


def java_int(value: int) -> int:
    """The low 32 bits of ``value`` as a Java ``int`` (signed, two's complement)."""
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def java_long(value: int) -> int:
    """The low 64 bits of ``value`` as a Java ``long``."""
    value &= _MASK64
    return value - (1 << 64) if value & (1 << 63) else value


def long_hash_code(value: int) -> int:
    """Java's ``Long.hashCode(value)``: ``(int) (value ^ (value >>> 32))``."""
    unsigned = value & _MASK64
    return java_int(unsigned ^ (unsigned >> 32))


def objects_hash(*element_hashes: int) -> int:
    """Java's ``Objects.hash`` over elements whose ``hashCode()`` values are given."""
    h = 1
    for e in element_hashes:
        h = (31 * h + e) & _MASK32
    return java_int(h)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2 of ``data`` as a Java ``int``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    rest = length % 4
    if rest:  # Kafka's switch falls through from case 3 to case 1
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return java_int(h)


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``."""
    return number & 0x7FFFFFFF


def topic_partition_hash(topic_id: Uuid, partition: int) -> int:
    """``Objects.hash(lsb, msb, partition)`` of a topic id and partition, as Kafka computes it."""
    msb = java_long(int.from_bytes(topic_id.raw[:8], "big"))
    lsb = java_long(int.from_bytes(topic_id.raw[8:], "big"))
    return objects_hash(long_hash_code(lsb), long_hash_code(msb), java_int(partition))


def metadata_partition(topic_id: Uuid, partition: int, *, partitions: int) -> int:
    """The ``__remote_log_metadata`` partition of ``topic_id``'s ``partition``, with ``partitions`` partitions."""
    if partitions < 1:
        raise ValueError(f"the remote log metadata topic has at least 1 partition, not {partitions}")
    key = topic_partition_hash(topic_id, partition).to_bytes(4, "big", signed=True)
    return to_positive(murmur2(key)) % partitions
