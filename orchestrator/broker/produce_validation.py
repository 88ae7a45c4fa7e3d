"""What a Produce request's records must be before a partition's log takes them (Kafka's LogValidator). Pure.

Invariants:

* Records are whole magic-2 record batches, one after the other; anything else is refused and nothing of the
  request's partition is appended (validation happens before the first byte is written):
  - bytes that do not frame or decode (a bad CRC-32C, a truncated batch, a bad varint): CORRUPT_MESSAGE (2);
  - no batch at all or more than one (Produce v3+ carries exactly one batch per partition, as in Kafka), a
    control batch (only a transaction coordinator writes those), a record count or offset
    deltas that disagree with the header (deltas must run 0, 1, 2 ...): INVALID_RECORD (87);
  - a batch larger than the topic's ``max.message.bytes``: MESSAGE_TOO_LARGE (10);
  - a producer id, epoch or sequence (an idempotent producer) or a transactional batch:
    UNSUPPORTED_FOR_MESSAGE_FORMAT (43): this broker keeps no producer state, so it could not deduplicate a retry
    or fence a zombie; refusing is honest where accepting would silently break the producer's guarantee;
  - a compression other than none and gzip: UNSUPPORTED_COMPRESSION_TYPE (76);
  - with CreateTime, a record timestamp further than ``message.timestamp.before.max.ms`` in the past or
    ``message.timestamp.after.max.ms`` in the future: INVALID_TIMESTAMP (32).
* The batches are returned as views into the request's bytes, unchanged: the log assigns offsets (and, for
  LogAppendTime, stamps the time) when it appends them.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import (
    CorruptMessage,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    UnsupportedForMessageFormat,
)
from orchestrator.protocol.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TimestampType,
    decode_batch,
    split_batches,
)


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
    for index, raw in enumerate(split.batches):
        where = f"record batch {index}"
        if len(raw) > policy.max_message_bytes:
            raise MessageTooLarge(
                f"{where} has {len(raw)} bytes, more than the topic's max.message.bytes {policy.max_message_bytes}"
            )
        batch = decode_batch(raw)
        if batch.is_transactional:
            raise UnsupportedForMessageFormat(f"{where} is transactional: this broker serves no transactions")
        if (batch.producer_id, batch.producer_epoch, batch.base_sequence) != (
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
        ):
            raise UnsupportedForMessageFormat(
                f"{where} is from an idempotent producer (producer id {batch.producer_id}): this broker keeps no "
                "producer state; set enable.idempotence=false"
            )
        if batch.is_control:
            raise InvalidRecord(f"{where} is a control batch: only a transaction coordinator writes those")
        deltas = [record.offset_delta for record in batch.records]
        if not deltas or deltas != list(range(len(deltas))) or batch.last_offset_delta != len(deltas) - 1:
            raise InvalidRecord(
                f"{where}: {len(deltas)} record(s) with offset deltas {deltas[:5]}..., last offset delta "
                f"{batch.last_offset_delta}; deltas must run 0, 1, 2 ... up to the last"
            )
        if batch.timestamp_type == TimestampType.CREATE_TIME and not policy.log_append_time:
            lowest = min(batch.timestamp_of(record) for record in batch.records)
            highest = max(batch.timestamp_of(record) for record in batch.records)
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
    return ValidatedRecords(split.batches, count)
