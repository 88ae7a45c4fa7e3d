"""The metadata export's format: its three Parquet files (and ``source.json`` when not from a store), their
columns, and the rows the scan's reference reads.

Pure (no I/O here): the writer and reader live in :mod:`remote_storage.export`; the Spark job reads the same files
by these names, and the reference classifier (:mod:`policies.orphans`) takes :class:`TopicMeta` and
:class:`SegmentMeta` rows. pyarrow is an optional dependency (the ``spark`` extra), so the schemas import it
when asked for.

Invariants: column names and types are fixed by :func:`topics_schema`, :func:`segments_schema` and
:func:`epochs_schema` (an empty export has the same schema); ids are their 22-character KIP-516 strings, states
and policies their enum names; a row class has exactly its file's columns, in order.

Compatibility: columns are only ever added, at the end and nullable. :data:`ADDED_SEGMENT_COLUMNS` are the ones an
export written before them lacks; every reader (:func:`remote_storage.export.load_export`, the Spark job) reads such
an export with those columns null, which is what they hold for a segment without custom metadata.

The added segment columns carry what the scan needs of Aiven's custom metadata (the ``CustomMetadata`` bytes of the
segment's COPY_SEGMENT_FINISHED record, :mod:`remote_storage.segment_format.custom_metadata`), decoded once at
export: ``remote_size`` (field 0: the bytes of all the segment's objects), ``object_prefix`` and ``object_key``
(fields 1 and 2: where its objects are), each null when absent; ``custom_metadata_error`` says why bytes that were
recorded did not decode (then the three are null), and is null otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOPICS_FILE = "topics.parquet"
SEGMENTS_FILE = "segments.parquet"
EPOCHS_FILE = "epochs.parquet"
SOURCE_FILE = "source.json"  # where the metadata came from (a Kafka export's; a store export has none: the store)

SOURCE_STORE = "store"
SOURCE_KAFKA = "kafka"
SOURCES = (SOURCE_STORE, SOURCE_KAFKA)

# Segment columns added after the first exports (nullable, at the end): an older export reads them as null.
ADDED_SEGMENT_COLUMNS = ("remote_size", "object_prefix", "object_key", "custom_metadata_error")


def _pa() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa


def topics_schema() -> Any:
    pa = _pa()
    return pa.schema(
        [
            pa.field("topic_id", pa.string(), nullable=False),
            pa.field("name", pa.string(), nullable=False),
            pa.field("state", pa.string(), nullable=False),
            pa.field("tiered_epoch", pa.int32(), nullable=False),
            pa.field("policy", pa.string(), nullable=False),
            pa.field("retention_ms", pa.int64(), nullable=False),
            pa.field("retention_bytes", pa.int64(), nullable=False),
            pa.field("local_retention_ms", pa.int64(), nullable=False),
            pa.field("deleted", pa.bool_(), nullable=False),
        ]
    )


def segments_schema() -> Any:
    pa = _pa()
    return pa.schema(
        [
            pa.field("topic_id", pa.string(), nullable=False),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("segment_id", pa.string(), nullable=False),
            pa.field("start_offset", pa.int64(), nullable=False),
            pa.field("end_offset", pa.int64(), nullable=False),
            pa.field("size_bytes", pa.int64(), nullable=False),
            pa.field("tiered_epoch", pa.int32(), nullable=False),
            pa.field("state", pa.string(), nullable=False),
            pa.field("max_timestamp_ms", pa.int64(), nullable=False),
            pa.field("event_timestamp_ms", pa.int64(), nullable=False),
            pa.field("remote_size", pa.int64(), nullable=True),
            pa.field("object_prefix", pa.string(), nullable=True),
            pa.field("object_key", pa.string(), nullable=True),
            pa.field("custom_metadata_error", pa.string(), nullable=True),
        ]
    )


def epochs_schema() -> Any:
    pa = _pa()
    return pa.schema(
        [
            pa.field("topic_id", pa.string(), nullable=False),
            pa.field("tiered_epoch", pa.int32(), nullable=False),
            pa.field("state", pa.string(), nullable=False),
        ]
    )


@dataclass(frozen=True, slots=True)
class ExportSource:
    """``source.json``: where an export's metadata was read. ``store`` (no file: every export before it) or
    ``kafka``: a cluster's ``bootstrap_servers`` and its remote log metadata topic ``rlmm_topic``, of which
    ``records`` were folded."""

    source: str = SOURCE_STORE
    bootstrap_servers: str | None = None
    rlmm_topic: str | None = None
    records: int = 0


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """One row of the export's ``topics.parquet``."""

    topic_id: str
    name: str
    state: str  # TieredState name
    tiered_epoch: int
    policy: str  # DisablePolicy name
    retention_ms: int
    retention_bytes: int
    deleted: bool


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """One row of the export's ``segments.parquet``."""

    topic_id: str
    topic: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    size_bytes: int
    tiered_epoch: int
    state: str  # SegmentState name
    max_timestamp_ms: int
    event_timestamp_ms: int
    remote_size: int | None = None  # custom metadata REMOTE_SIZE: bytes of all the segment's objects
    object_prefix: str | None = None  # custom metadata OBJECT_PREFIX: the prefix its objects are under
    object_key: str | None = None  # custom metadata OBJECT_KEY: the main path of its objects' keys
    custom_metadata_error: str | None = None  # why recorded custom metadata did not decode

    @property
    def recorded_location(self) -> bool:
        """Its custom metadata says where its objects are (a prefix, a key, or both)."""
        return self.object_prefix is not None or self.object_key is not None
