"""A broker's data directory: which partition directories are stale, moving them aside, removing them later.

Layout (Kafka's): ``<data_dir>/<topic>-<partition>/`` for each partition whose log the broker hosts, with a
``partition.metadata`` naming the topic id (KIP-516, :mod:`orchestrator.broker.local_log`); and
``<data_dir>/stale/<topic>-<partition>.<topic id or "unknown">.<moved at, epoch ms>/`` for directories moved aside.

A partition directory is stale when the metadata image says it can no longer be served: its topic id is gone (the
topic was deleted), and perhaps its name already belongs to another topic id (deleted and re-created); the topic
has no such partition; or the directory has no readable ``partition.metadata``. A directory is judged by the topic
id its ``partition.metadata`` names (for one whose log is open, the id the log checked when it opened), never by
its name alone; directories not named like a partition (``lost+found``) are not the broker's and are left alone.

Invariants:
* A stale directory is never served and never deleted on the spot: it is moved to ``stale/`` (a rename within the
  data directory, so a directory is either in place or moved, never half copied), where the operator can still
  look at it, and removed once it has been there longer than the retention
  (``BrokerSettings.stale_dir_retention_ms``).
* Before a stale partition's directory moves, its open log is closed and dropped from the broker's logs. The
  caller makes sure nothing uses or opens a log meanwhile (the agent holds the lock every append, read and tiering
  pass takes, and the lock every open takes).
* The time a directory was moved is in its name, so the retention holds across restarts and does not depend on
  file times (a rename does not reliably change them).
* One directory that cannot be moved or removed (a disk error) does not stop the others: every one is tried, then
  one :class:`KafkaStorageError` names those that failed, so the caller reports it and tries again later.

Events: ``broker.stale_partition_dir`` (moved: the directory, its topic id, why, where to) and
``broker.stale_partition_dir_removed`` (the directory under ``stale/``, when it was moved, its age).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, MutableMapping
from pathlib import Path

import structlog

from orchestrator.broker.local_log import PartitionLog, log_directory_error, read_partition_metadata
from orchestrator.errors import InvalidRequest, KafkaStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage

log = structlog.get_logger(__name__)

STALE_DIR = "stale"  # under the data directory
PartitionKey = tuple[Uuid, int]


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a directory named like a partition's, else None."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit() or partition_dir_name(topic, int(partition)) != name:
        return None
    return topic, int(partition)


def stale_reason(image: MetadataImage, dir_name: str, topic_id: Uuid | None) -> str | None:
    """Why the partition directory ``dir_name``, whose ``partition.metadata`` names ``topic_id`` (None: missing or
    unreadable), can no longer be served according to ``image``; None when it is live."""
    parsed = parse_partition_dir_name(dir_name)
    if parsed is None:
        return None  # not a partition directory: not ours to judge
    name, partition = parsed
    if topic_id is None:
        return "no readable partition.metadata"
    topic = image.topics.get(topic_id)
    if topic is None:
        successor = image.topic_by_name(name)
        if successor is not None:
            return f"topic id deleted; the name {name} now belongs to topic id {successor.topic_id}"
        return "topic id deleted"
    if topic.name != name or partition not in topic.partitions:
        return f"topic id {topic_id} ({topic.name}) has no partition {dir_name}"
    return None


def stale_log_keys(image: MetadataImage, keys: Iterable[PartitionKey]) -> list[PartitionKey]:
    """The open logs (topic id, partition) whose partition ``image`` no longer has."""
    return [
        (topic_id, partition)
        for topic_id, partition in keys
        if (topic := image.topics.get(topic_id)) is None or partition not in topic.partitions
    ]


def stale_dir_name(dir_name: str, topic_id: Uuid | None, moved_at_ms: int) -> str:
    return f"{dir_name}.{topic_id or 'unknown'}.{moved_at_ms}"


def stale_dir_moved_at_ms(name: str) -> int | None:
    """When the directory ``stale/<name>`` was moved aside, from its name; None for a name not of that form."""
    _, dot, moved_at = name.rpartition(".")
    return int(moved_at) if dot and moved_at.isdigit() else None


def expired_stale_dirs(names: Iterable[str], *, now_ms: int, retention_ms: int) -> dict[str, int]:
    """Of the names under ``stale/``, those moved aside at least ``retention_ms`` before ``now_ms``, each with when
    it was moved (none when the retention is negative: kept for ever). A name not of the form
    :func:`stale_dir_name` writes is never chosen."""
    if retention_ms < 0:
        return {}
    moved = {name: at for name in sorted(names) if (at := stale_dir_moved_at_ms(name)) is not None}
    return {name: at for name, at in moved.items() if now_ms - at >= retention_ms}


def _topic_id_of(directory: Path) -> Uuid | None:
    try:
        return read_partition_metadata(directory / "partition.metadata")
    except (FileNotFoundError, InvalidRequest):  # none yet, or a topic id that does not parse
        return None


def move_aside(data_dir: Path, directory: Path, topic_id: Uuid | None, now_ms: int) -> Path:
    stale = data_dir / STALE_DIR
    stale.mkdir(exist_ok=True)
    moved_at = now_ms
    while (target := stale / stale_dir_name(directory.name, topic_id, moved_at)).exists():
        moved_at += 1  # never into (or over) an earlier move of the same directory
    directory.rename(target)
    return target


def _raise_failures(what: str, failures: list[KafkaStorageError]) -> None:
    if failures:
        details = "; ".join(f.message for f in failures)
        raise KafkaStorageError(f"{len(failures)} {what}: {details}") from failures[0].__cause__


def retire_stale_partitions(
    data_dir: Path,
    image: MetadataImage,
    logs: MutableMapping[PartitionKey, PartitionLog],
    *,
    now_ms: int,
) -> list[Path]:
    """Close and drop from ``logs`` every open log whose partition ``image`` no longer has, then move every stale
    partition directory to ``stale/``; return where they went.

    The caller makes sure nothing uses ``logs`` or opens a log while this runs. Raises one
    :class:`KafkaStorageError` naming the directories that could not be moved (or logs not closed cleanly) after
    trying all of them."""
    failures: list[KafkaStorageError] = []
    for key in stale_log_keys(image, logs):
        plog = logs.pop(key)  # dropped even if closing fails: its partition is gone either way
        try:
            plog.close()
        except KafkaStorageError as exc:
            failures.append(exc)
    open_dirs = {plog.directory for plog in logs.values()}  # live: each log checked its directory's topic id
    moved: list[Path] = []
    if data_dir.is_dir():  # no data directory (yet, or a failed disk): nothing to move; opening logs says why
        for directory in sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name != STALE_DIR):
            if directory in open_dirs:
                continue
            try:
                topic_id = _topic_id_of(directory)
                reason = stale_reason(image, directory.name, topic_id)
                if reason is None:
                    continue
                target = move_aside(data_dir, directory, topic_id, now_ms)
            except OSError as exc:
                failures.append(log_directory_error(directory, exc))
                continue
            log.warning(
                "broker.stale_partition_dir",
                directory=directory.name,
                topic_id=str(topic_id),
                reason=reason,
                moved_to=str(target),
            )
            moved.append(target)
    _raise_failures("stale partition(s) not retired", failures)
    return moved


def remove_expired_stale_dirs(data_dir: Path, *, now_ms: int, retention_ms: int) -> list[Path]:
    """Delete the directories under ``stale/`` moved aside at least ``retention_ms`` ago; return them. Raises one
    :class:`KafkaStorageError` naming those that could not be removed, after trying all of them."""
    stale = data_dir / STALE_DIR
    try:
        names = [entry.name for entry in stale.iterdir() if entry.is_dir() and not entry.is_symlink()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: list[Path] = []
    failures: list[KafkaStorageError] = []
    for name, moved_at in expired_stale_dirs(names, now_ms=now_ms, retention_ms=retention_ms).items():
        directory = stale / name
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            failures.append(log_directory_error(directory, exc))
            continue
        log.info("broker.stale_partition_dir_removed", directory=name, moved_at_ms=moved_at, age_ms=now_ms - moved_at)
        removed.append(directory)
    _raise_failures("stale directories not removed", failures)
    return removed
