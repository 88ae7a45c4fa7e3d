"""Which partition directories are stale, moving them aside, and removing them after the retention: the pure
judgements on images built by the real replay, and the moves on real directories with real partition logs."""

import random
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.local_log import PartitionLog, read_partition_metadata
from orchestrator.broker.partition_dirs import (
    STALE_DIR,
    expired_stale_dirs,
    parse_partition_dir_name,
    remove_expired_stale_dirs,
    retire_stale_partitions,
    stale_dir_moved_at_ms,
    stale_dir_name,
    stale_log_keys,
    stale_reason,
)
from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import make_record
from tests.support.metadata_records import remove_topic, topic

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

HOUR_MS = 3_600_000


def _partitions(topic_id: Uuid, count: int) -> list:
    return [
        make_record(
            "PartitionRecord",
            partition_id=p,
            topic_id=topic_id,
            replicas=[1],
            isr=[1],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        )
        for p in range(count)
    ]


def _image(*records) -> MetadataImage:
    return replay(EMPTY_IMAGE, enumerate(records))


# Seeded, not random: the ids are part of the test ids below, which every pytest-xdist worker must collect alike.
_IDS = random.Random(52)
OLD, NEW, OTHER = Uuid.random(_IDS.randbytes), Uuid.random(_IDS.randbytes), Uuid.random(_IDS.randbytes)
# "again" deleted and re-created (a new id, one partition); "gone" deleted; "orders" live with two partitions.
GONE = Uuid.random(_IDS.randbytes)
IMAGE = _image(
    topic("again", OLD),
    *_partitions(OLD, 2),
    topic("gone", GONE),
    *_partitions(GONE, 1),
    remove_topic(OLD),
    remove_topic(GONE),
    topic("again", NEW),
    *_partitions(NEW, 1),
    topic("orders", OTHER),
    *_partitions(OTHER, 2),
)


@pytest.mark.parametrize(
    ("dir_name", "topic_id", "stale"),
    [
        ("orders-0", OTHER, None),
        ("orders-1", OTHER, None),
        ("again-0", NEW, None),
        ("again-0", OLD, f"topic id deleted; the name again now belongs to topic id {NEW}"),
        ("again-1", OLD, f"topic id deleted; the name again now belongs to topic id {NEW}"),
        ("gone-0", GONE, "topic id deleted"),
        ("orders-2", OTHER, f"topic id {OTHER} (orders) has no partition orders-2"),
        ("again-0", OTHER, f"topic id {OTHER} (orders) has no partition again-0"),
        ("orders-0", None, "no readable partition.metadata"),
        ("lost+found", None, None),  # not named like a partition: not the broker's to judge
        ("orders-01", OTHER, None),
        ("orders", OTHER, None),
    ],
)
def test_a_directory_is_stale_by_the_topic_id_it_names_and_the_image(dir_name, topic_id, stale):
    assert stale_reason(IMAGE, dir_name, topic_id) == stale


def test_partition_directory_names_are_parsed_as_kafka_writes_them():
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir_name("a.b-0") == ("a.b", 0)
    for not_a_partition in ("lost+found", "orders-", "-0", "orders-01", "orders-x", "stale"):
        assert parse_partition_dir_name(not_a_partition) is None


def test_open_logs_of_partitions_the_image_no_longer_has_are_stale():
    keys = [(OLD, 0), (OLD, 1), (NEW, 0), (NEW, 1), (OTHER, 1), (GONE, 0)]
    assert stale_log_keys(IMAGE, keys) == [(OLD, 0), (OLD, 1), (NEW, 1), (GONE, 0)]


def test_the_time_a_directory_was_moved_is_read_back_from_its_name_even_for_dotted_topic_names():
    name = stale_dir_name("a.b.c-3", OLD, 1_700_000_000_123)
    assert name == f"a.b.c-3.{OLD}.1700000000123"
    assert stale_dir_moved_at_ms(name) == 1_700_000_000_123
    assert stale_dir_moved_at_ms(stale_dir_name("x-0", None, 5)) == 5
    assert stale_dir_moved_at_ms("notes") is None
    assert stale_dir_moved_at_ms("x-0.unknown.") is None


def test_moved_aside_directories_expire_after_the_retention_and_never_with_a_negative_one():
    now = 10 * HOUR_MS
    names = [
        stale_dir_name("a-0", OLD, now - 2 * HOUR_MS),
        stale_dir_name("b-0", None, now - HOUR_MS),  # exactly the retention: expired
        stale_dir_name("c-0", OLD, now - HOUR_MS + 1),
        stale_dir_name("d-0", OLD, now + HOUR_MS),  # a clock stepped back: not expired
        "notes",
        "README.txt",
    ]
    assert expired_stale_dirs(names, now_ms=now, retention_ms=HOUR_MS) == {
        names[0]: now - 2 * HOUR_MS,
        names[1]: now - HOUR_MS,
    }
    assert list(expired_stale_dirs(names, now_ms=now, retention_ms=0)) == sorted(names[:3])
    assert expired_stale_dirs(names, now_ms=now, retention_ms=-1) == {}


# -- on real directories -------------------------------------------------------------------------------------------


def _log(data_dir: Path, name: str, topic_id: Uuid, partition: int = 0) -> PartitionLog:
    plog = PartitionLog(data_dir / f"{name}-{partition}", topic_id=topic_id, clock=lambda: 1_000)
    plog.append([(None, f"{name}-{partition}".encode(), None)])
    return plog


def test_retiring_closes_and_drops_the_stale_logs_and_moves_only_stale_partition_directories(tmp_path):
    data_dir = tmp_path / "broker-1"
    logs = {(OLD, 0): _log(data_dir, "again", OLD), (OTHER, 0): _log(data_dir, "orders", OTHER)}
    _log(data_dir, "gone", GONE).close()  # a directory of a deleted topic whose log was never opened
    (data_dir / "orders-1").mkdir()  # a partition directory with no partition.metadata
    (data_dir / "lost+found").mkdir()  # not a partition directory

    with capture_logs() as events:
        moved = retire_stale_partitions(data_dir, IMAGE, logs, now_ms=42)

    assert list(logs) == [(OTHER, 0)]
    assert sorted(p.name for p in moved) == [f"again-0.{OLD}.42", f"gone-0.{GONE}.42", "orders-1.unknown.42"]
    assert all(p.parent == data_dir / STALE_DIR for p in moved)
    assert sorted(p.name for p in data_dir.iterdir()) == ["lost+found", "orders-0", STALE_DIR]
    kept = data_dir / STALE_DIR / f"again-0.{OLD}.42"
    assert read_partition_metadata(kept / "partition.metadata") == OLD  # moved whole, for the operator to look at
    assert b"again-0" in (kept / f"{0:020d}.log").read_bytes()
    moved_events = [e for e in events if e["event"] == "broker.stale_partition_dir"]
    assert [(e["directory"], e["topic_id"], e["log_level"]) for e in moved_events] == [
        ("again-0", str(OLD), "warning"),
        ("gone-0", str(GONE), "warning"),
        ("orders-1", "None", "warning"),
    ]
    assert moved_events[0]["reason"] == f"topic id deleted; the name again now belongs to topic id {NEW}"
    assert moved_events[0]["moved_to"] == str(kept)

    # The new topic id gets a directory of the same name, and a second retirement leaves everything live alone.
    logs[(NEW, 0)] = _log(data_dir, "again", NEW)
    assert retire_stale_partitions(data_dir, IMAGE, logs, now_ms=43) == []
    assert sorted(logs) == sorted([(OTHER, 0), (NEW, 0)])
    for plog in logs.values():
        plog.close()


def test_a_second_directory_moved_aside_in_the_same_millisecond_never_lands_in_the_first(tmp_path):
    data_dir = tmp_path / "broker-1"
    for _ in range(2):
        (data_dir / "orders-5").mkdir(parents=True)
        (data_dir / "orders-5" / "marker").write_text("x")
        retire_stale_partitions(data_dir, IMAGE, {}, now_ms=7)
    assert sorted(p.name for p in (data_dir / STALE_DIR).iterdir()) == ["orders-5.unknown.7", "orders-5.unknown.8"]


def test_no_data_directory_means_nothing_to_retire(tmp_path):
    assert retire_stale_partitions(tmp_path / "missing", IMAGE, {}, now_ms=1) == []
    (tmp_path / "file").write_text("a failed disk, as the broker sees it")
    assert retire_stale_partitions(tmp_path / "file", IMAGE, {}, now_ms=1) == []
    assert remove_expired_stale_dirs(tmp_path / "file", now_ms=1, retention_ms=0) == []


def test_a_directory_that_cannot_be_moved_is_named_in_one_storage_error_after_the_others_moved(tmp_path):
    data_dir = tmp_path / "broker-1"
    _log(data_dir, "gone", GONE).close()
    (data_dir / STALE_DIR).write_text("in the way")  # mkdir of stale/ fails, as on a failed disk
    logs = {(OLD, 0): _log(data_dir, "again", OLD)}
    with pytest.raises(KafkaStorageError) as failed:
        retire_stale_partitions(data_dir, IMAGE, logs, now_ms=1)
    assert failed.value.message.startswith("2 stale partition(s) not retired: log directory ")
    assert str(data_dir / "again-0") in failed.value.message and str(data_dir / "gone-0") in failed.value.message
    assert logs == {}  # closed and dropped all the same: its topic is gone
    (data_dir / STALE_DIR).unlink()
    moved = retire_stale_partitions(data_dir, IMAGE, logs, now_ms=2)
    assert sorted(p.name for p in moved) == [f"again-0.{OLD}.2", f"gone-0.{GONE}.2"]


def test_expired_directories_under_stale_are_removed_and_everything_else_is_kept(tmp_path):
    data_dir = tmp_path / "broker-1"
    stale = data_dir / STALE_DIR
    now = 100 * HOUR_MS
    old = stale / stale_dir_name("again-0", OLD, now - 25 * HOUR_MS)
    fresh = stale / stale_dir_name("again-0", NEW, now - HOUR_MS)
    for d in (old, fresh, stale / "kept-by-the-operator"):
        (d / "nested").mkdir(parents=True)
        (d / "nested" / "00000000000000000000.log").write_bytes(b"x" * 10)
    (stale / stale_dir_name("file-0", OLD, 0)).write_text("not a directory: left alone")

    with capture_logs() as events:
        removed = remove_expired_stale_dirs(data_dir, now_ms=now, retention_ms=24 * HOUR_MS)

    assert removed == [old]
    assert sorted(p.name for p in stale.iterdir()) == sorted([fresh.name, "kept-by-the-operator", f"file-0.{OLD}.0"])
    (event,) = [e for e in events if e["event"] == "broker.stale_partition_dir_removed"]
    assert (event["directory"], event["moved_at_ms"], event["age_ms"]) == (old.name, now - 25 * HOUR_MS, 25 * HOUR_MS)
    assert remove_expired_stale_dirs(data_dir, now_ms=now, retention_ms=-1) == []
    assert remove_expired_stale_dirs(tmp_path / "no-such-dir", now_ms=now, retention_ms=0) == []
