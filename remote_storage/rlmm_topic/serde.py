"""A remote log metadata record as a ``__remote_log_metadata`` value, framed as Kafka's ``RemoteLogMetadataSerde``.

Kafka (``AbstractApiMessageSerde``) writes a value as: unsigned varint frame version (1), unsigned varint apiKey
(0 RemoteLogSegmentMetadataRecord, 1 RemoteLogSegmentMetadataUpdateRecord, 2 RemotePartitionDeleteMetadataRecord),
unsigned varint record version, then the record's flexible body. The key is null. Our store frames its records
the same way (:mod:`orchestrator.metadata.records`), but :func:`encode_value` always writes from the decoded
fields, at the version the topic is written at: a record stored before TieredEpoch moved to tag 10950 goes out
with it there, never on the tag Kafka's version-1 readers would refuse.

Invariants:
* ``decode_value(encode_value(r, version=v))`` holds the same fields as ``r`` at version ``v``, for v in 0 and 1.
* Decoding raises :class:`~orchestrator.errors.ProtocolError` and nothing else: an apiKey this build does not know
  (Kafka's 3, the snapshot record, never travels in the topic) is :class:`UnknownRecordType` naming it, a version
  it does not know :class:`UnknownRecordVersion` naming both; like Kafka, bytes after the body are an error.
* Moving a record to a version that lacks one of its set fields (a BrokerLeaderEpoch down to version 0) raises
  :class:`~orchestrator.errors.UnsupportedVersion` when encoded, never drops the value silently.
"""

from __future__ import annotations

from orchestrator.metadata.records import (
    FRAME_VERSION,
    MetadataRecord,
    UnknownRecordType,
    UnknownRecordVersion,
    decode_record,
    is_rlmm_type,
    record_schema_by_name,
)
from orchestrator.protocol import codec
from remote_storage.rlmm_topic.layout import DEFAULT_RECORD_VERSION

__all__ = ["KEY", "UnknownRecordType", "UnknownRecordVersion", "at_version", "decode_value", "encode_value"]

#: Kafka writes every ``__remote_log_metadata`` record with a null key.
KEY: None = None


def encode_value(record: MetadataRecord, *, version: int = DEFAULT_RECORD_VERSION) -> bytes:
    """The topic value of an RLMM record, written at ``version`` (fields it adds at their defaults; a set field it
    lacks raises UnsupportedVersion)."""
    if not is_rlmm_type(record.name):
        raise ValueError(f"{record.name} is not a remote log metadata record")
    schema = record_schema_by_name(record.name)
    assert schema.api_key is not None
    out = bytearray()
    for n in (FRAME_VERSION, schema.api_key, version):
        codec.write_uvarint(n, out)
    codec.encode_into(schema, version, record.fields, out)
    return bytes(out)


def decode_value(value: bytes | bytearray | memoryview) -> MetadataRecord:
    """An RLMM record from a topic value (raises ProtocolError, see the module docstring)."""
    return decode_record(value, rlmm=True)


def at_version(record: MetadataRecord, version: int) -> MetadataRecord:
    """``record`` as a reader of the topic written at ``version`` sees it."""
    if record.version == version:
        return record
    return decode_value(encode_value(record, version=version))
