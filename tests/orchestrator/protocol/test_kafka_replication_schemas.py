"""Our replication RPC schemas (AlterPartition, OffsetForLeaderEpoch) lay out every version we serve as Kafka's do.

The reference is the verbatim copy of Kafka's files in ``golden/kafka/`` (``SOURCE.md`` names path and commit), read
as plain JSON by the independent reader in ``tests/support/kafka_json_serde.py``. We serve a subset of Kafka's
versions, so the comparison is per version we declare: at that version, the fields present (at every depth) are
Kafka's, in Kafka's order, each with the same type, nullability, tag and default; and the version is flexible in
both or in neither. kio's classes (generated from the same files) check the bytes in ``test_crosscheck.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.ids import Uuid
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import FieldSpec, MessageSchema, load_schemas
from tests.support.kafka_json_serde import in_versions, load_schema
from tests.support.schema_values import versions_of

from .test_kafka_rlmm_schemas import GOLDEN

pytestmark = pytest.mark.unit

SERVED = {
    "AlterPartitionRequest": (2, 3),
    "AlterPartitionResponse": (2, 3),
    "OffsetForLeaderEpochRequest": (2, 3, 4),
    "OffsetForLeaderEpochResponse": (2, 3, 4),
}


def kafka(name: str) -> dict[str, Any]:
    return load_schema(GOLDEN / f"{name}.json")


def ours(name: str) -> MessageSchema:
    return load_schemas()[name]


def kafka_fields_at(fields: list[dict[str, Any]], version: int) -> list[tuple[Any, ...]]:
    """(name, type, nullable, tag or None, default, children) of each field present at ``version``."""
    out = []
    for f in fields:
        if not in_versions(f["versions"], version):
            continue
        tagged = in_versions(f.get("taggedVersions"), version)
        default = f.get("default")
        out.append(
            (
                f["name"],
                f["type"],
                in_versions(f.get("nullableVersions"), version),
                f.get("tag") if tagged else None,
                None if default is None else str(default),
                kafka_fields_at(f.get("fields", []), version),
            )
        )
    return out


def our_fields_at(fields: tuple[FieldSpec, ...], version: int) -> list[tuple[Any, ...]]:
    out = []
    for f in fields:
        if version not in f.versions:
            continue
        out.append(
            (
                f.name,
                f.type,
                version in f.nullable_versions,
                f.tag if version in f.tagged_versions else None,
                f.default,
                our_fields_at(f.fields, version),
            )
        )
    return out


@pytest.mark.parametrize("name", sorted(SERVED))
def test_we_declare_the_versions_we_serve_and_kafka_defines_them(name: str) -> None:
    theirs, mine = kafka(name), ours(name)
    assert (mine.api_key, mine.type) == (theirs["apiKey"], theirs["type"])
    assert tuple(versions_of(mine)) == SERVED[name]
    assert all(in_versions(theirs["validVersions"], v) for v in SERVED[name])


@pytest.mark.parametrize(("name", "version"), [(n, v) for n, vs in sorted(SERVED.items()) for v in vs])
def test_every_served_version_has_kafkas_fields_in_kafkas_order_with_kafkas_layout(name: str, version: int) -> None:
    theirs, mine = kafka(name), ours(name)
    assert (version in mine.flexible_versions) == in_versions(theirs["flexibleVersions"], version)
    assert our_fields_at(mine.fields, version) == kafka_fields_at(theirs["fields"], version)


def test_the_comparison_bites_on_a_lost_or_retyped_field() -> None:
    mine = ours("AlterPartitionRequest")
    theirs = kafka_fields_at(kafka("AlterPartitionRequest")["fields"], 3)
    assert our_fields_at(mine.fields[:2], 3) != theirs
    moved = kafka("AlterPartitionRequest")
    moved["fields"][1]["type"] = "int32"  # BrokerEpoch as an int32
    assert our_fields_at(mine.fields, 3) != kafka_fields_at(moved["fields"], 3)


def test_the_api_keys_are_kafkas() -> None:
    assert (ApiKey.ALTER_PARTITION, ApiKey.OFFSET_FOR_LEADER_EPOCH) == (56, 23)


def test_an_alter_partition_request_at_version_3_is_laid_out_byte_by_byte_as_kafka_writes_it() -> None:
    """Golden bytes written by hand from Kafka's schema (flexible: compact arrays, varint lengths, tag sections)."""
    topic_id = bytes(range(16))
    body = {
        "broker_id": 2,
        "broker_epoch": 40,
        "topics": [
            {
                "topic_id": Uuid(topic_id),
                "partitions": [
                    {
                        "partition_index": 1,
                        "leader_epoch": 5,
                        "new_isr_with_epochs": [
                            {"broker_id": 2, "broker_epoch": 40},
                            {"broker_id": 3, "broker_epoch": -1},
                        ],
                        "leader_recovery_state": 0,
                        "partition_epoch": 9,
                    }
                ],
            }
        ],
    }
    expected = (
        (2).to_bytes(4, "big")
        + (40).to_bytes(8, "big")
        + b"\x02"  # one topic (compact array: n + 1)
        + topic_id
        + b"\x02"  # one partition
        + (1).to_bytes(4, "big")
        + (5).to_bytes(4, "big")
        + b"\x03"  # two ISR members
        + (2).to_bytes(4, "big")
        + (40).to_bytes(8, "big")
        + b"\x00"  # the member's tag section
        + (3).to_bytes(4, "big")
        + (-1).to_bytes(8, "big", signed=True)
        + b"\x00"
        + b"\x00"  # leader recovery state
        + (9).to_bytes(4, "big")
        + b"\x00"  # the partition's tag section
        + b"\x00"  # the topic's
        + b"\x00"  # the request's
    )
    schema = ours("AlterPartitionRequest")
    assert codec.encode(schema, 3, body) == expected
    assert codec.decode(schema, 3, expected)["topics"][0]["partitions"][0]["new_isr_with_epochs"][1]["broker_id"] == 3
