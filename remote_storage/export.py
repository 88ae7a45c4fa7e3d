"""Export the metadata the scan joins against: topics (live and deleted) and RLMM segment states, as Parquet.

``topics.parquet`` has one row per topic id the metadata log has ever held: the live ones from the follower's
image, and the deleted ones (KIP-516: a RemoveTopicRecord ends a topic id for good; a re-created topic with the
same name is a different id) with ``deleted=True`` and the name, tiered state, epoch, policy and retention configs
they had when they were removed. ``segments.parquet`` has one row per RLMM segment of any topic id, live, deleted
or never seen in the metadata log, with its latest state. ``epochs.parquet`` is the tiered-state history: one row
per (topic id, tiered epoch, state) the metadata log recorded, so the scan can tell whether a copy was made at an
epoch at which its topic was ENABLED (ARCHITECTURE §7).

Two writers share :func:`write_export`: this module's, from a metadata store, and
:mod:`remote_storage.kafka_export`, from what a Kafka cluster says over its protocol (which also writes
``source.json``; an export without it is a store's, :func:`read_export_source`).

Invariants:
* The files, their columns and the rows read back are :mod:`remote_storage.export_format`'s.
* Retention columns are the effective values the broker applies, defaults from the topic-config catalogue
  (:mod:`orchestrator.metadata.topic_configs`: ``retention.ms`` 7 days, ``retention.bytes`` -1 (unbounded),
  ``local.retention.ms`` -2 (inherit), as in Kafka); a config value that
  is not an integer is exported as the default and logged (``metadata_export.bad_config``), never dropped silently.
* The deleted topics and the tiered-state history come from the same image as the live topics (which keeps them
  even once the log's old records were deleted behind a snapshot), so the sets are disjoint and consistent.
  Segments are written in batches: memory is flat in their number.
* Files are written to a temporary name and renamed, so a present file is a complete one.
* A segment's custom metadata (Aiven's tagged fields, :mod:`remote_storage.segment_format.custom_metadata`) is read
  from the ``CustomMetadata`` bytes of its RLMM records (the last record that carries any: the COPY_SEGMENT_FINISHED
  update, which Kafka's later DELETE updates do not repeat) and decoded here, once, into the segment columns
  ``remote_size``, ``object_prefix`` and ``object_key``. Bytes that do not decode (or a negative remote size) never
  stop the export: the three columns stay null, ``custom_metadata_error`` says why, the segment is counted in
  :attr:`ExportResult.custom_metadata_errors` and logged (``metadata_export.bad_custom_metadata``), and the scan
  reports it as the anomaly ``custom_metadata_unreadable``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from orchestrator.errors import ScanInputError
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.open import open_store, parse_store_spec, read_password
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.metadata.store import MetadataStore
from orchestrator.metadata.topic_configs import (
    LOCAL_RETENTION_MS,
    RETENTION_BYTES,
    RETENTION_MS,
    default_int,
    int_value,
)
from orchestrator.settings import StoreSettings
from remote_storage.export_format import (
    ADDED_SEGMENT_COLUMNS,
    EPOCHS_FILE,
    SEGMENTS_FILE,
    SOURCE_FILE,
    SOURCES,
    TOPICS_FILE,
    ExportSource,
    SegmentMeta,
    TopicMeta,
    epochs_schema,
    segments_schema,
    topics_schema,
)
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment, RlmmFold, RlmmLog
from remote_storage.segment_format.custom_metadata import decode_custom_metadata
from remote_storage.segment_format.errors import SegmentFormatError

log = structlog.get_logger(__name__)

_BATCH = 50_000
_LOGGED_BAD_CUSTOM_METADATA = 10  # segments logged one by one; the rest only counted
_RLMM_SEGMENT_RECORDS = ("RemoteLogSegmentMetadataRecord", "RemoteLogSegmentMetadataUpdateRecord")


class MetadataExportError(ScanInputError):
    """The metadata export could not be written or read; the message names the file."""

    name, retriable = "INVALID_METADATA_EXPORT", False


@dataclass(frozen=True, slots=True)
class ExportedTopic:
    topic_id: Uuid
    name: str
    state: TieredState
    tiered_epoch: int
    policy: DisablePolicy
    configs: Mapping[str, str]
    deleted: bool


@dataclass(frozen=True, slots=True)
class ExportResult:
    topics_path: Path
    segments_path: Path
    epochs_path: Path
    topics: int
    deleted_topics: int
    segments: int
    metadata_offset: int  # the last metadata log offset the export reflects
    custom_metadata_errors: int = 0  # segments whose recorded custom metadata did not decode


@dataclass(frozen=True, slots=True)
class LogHistory:
    deleted: list[ExportedTopic]  # removed topic ids, as they were when removed
    epochs: list[tuple[Uuid, int, TieredState]]  # every (topic id, tiered epoch, state) recorded, per topic in order


def log_history(image: MetadataImage) -> LogHistory:
    """The deleted topic ids and the tiered-state history the image keeps (it outlives the log's records, which are
    deleted behind snapshots: see :mod:`orchestrator.metadata.image`)."""
    deleted = [
        ExportedTopic(r.topic_id, r.name, r.tiered_state, r.tiered_epoch, r.policy, r.configs, deleted=True)
        for r in image.removed_topics.values()
    ]
    epochs = [
        (tid, change.tiered_epoch, change.tiered_state)
        for tid, changes in image.tiered_history.items()
        for change in changes
    ]
    return LogHistory(deleted, epochs)


def _config_int(topic: ExportedTopic, key: str) -> int:
    try:
        return int_value(topic.configs, key)
    except ValueError:
        value = topic.configs.get(key)
        log.warning("metadata_export.bad_config", topic=topic.name, topic_id=str(topic.topic_id), key=key, value=value)
        return default_int(key)


def _topic_rows(topics: Iterable[ExportedTopic]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {n: [] for n in topics_schema().names}
    for t in topics:
        cols["topic_id"].append(str(t.topic_id))
        cols["name"].append(t.name)
        cols["state"].append(t.state.name)
        cols["tiered_epoch"].append(t.tiered_epoch)
        cols["policy"].append(t.policy.name)
        cols["retention_ms"].append(_config_int(t, RETENTION_MS))
        cols["retention_bytes"].append(_config_int(t, RETENTION_BYTES))
        cols["local_retention_ms"].append(_config_int(t, LOCAL_RETENTION_MS))
        cols["deleted"].append(t.deleted)
    return cols


@dataclass(frozen=True, slots=True)
class CustomMetadataColumns:
    """A segment's custom metadata as the export's columns (all None: none recorded)."""

    remote_size: int | None = None
    object_prefix: str | None = None
    object_key: str | None = None
    error: str | None = None


def custom_metadata_columns(raw: bytes | None) -> CustomMetadataColumns:
    """The columns of recorded custom-metadata bytes (None or empty: no field); a value that does not decode gives
    only ``error``."""
    if not raw:
        return CustomMetadataColumns()
    try:
        fields = decode_custom_metadata(raw)
    except SegmentFormatError as exc:
        return CustomMetadataColumns(error=exc.message)
    if fields.remote_size is not None and fields.remote_size < 0:
        return CustomMetadataColumns(error=f"custom metadata: REMOTE_SIZE is negative ({fields.remote_size})")
    return CustomMetadataColumns(fields.remote_size, fields.object_prefix, fields.object_key)


def _segment_batches(
    segments: Iterable[RemoteSegment], custom: Mapping[Uuid, CustomMetadataColumns]
) -> Iterator[dict[str, list[Any]]]:
    names = segments_schema().names
    cols: dict[str, list[Any]] = {n: [] for n in names}
    none = CustomMetadataColumns()
    for s in segments:
        fields = custom.get(s.segment_id, none)
        cols["topic_id"].append(str(s.topic_id))
        cols["topic"].append(s.topic)
        cols["partition"].append(s.partition)
        cols["segment_id"].append(str(s.segment_id))
        cols["start_offset"].append(s.start_offset)
        cols["end_offset"].append(s.end_offset)
        cols["size_bytes"].append(s.size_bytes)
        cols["tiered_epoch"].append(s.tiered_epoch)
        cols["state"].append(s.state.name)
        cols["max_timestamp_ms"].append(s.max_timestamp_ms)
        cols["event_timestamp_ms"].append(s.event_timestamp_ms)
        cols["remote_size"].append(fields.remote_size)
        cols["object_prefix"].append(fields.object_prefix)
        cols["object_key"].append(fields.object_key)
        cols["custom_metadata_error"].append(fields.error)
        if len(cols["topic_id"]) >= _BATCH:
            yield cols
            cols = {n: [] for n in names}
    if cols["topic_id"]:
        yield cols


@dataclass(frozen=True, slots=True)
class RlmmRecordFacts:
    """What the export takes from the RLMM records themselves, beside the manager's folded segment states."""

    topic_ids: set[Uuid]  # every topic id a segment record names (including ids the metadata log never held)
    custom_metadata: dict[Uuid, CustomMetadataColumns]  # segment id -> its decoded custom metadata, when recorded
    custom_metadata_errors: int


def rlmm_record_facts(records: RlmmLog) -> RlmmRecordFacts:
    """One pass over the RLMM records: the topic ids they name, and each segment's last recorded custom metadata."""
    ids: set[Uuid] = set()
    raw: dict[Uuid, bytes] = {}
    for entry in records.read_remote_log_metadata():
        record = entry.record
        if record.name not in _RLMM_SEGMENT_RECORDS:
            continue
        segment_id = record.fields["remote_log_segment_id"]
        if record.name == "RemoteLogSegmentMetadataRecord":
            ids.add(segment_id["topic_id_partition"]["id"])
        blob = record.fields.get("custom_metadata")
        if blob:
            raw[segment_id["id"]] = bytes(blob)
    custom = {sid: custom_metadata_columns(blob) for sid, blob in raw.items()}
    errors = [(sid, c.error) for sid, c in custom.items() if c.error is not None]
    for sid, error in errors[:_LOGGED_BAD_CUSTOM_METADATA]:
        log.warning("metadata_export.bad_custom_metadata", segment_id=str(sid), error=error)
    return RlmmRecordFacts(ids, custom, len(errors))


def export_store_file(
    store: str | os.PathLike[str],
    dest_dir: str | os.PathLike[str],
    *,
    password_file: str | os.PathLike[str] | None = None,
) -> ExportResult:
    """Export the store ``store`` names (a SQLite file's path, or a ``postgresql://`` URL) as a reader: it is never
    recovered or rewritten here (that is the cluster processes' job; a live cluster may be writing it). A
    PostgreSQL password comes from ``password_file``, else ``$TIEREDCTL_STORE_PASSWORD``, else libpq's sources."""
    store = os.fspath(store)
    spec = parse_store_spec(store)
    if spec.backend == "sqlite" and not Path(spec.target).is_file():
        raise MetadataExportError(f"the metadata store {spec.target} does not exist")
    settings = StoreSettings(password_file=None if password_file is None else str(password_file))
    password = read_password(settings, os.environ)
    opened = open_store(
        store, settings=settings, password=password, recover_on_open=False, application_name="tieredctl-export"
    )
    with contextlib.closing(opened):
        return export_metadata(opened, dest_dir)


def export_metadata(
    store: MetadataStore,
    dest_dir: str | os.PathLike[str],
    *,
    follower: MetadataFollower | None = None,
    rlmm: RemoteLogMetadataManager | None = None,
) -> ExportResult:
    """Write ``topics.parquet`` and ``segments.parquet`` under ``dest_dir`` from ``store``'s current metadata."""
    image = (follower or MetadataFollower(store)).refresh()
    live = [
        ExportedTopic(t.topic_id, t.name, t.tiered_state, t.tiered_epoch, t.policy, image.topic_configs(t.name), False)
        for t in image.topics.values()
    ]
    history = log_history(image)
    manager = rlmm or RemoteLogMetadataManager(store)
    manager.refresh()
    facts = rlmm_record_facts(store)
    return write_export(
        dest_dir, topics=live + history.deleted, epochs=history.epochs, fold=manager, facts=facts, offset=image.offset
    )


def write_export(
    dest_dir: str | os.PathLike[str],
    *,
    topics: Sequence[ExportedTopic],
    epochs: Sequence[tuple[Uuid, int, TieredState]],
    fold: RlmmFold,
    facts: RlmmRecordFacts,
    offset: int,
) -> ExportResult:
    """Write the export's three files under ``dest_dir``: ``topics`` (live and deleted), the tiered-state history
    ``epochs``, and every segment ``fold`` holds of a topic id in ``topics`` or named by an RLMM record (``facts``).
    ``offset``: the position in the metadata the export reflects (the metadata log's offset, or -1 when none)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    dest = Path(dest_dir)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MetadataExportError(f"cannot create export directory {dest}: {exc}") from exc
    gone = [t for t in topics if t.deleted]
    ordered = sorted(topics, key=lambda t: (t.name, str(t.topic_id)))
    ids = sorted({t.topic_id for t in topics} | facts.topic_ids, key=str)

    topics_path = dest / TOPICS_FILE
    segments_path = dest / SEGMENTS_FILE
    epochs_path = dest / EPOCHS_FILE
    try:
        epoch_topic_ids = [str(t) for t, _, _ in epochs]
        tiered_epochs = [e for _, e, _ in epochs]
        epoch_states = [s.name for _, _, s in epochs]
        epoch_columns = {"topic_id": epoch_topic_ids, "tiered_epoch": tiered_epochs, "state": epoch_states}
        tmp = epochs_path.with_name(f".{EPOCHS_FILE}.tmp")
        pq.write_table(pa.Table.from_pydict(epoch_columns, schema=epochs_schema()), tmp)
        os.replace(tmp, epochs_path)
        tmp = topics_path.with_name(f".{TOPICS_FILE}.tmp")
        pq.write_table(pa.Table.from_pydict(_topic_rows(ordered), schema=topics_schema()), tmp)
        os.replace(tmp, topics_path)
        segments = 0
        tmp = segments_path.with_name(f".{SEGMENTS_FILE}.tmp")
        with pq.ParquetWriter(tmp, segments_schema()) as writer:
            all_segments = (s for tid in ids for s in fold.segments(tid))
            for batch in _segment_batches(all_segments, facts.custom_metadata):
                writer.write_table(pa.Table.from_pydict(batch, schema=segments_schema()))
                segments += len(batch["topic_id"])
        os.replace(tmp, segments_path)
    except OSError as exc:
        raise MetadataExportError(f"cannot write the metadata export under {dest}: {exc}") from exc
    errors = facts.custom_metadata_errors
    counts = (len(ordered), len(gone), segments, offset, errors)
    result = ExportResult(topics_path, segments_path, epochs_path, *counts)
    log.info(
        "metadata_export.written",
        dest=str(dest),
        topics=result.topics,
        deleted_topics=result.deleted_topics,
        segments=segments,
        metadata_offset=offset,
        custom_metadata_errors=errors,
    )
    return result


def load_export(
    export_dir: str | os.PathLike[str],
) -> tuple[list[TopicMeta], list[SegmentMeta], list[tuple[str, int, str]]]:
    """Read an export written by :func:`export_metadata` back as the classifier's rows (topics, segments, epochs).

    Raises :class:`MetadataExportError` naming the file when one is missing or unreadable. An export made before
    ``epochs.parquet`` existed has no tiered-state history: it reads as an empty one; one made before the custom
    metadata columns (:data:`~remote_storage.export_format.ADDED_SEGMENT_COLUMNS`) reads them as null.
    """
    import pyarrow.parquet as pq

    src = Path(export_dir)

    def rows(name: str, *, required: bool = True) -> list[dict[str, Any]]:
        path = src / name
        if not required and not path.exists():
            return []
        try:
            return list(pq.read_table(path).to_pylist())
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise MetadataExportError(f"cannot read the metadata export file {path}: {exc}") from exc

    # The columns of each row type: its fields, by name.
    topic_columns = (
        "topic_id",
        "name",
        "state",
        "tiered_epoch",
        "policy",
        "retention_ms",
        "retention_bytes",
        "deleted",
    )
    segment_columns = (
        "topic_id",
        "topic",
        "partition",
        "segment_id",
        "start_offset",
        "end_offset",
        "size_bytes",
        "tiered_epoch",
        "state",
        "max_timestamp_ms",
        "event_timestamp_ms",
    )
    topics = [TopicMeta(**{column: r[column] for column in topic_columns}) for r in rows(TOPICS_FILE)]

    def segment(r: dict[str, Any]) -> SegmentMeta:
        values: dict[str, Any] = {column: r[column] for column in segment_columns}
        values.update({column: r.get(column) for column in ADDED_SEGMENT_COLUMNS})  # absent in older exports: None
        return SegmentMeta(**values)

    segments = [segment(r) for r in rows(SEGMENTS_FILE)]
    epochs = [(r["topic_id"], r["tiered_epoch"], r["state"]) for r in rows(EPOCHS_FILE, required=False)]
    return topics, segments, epochs


def read_export_source(export_dir: str | os.PathLike[str]) -> ExportSource:
    """Where the export in ``export_dir`` was read: its ``source.json``, or the store when it has none."""
    path = Path(export_dir) / SOURCE_FILE
    if not path.exists():
        return ExportSource()
    try:
        doc = json.loads(path.read_text())
        source = ExportSource(
            source=str(doc["source"]),
            bootstrap_servers=doc.get("bootstrap_servers"),
            rlmm_topic=doc.get("rlmm_topic"),
            records=int(doc.get("records", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MetadataExportError(f"cannot read the metadata export file {path}: {exc!r}") from exc
    if source.source not in SOURCES:
        raise MetadataExportError(f"{path} names the source {source.source!r}, not one of {', '.join(SOURCES)}")
    return source
