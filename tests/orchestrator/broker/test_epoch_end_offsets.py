"""OffsetForLeaderEpoch on a broker (orchestrator.broker.epoch_end_offsets): each partition's error in Kafka's order of
checks, and where an asked epoch ends in a led partition's log, from its leader-epoch cache and log end offset.

The mapping is pure and tested as such; one test runs the handler over fake logs, and one reads its response, as our
codec encodes it in every served version, with kafka-python's own structs (an independent reader).
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from orchestrator.broker.epoch_end_offsets import (
    EpochEndOffsets,
    LeaderLogEpochs,
    epoch_end_offsets,
    partitions_to_read,
)
from orchestrator.broker.leader_epochs import EpochEntry, LeaderEpochCache
from orchestrator.errors import KafkaStorageError, NotLeaderOrFollower
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, PartitionImage, TopicImage
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import response_schema
from tests.support.requests import data_request

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time importlib.resources call
    from kafka.protocol.old import offset_for_leader_epoch as kp

pytestmark = pytest.mark.unit

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER, KAFKA_STORAGE_ERROR = 0, 3, 6, 56
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75
ME, OTHER = 1, 2
TID, OTHER_TID = Uuid.random(), Uuid.random()
LEADER_EPOCH = 7  # of "t"'s partitions

# Offsets 10-19 were written in epoch 2, 20-29 in 4, 30 up to the log end (50) in 7.
CACHE = LeaderEpochCache((EpochEntry(2, 10), EpochEntry(4, 20), EpochEntry(7, 30)))
LOGS = {(TID, 0): LeaderLogEpochs(CACHE, 50)}


def _partition(index: int, leader: int, epoch: int = LEADER_EPOCH) -> PartitionImage:
    return PartitionImage(index, (1, 2, 3), (1, 2, 3), leader=leader, leader_epoch=epoch, partition_epoch=0)


IMAGE = MetadataImage(
    topics={
        TID: TopicImage(TID, "t", {0: _partition(0, ME), 1: _partition(1, OTHER)}),
        OTHER_TID: TopicImage(OTHER_TID, "u", {0: _partition(0, ME, epoch=3)}),
    },
    topics_by_name={"t": TID, "u": OTHER_TID},
)


def ask(*entries: tuple[str, int, int], current: int = -1, replica_id: int = -1) -> dict[str, Any]:
    """A request for (topic, partition, epoch) entries, each with ``current`` as its current leader epoch."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition, epoch in entries:
        topics.setdefault(topic, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        )
    return {"replica_id": replica_id, "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]}


def answers(response: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``{(topic, partition): (error code, leader epoch, end offset)}``."""
    return {
        (t["topic"], p["partition"]): (p["error_code"], p["leader_epoch"], p["end_offset"])
        for t in response["topics"]
        for p in t["partitions"]
    }


def answer(body: dict[str, Any], logs: Any = None) -> dict[tuple[str, int], tuple[int, int, int]]:
    response = epoch_end_offsets(body, image=IMAGE, broker_id=ME, logs=LOGS if logs is None else logs)  # type: ignore[arg-type]
    return answers(response)


@pytest.mark.parametrize(
    ("asked", "ends"),
    [
        (7, (7, 50)),  # the latest epoch ends at the log end offset
        (4, (4, 30)),  # an earlier one where the next one starts
        (2, (2, 20)),
        (5, (4, 30)),  # an epoch the log lacks: the largest one below it
        (1, (1, 10)),  # below the first entry: the epoch asked for, ending where the first known epoch starts
        (8, (-1, -1)),  # above the latest: undefined, and no error
        (-1, (-1, -1)),
        (-7, (-1, -1)),
    ],
)
def test_a_led_partition_answers_where_the_asked_epoch_ends(asked: int, ends: tuple[int, int]) -> None:
    assert answer(ask(("t", 0, asked))) == {("t", 0): (NONE, *ends)}


def test_the_leaders_own_epoch_begins_at_the_log_end_before_its_first_batch() -> None:
    """Leader since epoch 7, no batch of it yet (the cache ends at epoch 4): epoch 4 ends at the log end offset, 7
    is the current one (Kafka writes its entry on becoming leader), and 5 (never led) answers with 4."""
    cache = LeaderEpochCache((EpochEntry(2, 10), EpochEntry(4, 20)))
    logs = {(TID, 0): LeaderLogEpochs(cache, 30)}
    for asked, ends in ((4, (4, 30)), (5, (4, 30)), (7, (7, 30)), (8, (-1, -1))):
        assert answer(ask(("t", 0, asked)), logs) == {("t", 0): (NONE, *ends)}


def test_an_empty_log_knows_only_the_current_epoch() -> None:
    logs = {(TID, 0): LeaderLogEpochs(LeaderEpochCache(), 0)}
    assert answer(ask(("t", 0, LEADER_EPOCH)), logs) == {("t", 0): (NONE, LEADER_EPOCH, 0)}
    assert answer(ask(("t", 0, 3)), logs) == {("t", 0): (NONE, 3, 0)}  # below the only epoch: it starts at 0


def test_unknown_topics_and_partitions_are_unknown_topic_or_partition() -> None:
    got = answer(ask(("nope", 0, 1), ("t", 9, 1), ("t", -1, 1)))
    assert got == {
        ("nope", 0): (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("t", 9): (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("t", -1): (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    }


@pytest.mark.parametrize("replica_id", [-1, -2, OTHER])
def test_a_partition_led_elsewhere_is_not_leader_or_follower_whoever_asks(replica_id: int) -> None:
    assert answer(ask(("t", 1, 4), replica_id=replica_id)) == {("t", 1): (NOT_LEADER, -1, -1)}


@pytest.mark.parametrize(
    ("current", "code"),
    [(LEADER_EPOCH - 1, FENCED_LEADER_EPOCH), (LEADER_EPOCH + 1, UNKNOWN_LEADER_EPOCH), (LEADER_EPOCH, NONE)],
)
def test_the_askers_current_leader_epoch_is_fenced_before_leadership_is_checked(current: int, code: int) -> None:
    got = answer(ask(("t", 0, 4), ("t", 1, 4), current=current))
    assert got[("t", 0)][0] == code
    assert got[("t", 1)][0] == (code or NOT_LEADER)  # Kafka checks the epoch first, then that it leads


def test_each_partition_gets_its_own_answer_and_a_failed_log_fails_only_its_partition() -> None:
    logs = {(TID, 0): LeaderLogEpochs(CACHE, 50), (OTHER_TID, 0): KafkaStorageError("disk gone")}
    got = answer(ask(("t", 0, 2), ("t", 1, 2), ("u", 0, 2), ("nope", 0, 2)), logs)
    assert got == {
        ("t", 0): (NONE, 2, 20),
        ("t", 1): (NOT_LEADER, -1, -1),
        ("u", 0): (KAFKA_STORAGE_ERROR, -1, -1),
        ("nope", 0): (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    }


def test_a_partition_whose_log_was_not_read_is_not_leader_or_follower() -> None:
    assert answer(ask(("t", 0, 2)), {}) == {("t", 0): (NOT_LEADER, -1, -1)}
    gone = {(TID, 0): NotLeaderOrFollower("leadership moved while the log was opened")}
    assert answer(ask(("t", 0, 2)), gone) == {("t", 0): (NOT_LEADER, -1, -1)}


def test_only_the_led_partitions_that_pass_every_check_are_read() -> None:
    body = ask(("t", 0, 1), ("t", 1, 1), ("u", 0, 1), ("nope", 0, 1), ("t", 5, 1))
    assert partitions_to_read(body, IMAGE, ME) == {(TID, 0), (OTHER_TID, 0)}  # type: ignore[arg-type]
    fenced = ask(("t", 0, 1), ("u", 0, 1), current=3)  # t is at epoch 7, u at 3
    assert partitions_to_read(fenced, IMAGE, ME) == {(OTHER_TID, 0)}  # type: ignore[arg-type]


class _Log:
    def __init__(self, epochs: LeaderLogEpochs) -> None:
        self.leader_epochs, self.log_end_offset = epochs.leader_epochs, epochs.log_end_offset


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_handler_answers_in_every_served_version_and_kafka_python_reads_it(version: int) -> None:
    opened: list[tuple[Uuid, int]] = []

    def leader_log(topic_id: Uuid, partition: int) -> Any:
        opened.append((topic_id, partition))
        if topic_id == OTHER_TID:
            raise KafkaStorageError("the partition's directory is on a failed disk")
        return _Log(LOGS[(topic_id, partition)])

    async def serve() -> Any:
        handler = EpochEndOffsets(
            broker_id=ME, refresh_image=lambda: IMAGE, leader_log=leader_log, log_lock=asyncio.Lock()
        )
        request = data_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, ask(("t", 0, 4), ("t", 1, 4), ("u", 0, 1)))
        return await handler.offset_for_leader_epoch(request)

    response = asyncio.run(serve())
    assert sorted(opened, key=str) == sorted([(TID, 0), (OTHER_TID, 0)], key=str)  # never a log it does not lead
    expected = {("t", 0): (NONE, 4, 30), ("t", 1): (NOT_LEADER, -1, -1), ("u", 0): (KAFKA_STORAGE_ERROR, -1, -1)}
    assert answers(response) == expected

    schema = response_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert schema is not None
    theirs = kp.OffsetForLeaderEpochResponse[version].decode(codec.encode(schema, version, response))
    read = {
        (topic[0], p[1]): (p[0], p[2], p[3])  # kafka-python: (error_code, partition, leader_epoch, end_offset)
        for topic in theirs.topics
        for p in topic[1]
    }
    assert read == expected and theirs.throttle_time_ms == 0
