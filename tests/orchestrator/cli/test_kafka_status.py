"""A topic's tiering as ``--compat kafka`` derives it from Kafka's configs and the metadata topic, and the JSON
that keeps ``tiering status``'s keys (no epoch, no pending brokers: Kafka has neither)."""

from __future__ import annotations

import pytest

from orchestrator.cli.kafka_status import KafkaTopicStatus, change_message, derive_state, stalled_message
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from remote_storage.rlmm_topic.progress import SegmentEntry, TopicSegments

pytestmark = pytest.mark.unit

TID = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
SEG = [Uuid.from_string(f"AAAAAAAAAAAAAAAAAAAA{c}A") for c in "BCD"]


def segments(*states: SegmentState) -> TopicSegments:
    return TopicSegments(TID, {SEG[i]: SegmentEntry(i % 2, s, 100) for i, s in enumerate(states)})


ON = {"remote.storage.enable": "true"}
RETAIN = ON | {"remote.log.copy.disable": "true"}
DELETE = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
OFF = {"remote.storage.enable": "false"}
C, F, DS, DF = (
    SegmentState.COPY_SEGMENT_STARTED,
    SegmentState.COPY_SEGMENT_FINISHED,
    SegmentState.DELETE_SEGMENT_STARTED,
    SegmentState.DELETE_SEGMENT_FINISHED,
)


@pytest.mark.parametrize(
    ("configs", "states", "expected"),
    [
        (ON, (F, C), (TieredState.ENABLED, DisablePolicy.NONE)),
        (RETAIN, (F, C), (TieredState.DISABLING, DisablePolicy.RETAIN)),
        (RETAIN, (F, F), (TieredState.DISABLED, DisablePolicy.RETAIN)),
        (DELETE, (DF, DS), (TieredState.DISABLING, DisablePolicy.DELETE)),
        (DELETE, (F,), (TieredState.DISABLING, DisablePolicy.DELETE)),
        (DELETE, (DF, DF), (TieredState.DISABLED, DisablePolicy.DELETE)),
        (DELETE, (), (TieredState.DISABLED, DisablePolicy.DELETE)),
        (OFF, (), (TieredState.NOT_TIERED, DisablePolicy.NONE)),
        (OFF, (F,), (TieredState.DISABLED, DisablePolicy.RETAIN)),
        (OFF, (DF,), (TieredState.DISABLED, DisablePolicy.DELETE)),
    ],
)
def test_the_state_comes_from_the_configs_and_the_segments(configs, states, expected):
    assert derive_state(configs, segments(*states)) == expected


def test_the_json_keeps_tiering_statuss_keys_with_no_epoch_and_no_pending_brokers():
    status = KafkaTopicStatus("t", TID, 2, DELETE, segments(DF, DS))
    data = status.as_json()
    assert list(data)[:6] == ["topic", "topic_id", "state", "tiered_epoch", "policy", "pending_brokers"]
    assert (data["state"], data["tiered_epoch"], data["policy"], data["pending_brokers"]) == (
        "DISABLING",
        None,
        "delete",
        [],
    )
    assert data["segments"] == {"copying": 0, "copied": 0, "deleting": 1, "deleted": 1}
    assert [p["segments_remaining"] for p in data["partitions"]] == [0, 1]


def test_a_stalled_delete_lists_what_remains_per_partition_and_names_the_scan_and_reclaim():
    status = KafkaTopicStatus("t", TID, 2, DELETE, segments(DF, DS, DS))
    change = change_message(status, sent=None)
    view, message = stalled_message(change, status, stalled_s=30)
    assert "partition 0: 1 segment(s), 100 bytes; partition 1: 1 segment(s), 100 bytes" in message
    assert "scan run --source kafka" in message and "reclaim DIR" in message
    assert view.data["stalled"] is True and view.data["state"] == "DISABLING"
    assert "partition 1: 1 segment(s) remaining" in view.text


def test_without_the_metadata_topic_a_delete_is_never_taken_for_finished():
    assert derive_state(DELETE, segments(), metadata_found=False) == (TieredState.DISABLING, DisablePolicy.DELETE)
    assert derive_state(DELETE, segments(DF), metadata_found=False) == (TieredState.DISABLED, DisablePolicy.DELETE)
    status = KafkaTopicStatus("t", TID, 1, DELETE, segments(), metadata_found=False)
    assert status.as_json()["metadata_topic_found"] is False
    assert "no metadata topic" in status.text()


def test_a_retained_topic_lists_only_partitions_with_a_copy_in_flight():
    retained = KafkaTopicStatus("t", TID, 2, RETAIN, segments(F, C, F))
    assert [p.partition for p in retained.unfinished] == [1]
    assert "partition 0:" not in retained.text() and "partition 1: 1 segment(s) remaining" in retained.text()
