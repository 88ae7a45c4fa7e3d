"""The metadata export's format: its three Parquet files, their columns, and the rows the scan's reference reads.

Pure (no I/O here): the writer and reader live in :mod:`remote_storage.export`; the Spark job reads the same files
by these names, and the reference classifier (:mod:`policies.orphans`) takes :class:`TopicMeta` and
:class:`SegmentMeta` rows. pyarrow is an optional dependency (the ``spark`` extra), so the schemas import it
when asked for.

Invariants: column names and types are fixed by :func:`topics_schema`, :func:`segments_schema` and
:func:`epochs_schema` (an empty export has the same schema); ids are their 22-character KIP-516 strings, states
and policies their enum names; a row class has exactly its file's columns, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOPICS_FILE = "topics.parquet"
SEGMENTS_FILE = "segments.parquet"
EPOCHS_FILE = "epochs.parquet"


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
