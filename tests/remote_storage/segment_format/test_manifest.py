"""The manifest against Aiven's SegmentManifestV1SerdeTest, and what the reader refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.ids import Uuid
from remote_storage.segment_format.chunk_index import FixedSizeChunkIndex, VariableSizeChunkIndex
from remote_storage.segment_format.encryption import DataKeyAndAad
from remote_storage.segment_format.errors import SegmentFormatError, UnknownKeyPair
from remote_storage.segment_format.json_text import dumps
from remote_storage.segment_format.kafka_metadata import RemoteLogSegmentMetadata
from remote_storage.segment_format.key_ring import EncryptedDataKey, KeyRing
from remote_storage.segment_format.manifest import (
    SegmentEncryptionMetadata,
    SegmentManifestV1,
    chunk_transforms,
    manifest_from_json,
    manifest_to_json,
    unwrap_encryption,
    wrap_encryption,
)
from remote_storage.segment_format.segment_indexes import IndexRange, SegmentIndexes
from tests.remote_storage.segment_format.golden import KEY_PAIR_ID, load_golden

pytestmark = pytest.mark.unit

GOLDEN = load_golden("segment_manifest_v1_serde_test.json")
INPUTS = GOLDEN["inputs"]
CASES = {case["name"]: case for case in GOLDEN["cases"]}


def _metadata() -> RemoteLogSegmentMetadata:
    m = INPUTS["remoteLogSegmentMetadata"]
    return RemoteLogSegmentMetadata(
        topic_id=Uuid.from_string(m["topicId"]),
        topic=m["topic"],
        partition=m["partition"],
        segment_id=Uuid.from_string(m["segmentId"]),
        start_offset=m["startOffset"],
        end_offset=m["endOffset"],
        max_timestamp_ms=m["maxTimestampMs"],
        broker_id=m["brokerId"],
        event_timestamp_ms=m["eventTimestampMs"],
        segment_leader_epochs=tuple((int(e), o) for e, o in m["segmentLeaderEpochs"].items()),
    )


def _indexes(with_transaction: bool) -> SegmentIndexes:
    sizes = INPUTS["segmentIndexSizes"]["withTransaction" if with_transaction else "withoutTransaction"]
    positions = [sum(sizes[:i]) for i in range(len(sizes))]
    ranges = [IndexRange(p, s) for p, s in zip(positions, sizes, strict=True)]
    return SegmentIndexes(*ranges[:4], transaction=ranges[4] if with_transaction else None)


def _manifest(case: dict[str, Any], encryption: SegmentEncryptionMetadata | None = None) -> SegmentManifestV1:
    index = INPUTS["chunkIndex"]
    return SegmentManifestV1(
        chunk_index=FixedSizeChunkIndex(
            index["originalChunkSize"],
            index["originalFileSize"],
            index["transformedChunkSize"],
            index["finalTransformedChunkSize"],
        ),
        segment_indexes=_indexes(case["transaction"]),
        compression=False,
        encryption=encryption,
        remote_log_segment_metadata=_metadata(),
    )


@pytest.mark.parametrize("name", ["withoutEncryption", "withoutTxnIndex"])
def test_a_manifest_without_encryption_is_written_byte_for_byte_as_aiven_writes_it(name: str) -> None:
    case = CASES[name]
    manifest = _manifest(case)
    assert manifest_to_json(manifest) == case["expected"]
    assert manifest_from_json(case["expected"]) == manifest


def test_an_encrypted_manifest_is_aivens_text_once_its_random_wrapped_key_is_set_aside(key_ring: KeyRing) -> None:
    case = CASES["withEncryption"]
    key = DataKeyAndAad(bytes(INPUTS["dataKey"]), bytes(INPUTS["aad"]))
    manifest = _manifest(case, wrap_encryption(key, key_ring))
    text = manifest_to_json(manifest)

    # As Aiven's test does: read the text as a tree, drop encryption.dataKey, write the tree again, compare.
    tree = json.loads(text)
    data_key_text = tree["encryption"].pop("dataKey")
    assert dumps(tree) == case["expectedWithoutDataKey"]

    key_pair_id, _, wrapped = data_key_text.partition(":")
    assert key_pair_id == INPUTS["keyPairId"] == KEY_PAIR_ID
    assert key_ring.unwrap(EncryptedDataKey.from_text(data_key_text)) == key.data_key
    assert wrapped  # standard base64 of the RSA ciphertext, checked by from_text above

    read = manifest_from_json(text)
    assert read == manifest
    assert read.encryption is not None
    assert unwrap_encryption(read.encryption, key_ring) == key


def test_the_member_order_of_a_manifest_does_not_matter_to_the_reader() -> None:
    case = CASES["withoutTxnIndex"]
    reordered = json.dumps(dict(reversed(list(json.loads(case["expected"]).items()))))
    assert manifest_from_json(reordered) == _manifest(case)


def test_a_manifest_with_a_variable_chunk_index_and_compression_round_trips() -> None:
    manifest = SegmentManifestV1(
        chunk_index=VariableSizeChunkIndex(100, 250, (10, 20, 30)),
        segment_indexes=_indexes(True),
        compression=True,
    )
    text = manifest_to_json(manifest)
    assert '"compression":true' in text
    assert text.endswith('"remoteLogSegmentMetadata":null}')  # Jackson's form for a manifest built without it
    assert manifest_from_json(text) == manifest


def _without(text: str, *path: str) -> str:
    tree = json.loads(text)
    node = tree
    for member in path[:-1]:
        node = node[member]
    del node[path[-1]]
    return json.dumps(tree)


@pytest.mark.parametrize(
    "path",
    [
        ("version",),
        ("chunkIndex",),
        ("segmentIndexes",),
        ("compression",),
        ("segmentIndexes", "offset"),
        ("segmentIndexes", "leaderEpoch"),
        ("segmentIndexes", "transaction"),
        ("segmentIndexes", "timestamp", "size"),
        ("chunkIndex", "originalFileSize"),
    ],
    ids=".".join,
)
def test_a_manifest_missing_a_required_member_is_refused_naming_it(path: tuple[str, ...]) -> None:
    with pytest.raises(SegmentFormatError, match=path[-1]):
        manifest_from_json(_without(CASES["withoutEncryption"]["expected"], *path))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"version":"2"}', "only '1'"),
        ('{"version":1}', "version is not a string"),
    ],
)
def test_a_manifest_that_is_not_a_version_1_object_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(SegmentFormatError, match=complaint):
        manifest_from_json(text)


@pytest.mark.parametrize(
    ("member", "value", "complaint"),
    [
        ("compression", "false", "compression is not a boolean"),
        ("compression", 0, "compression is not a boolean"),
        ("chunkIndex", {"type": "fixed", "originalChunkSize": 0}, "out of range"),
        ("chunkIndex", {"type": "fixed", "originalChunkSize": True}, "not an integer"),
        ("chunkIndex", {"type": "other", "originalChunkSize": 1, "originalFileSize": 0}, "'other'"),
        ("encryption", {"dataKey": "k:AAECAw==", "aad": "%%"}, "aad is not base64"),
        ("encryption", {"dataKey": "no-colon", "aad": ""}, "Malformed encrypted data key string"),
    ],
)
def test_a_member_of_the_wrong_type_or_value_is_refused(member: str, value: Any, complaint: str) -> None:
    tree = json.loads(CASES["withoutEncryption"]["expected"])
    tree[member] = value
    with pytest.raises(SegmentFormatError, match=complaint):
        manifest_from_json(json.dumps(tree))


def test_an_encrypted_segment_needs_a_key_ring_holding_the_named_key_pair(key_ring: KeyRing) -> None:
    key = DataKeyAndAad(bytes(32), bytes(32))
    manifest = _manifest(CASES["withEncryption"], wrap_encryption(key, key_ring))
    assert chunk_transforms(manifest, key_ring).encryption == key
    with pytest.raises(SegmentFormatError, match="no key ring"):
        chunk_transforms(manifest, None)
    other_ring = KeyRing("other", {"other": key_ring.key_pairs[KEY_PAIR_ID]})
    with pytest.raises(UnknownKeyPair, match=KEY_PAIR_ID):
        chunk_transforms(manifest, other_ring)


def test_unknown_members_are_ignored_when_reading() -> None:
    tree = json.loads(CASES["withoutEncryption"]["expected"])
    tree["segmentFormat"] = "kafka"
    assert manifest_from_json(json.dumps(tree)) == _manifest(CASES["withoutEncryption"])
