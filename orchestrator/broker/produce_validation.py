"""What a Produce request's records must be before a partition's log takes them (Kafka's LogValidator). Pure.

Invariants:

* Records are whole magic-2 record batches, one after the other; anything else is refused and nothing of the
  request's partition is appended (validation happens before the first byte is written):
  - bytes that do not frame or decode (a bad CRC-32C, a truncated batch, a bad varint): CORRUPT_MESSAGE (2);
  - no batch at all or more than one (Produce v3+ carries exactly one batch per partition, as in Kafka), a
    control batch (only a transaction coordinator writes those), a record count or offset
    deltas that disagree with the header (deltas must run 0, 1, 2 ...): INVALID_RECORD (87);
  - a batch larger than the topic's ``max.message.bytes``: MESSAGE_TOO_LARGE (10);
  - a transactional batch: UNSUPPORTED_FOR_MESSAGE_FORMAT (43): no transaction coordinator runs here, so nothing
    could commit or abort it; an idempotent batch (producer id, epoch, sequence) is served, and one naming a
    producer id without an epoch or sequence at or above 0 is INVALID_RECORD;
  - a compression other than none and gzip: UNSUPPORTED_COMPRESSION_TYPE (76);
  - with CreateTime, a record timestamp further than ``message.timestamp.before.max.ms`` in the past or
    ``message.timestamp.after.max.ms`` in the future: INVALID_TIMESTAMP (32).
* A producer may not set the LogAppendTime bit (INVALID_TIMESTAMP, as in Kafka): only the broker stamps it.
* The batches are returned as views into the request's bytes, unchanged, except a CreateTime batch whose header
  ``maxTimestamp`` is not its records' largest timestamp: that one is rewritten (CRC recomputed), as Kafka's
  validator does, since the log indexes and searches by it. The log assigns offsets (and, for LogAppendTime,
  stamps the time) when it appends them.
* A record timestamp of -1 (none) is exempt from the timestamp bounds, as in Kafka.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from orchestrator.errors import (
    CorruptMessage,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    UnsupportedForMessageFormat,
)
from orchestrator.protocol.record_batch import (
    NO_PRODUCER_ID,
    TimestampType,
    decode_batch,
    split_batches,
    with_max_timestamp,
)

NO_TIMESTAMP = -1
_OFFSET_DELTA = operator.attrgetter("offset_delta")
_TIMESTAMP_DELTA = operator.attrgetter("timestamp_delta")


@dataclass(frozen=True, slots=True)
class ProducePolicy:
    """A topic's configs that decide what its log accepts."""

    max_message_bytes: int = 1048588
    log_append_time: bool = False
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ValidatedRecords:
    batches: tuple[memoryview, ...]
    record_count: int


def validate_records(records: bytes | None, policy: ProducePolicy, *, now_ms: int) -> ValidatedRecords:
    """The batches of one partition's produced ``records``, or the error that refuses them (module docstring)."""
    if not records:
        raise InvalidRecord("the produce request carries no record batch for this partition")
    split = split_batches(records)
    if split.partial_size:
        raise CorruptMessage(f"the records end inside a record batch ({split.partial_size} bytes of it)")
    if not split.batches:
        raise InvalidRecord("the produce request carries no record batch for this partition")
    if len(split.batches) > 1:
        raise InvalidRecord(f"{len(split.batches)} record batches for one partition: Produce v3+ carries exactly one")
    count = 0
    batches: list[memoryview] = []
    for index, raw in enumerate(split.batches):
        where = f"record batch {index}"
        if len(raw) > policy.max_message_bytes:
            raise MessageTooLarge(
                f"{where} has {len(raw)} bytes, more than the topic's max.message.bytes {policy.max_message_bytes}"
            )
        batch = decode_batch(raw)
        if batch.is_transactional:
            raise UnsupportedForMessageFormat(f"{where} is transactional: this broker serves no transactions")
        if batch.producer_id != NO_PRODUCER_ID and (batch.producer_epoch < 0 or batch.base_sequence < 0):
            raise InvalidRecord(
                f"{where} names producer id {batch.producer_id} with epoch {batch.producer_epoch} and base sequence "
                f"{batch.base_sequence}: an idempotent batch needs both at or above 0"
            )
        if batch.is_control:
            raise InvalidRecord(f"{where} is a control batch: only a transaction coordinator writes those")
        deltas = list(map(_OFFSET_DELTA, batch.records))  # per record, but in C: these loops run for every record
        if not deltas or deltas != list(range(len(deltas))) or batch.last_offset_delta != len(deltas) - 1:
            raise InvalidRecord(
                f"{where}: {len(deltas)} record(s) with offset deltas {deltas[:5]}..., last offset delta "
                f"{batch.last_offset_delta}; deltas must run 0, 1, 2 ... up to the last"
            )
        if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
            raise InvalidTimestamp(f"{where} says LogAppendTime: only the broker stamps that, not a producer")
        base = batch.base_timestamp  # CreateTime (LogAppendTime was refused): each record's is base + its delta
        stamp_deltas = list(map(_TIMESTAMP_DELTA, batch.records))
        true_max = base + max(stamp_deltas)
        if true_max != batch.max_timestamp and not policy.log_append_time:  # the log indexes and searches by it
            raw = memoryview(with_max_timestamp(raw, true_max))
        known = stamp_deltas
        if NO_TIMESTAMP - base in stamp_deltas:  # a record without a timestamp is exempt
            known = [d for d in stamp_deltas if d != NO_TIMESTAMP - base]
        if known and not policy.log_append_time:
            lowest, highest = base + min(known), base + max(known)
            if now_ms - lowest > policy.timestamp_before_max_ms:
                raise InvalidTimestamp(
                    f"{where} has timestamp {lowest}, more than message.timestamp.before.max.ms "
                    f"({policy.timestamp_before_max_ms}) before the broker's clock ({now_ms})"
                )
            if highest - now_ms > policy.timestamp_after_max_ms:
                raise InvalidTimestamp(
                    f"{where} has timestamp {highest}, more than message.timestamp.after.max.ms "
                    f"({policy.timestamp_after_max_ms}) after the broker's clock ({now_ms})"
                )
        count += len(deltas)
        batches.append(raw)
    return ValidatedRecords(tuple(batches), count)
