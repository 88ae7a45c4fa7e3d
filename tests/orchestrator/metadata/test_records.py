"""Record versions and the legacy rule: stores written before TieredEpoch moved to tag 10950 still read.

``golden/legacy_rlmm_records.jsonl`` holds version-0 RLMM records exactly as the code before the move encoded them
(each line names the commit that wrote it): TieredEpoch on tag 1 of RemoteLogSegmentMetadataRecord and on tag 0
of the update and partition-delete records. Decoded today, each keeps its tiered epoch and every other field;
written again, the epoch goes to tag 10950, where a Kafka reader that knows version 1 no longer trips on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ProtocolError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import (
    RLMM_RECORD_VERSION,
    MetadataRecord,
    UnknownRecordType,
    UnknownRecordVersion,
    decode_record,
    encode_record,
    make_record,
    record_schema_by_name,
)
from tests.support import kafka_json_serde as kafka

pytestmark = pytest.mark.unit

LEGACY = Path(__file__).with_name("golden") / "legacy_rlmm_records.jsonl"
KAFKA_SCHEMAS = Path(__file__).parents[1] / "protocol" / "golden" / "kafka"

# The values the legacy records were written with (the same in every line; see each line's "case").
TOPIC_ID = Uuid.from_string("xX9kP3q1T0uC5cZx2o8y1w")
SEGMENT_ID = Uuid.from_string("AAECAwQFBgcICQoLDA0ODw")
TIP = {"name": "orders", "id": TOPIC_ID, "partition": 3}
SID = {"topic_id_partition": TIP, "id": SEGMENT_ID}


def legacy_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in LEGACY.read_text(encoding="utf-8").splitlines()]


def expected_record(case: dict[str, Any]) -> MetadataRecord:
    """The record each legacy line was made from, built with today's code at version 0."""
    label, epoch = case["case"], case["tiered_epoch"]
    if case["record"] == "RemoteLogSegmentMetadataRecord":
        finished = "copy finished" in label
        return make_record(
            "RemoteLogSegmentMetadataRecord",
            0,
            remote_log_segment_id=SID,
            start_offset=100,
            end_offset=199,
            broker_id=2,
            max_timestamp_ms=1_700_000_000_000,
            event_timestamp_ms=1_700_000_000_500,
            segment_leader_epochs=[{"leader_epoch": 4, "offset": 100}, {"leader_epoch": 5, "offset": 150}],
            segment_size_in_bytes=4096,
            custom_metadata=b"\x01\x02" if finished else None,
            remote_log_segment_state=1 if finished else 0,
            txn_index_empty=not finished,
            tiered_epoch=epoch,
        )
    if case["record"] == "RemoteLogSegmentMetadataUpdateRecord":
        state = {"copy finished": 1, "delete finished": 3, "delete started": 2}
        return make_record(
            "RemoteLogSegmentMetadataUpdateRecord",
            0,
            remote_log_segment_id=SID,
            broker_id=2,
            event_timestamp_ms=1_700_000_001_000,
            custom_metadata=None,
            remote_log_segment_state=next(v for k, v in state.items() if k in label),
            tiered_epoch=epoch,
        )
    return make_record(
        "RemotePartitionDeleteMetadataRecord",
        0,
        topic_id_partition=TIP,
        broker_id=1,
        event_timestamp_ms=1_700_000_002_000,
        remote_partition_delete_state=0 if "marked" in label else 2,
        tiered_epoch=epoch,
    )


def test_the_legacy_data_covers_every_record_with_and_without_an_epoch() -> None:
    seen = {(c["record"], c["tiered_epoch"] != -1) for c in legacy_cases()}
    assert seen == {(name, has) for name in {c["record"] for c in legacy_cases()} for has in (True, False)}
    assert len({c["record"] for c in legacy_cases()}) == 3


@pytest.mark.parametrize("case", legacy_cases(), ids=lambda c: c["case"])
def test_a_record_written_before_the_tag_move_reads_back_with_its_tiered_epoch(case: dict[str, Any]) -> None:
    record = decode_record(bytes.fromhex(case["hex"]), rlmm=True)
    assert record == expected_record(case)
    assert record["tiered_epoch"] == case["tiered_epoch"]
    assert "legacy_tiered_epoch" not in record.fields


@pytest.mark.parametrize("case", legacy_cases(), ids=lambda c: c["case"])
def test_a_legacy_record_written_again_carries_its_epoch_on_tag_10950_only(case: dict[str, Any]) -> None:
    legacy = bytes.fromhex(case["hex"])
    again = encode_record(decode_record(legacy, rlmm=True))
    assert decode_record(again, rlmm=True) == decode_record(legacy, rlmm=True)
    schema = kafka.load_schema(KAFKA_SCHEMAS / f"{case['record']}.json")
    _, version, body = kafka.unframe(again)
    _, unknown = kafka.read(schema, version, body)
    epoch = case["tiered_epoch"]
    assert unknown == ({} if epoch == -1 else {10950: epoch.to_bytes(4, "big", signed=True)})
    if epoch == -1:
        assert again == legacy  # nothing tagged of ours: the bytes never changed


@pytest.mark.parametrize("case", [c for c in legacy_cases() if c["tiered_epoch"] != -1], ids=lambda c: c["case"])
def test_the_old_tags_are_ones_a_kafka_reader_of_version_1_schemas_refuses_at_version_0(case: dict[str, Any]) -> None:
    """Why the epoch had to move: Kafka's generated reader rejects a tag its schema gives another version."""
    schema = kafka.load_schema(KAFKA_SCHEMAS / f"{case['record']}.json")
    _, version, body = kafka.unframe(bytes.fromhex(case["hex"]))
    with pytest.raises(ValueError, match=f"is not valid for version {version}"):
        kafka.read(schema, version, body)


def test_a_version_0_record_holding_both_the_old_and_the_new_tag_is_refused() -> None:
    case = next(
        c for c in legacy_cases() if c["record"] == "RemoteLogSegmentMetadataUpdateRecord" and c["tiered_epoch"] == 7
    )
    legacy = bytes.fromhex(case["hex"])
    # The tagged section is last: one tag (0: 4 bytes of 7). Rewrite it with the new tag holding 8 as well.
    assert legacy.endswith(bytes([1, 0, 4, 0, 0, 0, 7]))
    both = legacy[:-7] + bytes([2, 0, 4, 0, 0, 0, 7]) + bytes([0xC6, 0x55, 4, 0, 0, 0, 8])
    with pytest.raises(ProtocolError, match=r"two tiered epochs: 7 .* and 8"):
        decode_record(both, rlmm=True)
    same = legacy[:-7] + bytes([2, 0, 4, 0, 0, 0, 7]) + bytes([0xC6, 0x55, 4, 0, 0, 0, 7])
    assert decode_record(same, rlmm=True)["tiered_epoch"] == 7


def test_the_legacy_rule_reads_version_0_only() -> None:
    v1 = make_record("RemotePartitionDeleteMetadataRecord", 1, topic_id_partition=TIP, broker_leader_epoch=7)
    back = decode_record(encode_record(v1), rlmm=True)
    assert (back["broker_leader_epoch"], back["tiered_epoch"]) == (7, -1)


def test_rlmm_records_are_made_at_version_0_and_cluster_records_at_their_newest() -> None:
    assert RLMM_RECORD_VERSION == 0
    assert make_record("RemotePartitionDeleteMetadataRecord", topic_id_partition=TIP).version == 0
    assert (
        make_record("PartitionRecord", topic_id=TOPIC_ID).version
        == record_schema_by_name("PartitionRecord").valid_versions.hi
    )


def test_an_unknown_record_type_or_version_is_a_typed_error_naming_it() -> None:
    with pytest.raises(UnknownRecordType, match=r"apiKey\) 3") as unknown_type:
        decode_record(bytes([1, 3, 0, 0]), rlmm=True)
    assert (unknown_type.value.api_key, unknown_type.value.rlmm) == (3, True)
    with pytest.raises(UnknownRecordVersion, match=r"RemoteLogSegmentMetadataUpdateRecord \(apiKey 1\) version 2") as v:
        decode_record(bytes([1, 1, 2, 0]), rlmm=True)
    assert (v.value.record_name, v.value.api_key, v.value.version) == ("RemoteLogSegmentMetadataUpdateRecord", 1, 2)
    with pytest.raises(UnknownRecordType, match="unknown metadata record type"):
        decode_record(bytes([1, 0x7F, 0]))
    assert issubclass(UnknownRecordType, ProtocolError) and issubclass(UnknownRecordVersion, ProtocolError)
