"""Our remote log metadata record schemas hold everything Kafka's hold, read from Kafka's own files.

The reference is the copy of Kafka's schema files in ``golden/kafka/`` (``SOURCE.md`` names path and commit), read
here as plain JSON. For each record: the same apiKey, type, valid and flexible versions; every Kafka field, at every
depth, with the same name, type, versions, nullable versions, tag, tagged versions and default, and Kafka's
untagged fields in Kafka's order (their order is the encoding). Ours may add fields only as tagged fields, on tags
Kafka's schema does not use at any version.

``python -m tests.orchestrator.protocol.test_kafka_rlmm_schemas`` rewrites ``golden/kafka/COMPARISON.md``, the
table of Kafka's fields against ours per record and version; a test fails when it is stale.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.protocol.schema import FieldSpec, MessageSchema, Versions, load_schemas
from tests.support.kafka_json_serde import in_versions, load_schema

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("golden") / "kafka"
COMPARISON = GOLDEN / "COMPARISON.md"
RECORDS = (
    "RemoteLogSegmentMetadataRecord",
    "RemoteLogSegmentMetadataUpdateRecord",
    "RemotePartitionDeleteMetadataRecord",
)
#: Versions probed when comparing two version ranges (every range here is open-ended or within 0-1).
HORIZON = range(8)


def kafka(name: str) -> dict[str, Any]:
    return load_schema(GOLDEN / f"{name}.json")


def ours(name: str) -> MessageSchema:
    return load_schemas()[name]


def kafka_set(spec: str | None) -> frozenset[int]:
    return frozenset(v for v in HORIZON if in_versions(spec, v))


def our_set(versions: Versions) -> frozenset[int]:
    return frozenset(v for v in HORIZON if v in versions)


@dataclass(frozen=True)
class Layout:
    """What of a field decides its encoding and its value when absent."""

    type: str
    versions: frozenset[int]
    nullable: frozenset[int]
    tagged: frozenset[int]
    tag: int | None
    default: str | None

    def describe(self, version: int) -> str:
        parts = [self.type]
        if version in self.nullable:
            parts.append("nullable")
        if version in self.tagged:
            parts.append(f"tag {self.tag}")
        if self.default is not None:
            parts.append(f"default {self.default}")
        return ", ".join(parts)


def kafka_layout(field: dict[str, Any]) -> Layout:
    return Layout(
        field["type"],
        kafka_set(field["versions"]),
        kafka_set(field.get("nullableVersions")),
        kafka_set(field.get("taggedVersions")),
        field.get("tag"),
        field.get("default"),
    )


def our_layout(field: FieldSpec) -> Layout:
    return Layout(
        field.type,
        our_set(field.versions),
        our_set(field.nullable_versions),
        our_set(field.tagged_versions),
        field.tag,
        field.default,
    )


def compare_fields(theirs: list[dict[str, Any]], mine: tuple[FieldSpec, ...], path: str) -> None:
    by_name = {f.name: f for f in mine}
    for k in theirs:
        where = f"{path}{k['name']}"
        assert k["name"] in by_name, f"{where}: Kafka's field is missing from ours"
        f = by_name[k["name"]]
        assert our_layout(f) == kafka_layout(k), where
        compare_fields(k.get("fields", []), f.fields, f"{where}.")
    untagged_theirs = [k["name"] for k in theirs if "tag" not in k]
    untagged_mine = [f.name for f in mine if f.tag is None]
    assert untagged_mine == untagged_theirs, f"{path or 'top level'}: untagged fields differ or are out of order"
    kafka_tags = {k["tag"] for k in theirs if "tag" in k}
    for f in mine:
        if f.name in {k["name"] for k in theirs}:
            continue
        where = f"{path}{f.name}"
        assert f.tag is not None, f"{where}: a field of ours must be tagged"
        assert our_set(f.tagged_versions) == our_set(f.versions), f"{where}: tagged in every version it exists"
        assert f.tag not in kafka_tags, f"{where}: tag {f.tag} is Kafka's"


@pytest.mark.parametrize("name", RECORDS)
def test_our_schema_has_every_field_kafka_defines_with_the_same_layout(name: str) -> None:
    theirs, mine = kafka(name), ours(name)
    assert mine.api_key == theirs["apiKey"]
    assert mine.type == theirs["type"]
    assert our_set(mine.valid_versions) == kafka_set(theirs["validVersions"])
    assert our_set(mine.flexible_versions) == kafka_set(theirs["flexibleVersions"])
    compare_fields(theirs["fields"], mine.fields, "")


@pytest.mark.parametrize("name", RECORDS)
def test_our_only_additions_are_the_tiered_epoch_on_a_tag_far_from_kafkas(name: str) -> None:
    kafka_names = {k["name"] for k in kafka(name)["fields"]}
    extra = [f for f in ours(name).fields if f.name not in kafka_names]
    assert [(f.name, f.tag, f.default) for f in extra] == [("TieredEpoch", 10950, "-1")]


def test_the_reference_files_are_kafkas_versions_0_and_1() -> None:
    assert {name: kafka(name)["validVersions"] for name in RECORDS} == dict.fromkeys(RECORDS, "0-1")
    assert kafka("RemoteLogSegmentMetadataSnapshotRecord")["apiKey"] == 3


def test_a_missing_kafka_field_or_a_moved_tag_is_caught() -> None:
    """The comparison itself bites: a schema that lost a field, or kept ours on Kafka's tag, fails it."""
    theirs = kafka("RemoteLogSegmentMetadataUpdateRecord")["fields"]
    mine = ours("RemoteLogSegmentMetadataUpdateRecord").fields
    with pytest.raises(AssertionError, match="EndOffset"):
        compare_fields(theirs, tuple(f for f in mine if f.name != "EndOffset"), "")
    legacy = tuple(replace(f, tag=0) if f.name == "TieredEpoch" else f for f in mine)
    with pytest.raises(AssertionError, match="tag 0 is Kafka's"):
        compare_fields(theirs, legacy, "")


def _rows(theirs: list[dict[str, Any]], mine: tuple[FieldSpec, ...], version: int, path: str) -> list[list[str]]:
    rows = []
    kafka_by_name = {k["name"]: k for k in theirs}
    mine_by_name = {f.name: f for f in mine}
    names = [k["name"] for k in theirs] + [f.name for f in mine if f.name not in kafka_by_name]
    for name in names:
        k, f = kafka_by_name.get(name), mine_by_name.get(name)
        k_layout = kafka_layout(k) if k is not None and version in kafka_set(k["versions"]) else None
        f_layout = our_layout(f) if f is not None and version in f.versions else None
        if k_layout is None and f_layout is None:
            continue
        kafka_text = "—" if k_layout is None else k_layout.describe(version)
        our_text = "—" if f_layout is None else f_layout.describe(version)
        verdict = "same" if kafka_text == our_text else ("ours only" if k_layout is None else "DIFFERENT")
        rows.append([f"{path}{name}", kafka_text, our_text, verdict])
        if k is not None and f is not None and f.fields:
            rows += _rows(k.get("fields", []), f.fields, version, f"{path}{name}.")
    return rows


def comparison_table() -> str:
    out = [
        "# Kafka's remote log metadata record fields against ours",
        "",
        "Generated by `python -m tests.orchestrator.protocol.test_kafka_rlmm_schemas` from `golden/kafka/*.json`",
        "(Kafka's, see SOURCE.md) and `orchestrator/protocol/schemas/` (ours). Nested fields are dotted.",
    ]
    for name in RECORDS:
        theirs, mine = kafka(name), ours(name)
        for version in sorted(kafka_set(theirs["validVersions"])):
            out += ["", f"## {name} (apiKey {theirs['apiKey']}), version {version}", ""]
            out += ["| field | Kafka | ours | |", "| --- | --- | --- | --- |"]
            out += [f"| {' | '.join(row)} |" for row in _rows(theirs["fields"], mine.fields, version, "")]
    return "\n".join(out) + "\n"


def test_the_comparison_table_is_current_and_shows_no_difference() -> None:
    table = comparison_table()
    assert "DIFFERENT" not in table
    assert COMPARISON.read_text(encoding="utf-8") == table, (
        "run python -m tests.orchestrator.protocol.test_kafka_rlmm_schemas"
    )


if __name__ == "__main__":
    COMPARISON.write_text(comparison_table(), encoding="utf-8")
    print(COMPARISON.read_text(encoding="utf-8"))
    sys.exit(0)
