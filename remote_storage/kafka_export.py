"""A metadata export written from what any Kafka cluster says over its protocol: the second writer of the export.

The scan joins the bucket's inventory against an export directory (:mod:`remote_storage.export_format`). The store
export (:mod:`remote_storage.export`) writes it from our metadata store; this module writes the same files from a
Kafka cluster's answers, which the CLI gathers (``orchestrator/cli/kafka_source.py``):

* topics, their ids and configs: Metadata and DescribeConfigs;
* remote segments: every record of the remote log metadata topic (default ``__remote_log_metadata``), decoded as
  Kafka's ``RemoteLogMetadataSerde`` (record versions 0 and 1, :mod:`remote_storage.rlmm_topic.serde`) and folded by
  the same rules as our store's RLMM (:class:`remote_storage.rlmm.RlmmFold`), each topic-partition's records in the
  offset order of the one metadata partition that holds them all.

What Kafka's protocol cannot say, and what the export says instead (the rules that fit a cluster we did not build):

* **Tiered state.** From the configs (:func:`tiered_status`): ``remote.storage.enable=true`` is ENABLED, or DISABLED
  with the retain policy under ``remote.log.copy.disable=true``; ``remote.storage.enable=false`` with
  ``remote.log.delete.on.disable=true`` (Kafka 3.9) or our ``remote.log.disable.policy=delete`` is DISABLED with the
  delete policy (Kafka deletes once, during the config change: what remains is left over); with
  ``remote.log.disable.policy=retain`` DISABLED retain; otherwise never tiered.
* **Deleted topics.** A topic id the metadata topic's records name and Metadata no longer lists was a topic of this
  cluster (brokers record copies of their own topics only) and is gone: it is exported deleted, with the name the
  records give. A topic id neither names is unknown, as with the store.
* **Tiered epochs.** Kafka has no tiered-state history: the export has none (``epochs.parquet`` is empty), so no
  segment gets a stale-epoch verdict (the contract's rule for a topic without history). Segments keep the
  ``TieredEpoch`` tag when a writer of ours recorded it, -1 when not (Kafka's own records).

Invariants:
* Nothing is written unless the metadata topic keeps every record (:func:`check_metadata_topic_kept`): with
  ``retention.ms`` or ``retention.bytes`` not -1, or a partition whose log start offset is above 0, copy records may
  be gone and live segments would look orphaned, so a scan of it must never exist for ``reclaim`` to act on.
* A record that does not decode, or a null value, stops the export naming its partition and offset: a record
  skipped could be the copy record of a live segment.
* A topic whose data is not in the log-segment layout (``segment.format`` other than ``log``, e.g. ``iceberg``)
  stops the export naming it (:func:`check_segment_formats`).
* The export directory records its source in ``source.json`` (:data:`~remote_storage.export_format.SOURCE_FILE`):
  ``reclaim`` re-reads the same cluster's metadata topic before it deletes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.errors import ProtocolError, ScanInputError
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, TieredState
from orchestrator.metadata.topic_configs import (
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    REMOTE_LOG_DISABLE_POLICY,
    REMOTE_STORAGE_ENABLE,
    RETENTION_BYTES,
    RETENTION_MS,
)
from remote_storage.export import ExportedTopic, ExportResult, rlmm_record_facts, write_export
from remote_storage.export_format import SOURCE_FILE, ExportSource
from remote_storage.rlmm import RecordedRlmm, RlmmFold
from remote_storage.rlmm_topic.serde import decode_value

SEGMENT_FORMAT = "segment.format"  # a topic config some distributions set when a topic's data is not log segments
LOG_SEGMENT_FORMATS = frozenset({"", "log", "kafka"})  # the layout this scan reads


class MetadataTopicNotKept(ScanInputError):
    """The remote log metadata topic may have lost records (time or size retention, or a log start above 0): a scan
    of it could call live segments orphans, so none is made. The message names the topic, its retention and what
    to do."""

    name, retriable = "RLMM_TOPIC_NOT_KEPT", False


class UnreadableMetadataRecord(ScanInputError):
    """A record of the remote log metadata topic does not decode (or is null): the message names where it is."""

    name, retriable = "UNREADABLE_RLMM_RECORD", False


class UnsupportedSegmentFormat(ScanInputError):
    """Topics whose data is not in Kafka's log-segment layout (e.g. ``segment.format=iceberg``): named in the
    message; their objects cannot be judged by this scan."""

    name, retriable = "UNSUPPORTED_SEGMENT_FORMAT", False


@dataclass(frozen=True, slots=True)
class KafkaTopic:
    """A topic as Metadata and DescribeConfigs tell it."""

    name: str
    topic_id: Uuid
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MetadataTopicState:
    """The remote log metadata topic as the cluster describes it: its configs, and per partition its log start and
    end offsets (ListOffsets earliest and latest)."""

    name: str
    configs: Mapping[str, str]
    log_start_offsets: Mapping[int, int]
    end_offsets: Mapping[int, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        """The records its partitions hold, from their log start to their end."""
        return sum(end - self.log_start_offsets.get(p, 0) for p, end in self.end_offsets.items())


@dataclass(frozen=True, slots=True)
class MetadataRecordAt:
    """A decoded record of the metadata topic, where it was read."""

    partition: int
    offset: int
    record: MetadataRecord


def check_metadata_topic_kept(topic: MetadataTopicState) -> None:
    """Raise :class:`MetadataTopicNotKept` unless the topic keeps every record it was ever given."""
    retention_ms = topic.configs.get(RETENTION_MS)
    retention_bytes = topic.configs.get(RETENTION_BYTES, "-1")
    trimmed = {p: start for p, start in sorted(topic.log_start_offsets.items()) if start > 0}
    problems = []
    if retention_ms != "-1":
        problems.append(f"retention.ms is {retention_ms if retention_ms is not None else 'not described'}")
    if retention_bytes != "-1":
        problems.append(f"retention.bytes is {retention_bytes}")
    if trimmed:
        listed = ", ".join(f"{p} starts at {start}" for p, start in list(trimmed.items())[:5])
        more = f" and {len(trimmed) - 5} more" if len(trimmed) > 5 else ""
        problems.append(f"partition(s) {listed}{more}")
    if problems:
        raise MetadataTopicNotKept(
            f"the remote log metadata topic {topic.name} may not hold every record ({'; '.join(problems)}): copy "
            "records already gone would make live segments look orphaned, so no scan is made. Set retention.ms=-1 "
            f"and retention.bytes=-1 on {topic.name} (it keeps what it still holds from then on; records already "
            "deleted stay lost), or scan with --source store against the cluster's metadata store"
        )


def check_segment_formats(topics: Iterable[KafkaTopic]) -> None:
    """Raise :class:`UnsupportedSegmentFormat` naming every topic whose data is not log segments."""
    foreign = sorted(
        (t.name, t.configs[SEGMENT_FORMAT])
        for t in topics
        if t.configs.get(SEGMENT_FORMAT, "").lower() not in LOG_SEGMENT_FORMATS
    )
    if foreign:
        named = ", ".join(f"{name} ({SEGMENT_FORMAT}={value})" for name, value in foreign)
        raise UnsupportedSegmentFormat(
            f"topic(s) {named} keep their data in another layout than Kafka's log segments; this scan cannot judge "
            "their objects and refuses rather than call them orphans"
        )


def decoded_record(partition: int, offset: int, value: bytes | None, *, topic: str) -> MetadataRecordAt:
    """A value of the metadata topic, decoded; :class:`UnreadableMetadataRecord` naming where, when it is not one."""
    if value is None:
        raise UnreadableMetadataRecord(f"{topic}-{partition} offset {offset} has a null value, not an RLMM record")
    try:
        return MetadataRecordAt(partition, offset, decode_value(value))
    except ProtocolError as exc:
        raise UnreadableMetadataRecord(
            f"{topic}-{partition} offset {offset} does not decode as a remote log metadata record: {exc.message}; "
            "a record left out could be a live segment's copy, so nothing is folded"
        ) from exc


def fold_records(records: Iterable[MetadataRecordAt]) -> RecordedRlmm:
    """The records as one RLMM log: each metadata partition's records in offset order, partitions one after the other
    (every record of a topic-partition is in one of them, so each topic-partition is folded in its own order)."""
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    return RecordedRlmm(r.record for r in ordered)


def tiered_status(configs: Mapping[str, str]) -> tuple[TieredState, DisablePolicy]:
    """A topic's tiered state and policy, from its configs alone (see the module docstring)."""
    if configs.get(REMOTE_STORAGE_ENABLE) == "true":
        if configs.get(REMOTE_LOG_COPY_DISABLE) == "true":
            return TieredState.DISABLED, DisablePolicy.RETAIN
        return TieredState.ENABLED, DisablePolicy.NONE
    policy = configs.get(REMOTE_LOG_DISABLE_POLICY)
    if configs.get(REMOTE_LOG_DELETE_ON_DISABLE) == "true" or policy == "delete":
        return TieredState.DISABLED, DisablePolicy.DELETE
    if policy == "retain":
        return TieredState.DISABLED, DisablePolicy.RETAIN
    return TieredState.NOT_TIERED, DisablePolicy.NONE


def exported_topics(live: Sequence[KafkaTopic], fold: RlmmFold) -> list[ExportedTopic]:
    """The live topics as the export has them, and as deleted ones the topic ids the records name that are gone."""
    out = []
    for t in live:
        state, policy = tiered_status(t.configs)
        out.append(ExportedTopic(t.topic_id, t.name, state, 0, policy, t.configs, deleted=False))
    listed = {t.topic_id for t in live}
    for topic_id in sorted(fold.topic_ids() - listed, key=str):
        name = fold.topic_name(topic_id) or ""
        out.append(ExportedTopic(topic_id, name, TieredState.NOT_TIERED, 0, DisablePolicy.NONE, {}, deleted=True))
    return out


def export_kafka(
    dest_dir: str | os.PathLike[str],
    *,
    topics: Sequence[KafkaTopic],
    metadata_topic: MetadataTopicState,
    records: Iterable[MetadataRecordAt],
    source: ExportSource,
) -> ExportResult:
    """Check, fold and write: the export of a Kafka cluster under ``dest_dir``, with its ``source.json``."""
    check_metadata_topic_kept(metadata_topic)
    check_segment_formats(topics)
    log = fold_records(records)
    fold = RlmmFold(log)
    fold.refresh()
    result = write_export(
        dest_dir, topics=exported_topics(topics, fold), epochs=[], fold=fold, facts=rlmm_record_facts(log), offset=-1
    )
    write_source(Path(dest_dir), source)
    return result


def write_source(dest: Path, source: ExportSource) -> None:
    """``source.json`` of an export, written atomically."""
    tmp = dest / f".{SOURCE_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(source), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, dest / SOURCE_FILE)
