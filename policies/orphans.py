"""The pure reference classifier of bucket objects: categories, reclaimability and anomalies, in plain Python.

It implements :mod:`remote_storage.scan.contract` object by object, with no I/O and no clock: everything it needs
(objects, exported metadata, ``now_ms``, ``grace_ms``) is an argument. Two callers rely on it:

* the hypothesis test that the Spark job and this classifier agree on every generated bucket, and
* ``reclaim``, which re-checks each object of a scan against *current* metadata with :func:`classify_object`
  before it deletes anything (an inventory is eventually consistent and metadata moves on).

Key parsing is :func:`remote_storage.keys.parse_key` and retention is :func:`policies.retention.plan_remote_expiry`,
so the scan cannot drift from what the brokers do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from policies.retention import plan_remote_expiry
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SEGMENT_SUFFIXES, KeyParseError, ObjectKey, parse_key
from remote_storage.rlmm import RemoteSegment
from remote_storage.scan import contract as c

_DELETE_STATES = ("DISABLING", "DISABLED")
_COPY_STATES = (SegmentState.COPY_SEGMENT_STARTED.name, SegmentState.COPY_SEGMENT_FINISHED.name)


@dataclass(frozen=True, slots=True)
class BucketObject:
    key: str
    size: int
    last_modified_ms: int  # -1 when unknown


@dataclass(frozen=True, slots=True)
class ObjectVerdict:
    key: str
    size: int
    category: str
    reclaimable: bool
    anomaly: str | None
    topic_id: str | None
    segment_id: str | None


@dataclass(frozen=True, slots=True)
class Anomaly:
    type: str
    topic_id: str | None
    segment_id: str | None
    key: str | None


@dataclass(frozen=True, slots=True)
class Metadata:
    """The exported metadata, indexed for look-ups."""

    topics: Mapping[str, TopicMeta]
    segments: Mapping[tuple[str, str], SegmentMeta]  # (topic id, segment id) -> segment
    enabled_epochs: Mapping[str, frozenset[int]]  # topic id -> epochs at which it was ENABLED
    expired: frozenset[tuple[str, str]]  # (topic id, segment id) of segments past retention

    @classmethod
    def build(
        cls,
        topics: Iterable[TopicMeta],
        segments: Iterable[SegmentMeta],
        epochs: Iterable[tuple[str, int, str]],
        *,
        now_ms: int,
    ) -> Metadata:
        by_id = {t.topic_id: t for t in topics}
        segs = list(segments)
        enabled: dict[str, set[int]] = defaultdict(set)
        for topic_id, epoch, state in epochs:
            if state == "ENABLED":
                enabled[topic_id].add(epoch)
        return cls(
            topics=by_id,
            segments={(s.topic_id, s.segment_id): s for s in segs},
            enabled_epochs={k: frozenset(v) for k, v in enabled.items()},
            expired=expired_segments(by_id, segs, now_ms=now_ms),
        )


def deletes_everything(topic: TopicMeta) -> bool:
    """DISABLING or DISABLED with the delete policy: none of the topic id's remote data is meant to stay."""
    return topic.state in _DELETE_STATES and topic.policy == "DELETE"


def expired_segments(
    topics: Mapping[str, TopicMeta], segments: Sequence[SegmentMeta], *, now_ms: int
) -> frozenset[tuple[str, str]]:
    """(Topic id, segment id) of the segments retention expires now, per partition, by the brokers' own planner."""
    by_partition: dict[tuple[str, int], list[SegmentMeta]] = defaultdict(list)
    for s in segments:
        topic = topics.get(s.topic_id)
        if topic is not None and not topic.deleted and s.state == SegmentState.COPY_SEGMENT_FINISHED.name:
            by_partition[(s.topic_id, s.partition)].append(s)
    out: set[tuple[str, str]] = set()
    for (topic_id, _), segs in by_partition.items():
        topic = topics[topic_id]
        segs.sort(key=lambda s: (s.start_offset, s.end_offset, s.segment_id))  # ties: the order the Spark job uses
        remote = [_remote_segment(s) for s in segs]
        plan = plan_remote_expiry(
            remote,
            now_ms=now_ms,
            retention_ms=topic.retention_ms,
            retention_bytes=topic.retention_bytes,
            log_start_offset=-1,
        )
        out.update((topic_id, str(s.segment_id)) for s in plan.expired)
    return frozenset(out)


def _remote_segment(s: SegmentMeta) -> RemoteSegment:
    """An exported segment row as the RLMM's segment, for the brokers' retention planner."""
    return RemoteSegment(
        topic=s.topic,
        topic_id=Uuid.from_string(s.topic_id),
        partition=s.partition,
        segment_id=Uuid.from_string(s.segment_id),
        start_offset=s.start_offset,
        end_offset=s.end_offset,
        max_timestamp_ms=s.max_timestamp_ms,
        size_bytes=s.size_bytes,
        tiered_epoch=s.tiered_epoch,
        state=SegmentState[s.state],
    )


def classify_object(
    obj: BucketObject, meta: Metadata, *, prefix: str, now_ms: int, grace_ms: int
) -> tuple[ObjectVerdict, ObjectKey | None]:
    """The category, reclaimability and object-level anomaly of one object (ARCHITECTURE §7, contract order)."""

    def verdict(category: str, anomaly: str | None = None, parsed: ObjectKey | None = None) -> ObjectVerdict:
        age = now_ms - obj.last_modified_ms if obj.last_modified_ms >= 0 else -1
        reclaimable = category in c.RECLAIMABLE and (category in c.NO_GRACE or (age >= 0 and age >= grace_ms))
        tid = str(parsed.segment.topic_id) if parsed else None
        sid = str(parsed.segment.segment_id) if parsed else None
        return ObjectVerdict(obj.key, obj.size, category, reclaimable, anomaly, tid, sid)

    if not obj.key.startswith(prefix):
        return verdict(c.OUTSIDE_PREFIX), None
    try:
        parsed = parse_key(obj.key, prefix)
    except KeyParseError:
        return verdict(c.UNPARSEABLE, c.UNPARSEABLE_KEY), None
    tid, sid = str(parsed.segment.topic_id), str(parsed.segment.segment_id)
    topic = meta.topics.get(tid)
    if topic is None:
        return verdict(c.UNKNOWN_TOPIC, parsed=parsed), parsed
    if topic.deleted:
        return verdict(c.DELETED_TOPIC, parsed=parsed), parsed
    if deletes_everything(topic):
        anomaly = c.DELETE_INCOMPLETE if topic.state == "DISABLED" else None
        return verdict(c.DISABLED_DELETE, anomaly, parsed), parsed
    seg = meta.segments.get((tid, sid))
    if seg is None:
        return verdict(c.NO_RLMM_ENTRY, parsed=parsed), parsed
    if seg.state == SegmentState.DELETE_SEGMENT_FINISHED.name:
        return verdict(c.RLMM_DELETED, c.DELETE_INCOMPLETE, parsed), parsed
    if seg.state == SegmentState.DELETE_SEGMENT_STARTED.name:
        stuck = seg.event_timestamp_ms >= 0 and now_ms - seg.event_timestamp_ms >= grace_ms
        return verdict(c.PENDING_DELETE, c.DELETE_INCOMPLETE if stuck else None, parsed), parsed
    if seg.state == SegmentState.COPY_SEGMENT_STARTED.name:
        return verdict(c.COPY_UNFINISHED, parsed=parsed), parsed
    mismatch = parsed.suffix.value == "log" and obj.size != seg.size_bytes
    category = c.PAST_RETENTION if (tid, sid) in meta.expired else c.LIVE
    return verdict(category, c.SIZE_MISMATCH if mismatch else None, parsed), parsed


def segment_anomalies(meta: Metadata, present: Mapping[tuple[str, str], set[str]]) -> list[Anomaly]:
    """Segment-level anomalies; ``present`` maps (topic id, segment id) to the suffixes found in the inventory."""
    out: list[Anomaly] = []
    chains: dict[tuple[str, int, int], list[SegmentMeta]] = defaultdict(list)
    for (tid, sid), seg in meta.segments.items():
        topic = meta.topics.get(tid)
        if topic is None:
            continue
        if seg.state in _COPY_STATES and seg.tiered_epoch not in meta.enabled_epochs.get(tid, frozenset()):
            out.append(Anomaly(c.STALE_EPOCH_COPY, tid, sid, None))
        if topic.deleted or seg.state != SegmentState.COPY_SEGMENT_FINISHED.name:
            continue
        found = len(present.get((tid, sid), set()))
        if found == 0:
            out.append(Anomaly(c.MISSING_OBJECTS, tid, sid, None))
        elif found < len(SEGMENT_SUFFIXES):
            out.append(Anomaly(c.INCOMPLETE_OBJECT_SET, tid, sid, None))
        chains[(tid, seg.partition, seg.tiered_epoch)].append(seg)
    for chain in chains.values():
        chain.sort(key=lambda s: (s.start_offset, s.end_offset, s.segment_id))
        for prev, cur in pairwise(chain):
            if cur.start_offset > prev.end_offset + 1:
                out.append(Anomaly(c.OFFSET_GAP, cur.topic_id, cur.segment_id, None))
            elif cur.start_offset <= prev.end_offset:
                out.append(Anomaly(c.OFFSET_OVERLAP, cur.topic_id, cur.segment_id, None))
    return out


@dataclass(frozen=True, slots=True)
class Classification:
    objects: tuple[ObjectVerdict, ...]
    anomalies: tuple[Anomaly, ...]  # object-level and segment-level


def classify(
    objects: Iterable[BucketObject], meta: Metadata, *, prefix: str, now_ms: int, grace_ms: int
) -> Classification:
    """Every object's verdict, and every anomaly (object level first, then segment level)."""
    verdicts: list[ObjectVerdict] = []
    anomalies: list[Anomaly] = []
    present: dict[tuple[str, str], set[str]] = defaultdict(set)
    for obj in objects:
        v, parsed = classify_object(obj, meta, prefix=prefix, now_ms=now_ms, grace_ms=grace_ms)
        verdicts.append(v)
        if v.anomaly is not None:
            anomalies.append(Anomaly(v.anomaly, v.topic_id, v.segment_id, v.key))
        if parsed is not None:
            present[(str(parsed.segment.topic_id), str(parsed.segment.segment_id))].add(parsed.suffix.value)
    anomalies.extend(segment_anomalies(meta, present))
    return Classification(tuple(verdicts), tuple(anomalies))
