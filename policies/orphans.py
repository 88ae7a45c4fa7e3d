"""The pure reference classifier of bucket objects: categories, reclaimability and anomalies, in plain Python.

It implements :mod:`remote_storage.scan.contract` object by object, with no I/O and no clock: everything it needs
(objects, exported metadata, ``now_ms``, ``grace_ms``) is an argument. Two callers rely on it:

* the hypothesis test that the Spark job and this classifier agree on every generated bucket, and
* ``reclaim``, which re-checks each object of a scan against *current* metadata with :func:`classify_object`
  before it deletes anything (an inventory is eventually consistent and metadata moves on).

Key parsing is :func:`remote_storage.keys.parse_key`, a segment's recorded location is
:func:`remote_storage.segment_format.object_keys.segment_object_key` and retention is
:func:`policies.retention.plan_remote_expiry`, so the scan cannot drift from what the brokers do.

Sizes are judged per segment by the contract's size rule. When the rule needs a segment's manifest, what the
manifest says is an input (:class:`~remote_storage.scan.manifest_reading.ManifestReading`, the same value the
scan's executors make of the bytes they GET): :func:`manifests_needed` names the segments whose manifest must be
read, and :func:`classify` takes the readings (None when manifests are not read at all).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from orchestrator.ids import Uuid
from orchestrator.metadata.records import SegmentState
from policies.retention import plan_remote_expiry
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SEGMENT_SUFFIXES, KeyParseError, ObjectKey, SegmentKey, Suffix, parse_key
from remote_storage.rlmm import RemoteSegment
from remote_storage.scan import contract as c
from remote_storage.scan import manifest_reading as mr
from remote_storage.scan.manifest_reading import ManifestReading
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata
from remote_storage.segment_format.object_keys import segment_object_key

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
    object_prefix: str | None = None  # the prefix it was found under (scanned or recorded); None if not parsed


@dataclass(frozen=True, slots=True)
class Anomaly:
    type: str
    topic_id: str | None
    segment_id: str | None
    key: str | None


@dataclass(frozen=True, slots=True)
class RecordedObject:
    """A key a segment's custom metadata says one of its objects is at."""

    segment: SegmentMeta
    suffix: Suffix
    prefix: str | None  # the recorded prefix; None: only a key was recorded, under the scanned prefix


def _owner_order(r: RecordedObject) -> tuple[str, str]:
    return (r.segment.topic_id, r.segment.segment_id)


def segment_key_of(s: SegmentMeta) -> SegmentKey:
    """The key layout's view of an exported segment row."""
    topic_id, segment_id = Uuid.from_string(s.topic_id), Uuid.from_string(s.segment_id)
    return SegmentKey(s.topic, topic_id, s.partition, s.start_offset, segment_id)


def recorded_objects(segments: Iterable[SegmentMeta]) -> tuple[dict[str, RecordedObject], dict[str, RecordedObject]]:
    """The recorded locations: (whole keys of segments that record a prefix, keys below the scanned prefix of those
    that record only a key); a key several segments record belongs to the smallest (topic id, segment id)."""
    whole: dict[str, RecordedObject] = {}
    below: dict[str, RecordedObject] = {}
    for s in segments:
        if not s.recorded_location:
            continue
        recorded = SegmentCustomMetadata(object_prefix=s.object_prefix, object_key=s.object_key)
        key = segment_key_of(s)
        for suffix in SEGMENT_SUFFIXES:
            location = segment_object_key(configured_prefix="", segment=key, suffix=suffix, custom_metadata=recorded)
            table = whole if s.object_prefix is not None else below
            entry = RecordedObject(s, suffix, s.object_prefix)
            current = table.get(location.value)
            if current is None or _owner_order(entry) < _owner_order(current):
                table[location.value] = entry
    return whole, below


@dataclass(frozen=True, slots=True)
class Metadata:
    """The exported metadata, indexed for look-ups."""

    topics: Mapping[str, TopicMeta]
    segments: Mapping[tuple[str, str], SegmentMeta]  # (topic id, segment id) -> segment
    enabled_epochs: Mapping[str, frozenset[int]]  # topic id -> epochs at which it was ENABLED
    expired: frozenset[tuple[str, str]]  # (topic id, segment id) of segments past retention
    recorded_keys: Mapping[str, RecordedObject] = field(default_factory=dict)  # whole keys (a prefix recorded)
    recorded_paths: Mapping[str, RecordedObject] = field(default_factory=dict)  # keys below the scanned prefix
    # topic ids with a tiered-state history (a Kafka cluster's export has none: no stale-epoch verdict for them)
    with_history: frozenset[str] = frozenset()

    def locate(self, key: str, prefix: str) -> tuple[RecordedObject, str] | None:
        """The segment object ``key`` is by a recorded location, with the prefix it is under; None if none."""
        found = [(r, r.prefix or "") for r in (self.recorded_keys.get(key),) if r is not None]
        if key.startswith(prefix):
            below = self.recorded_paths.get(key[len(prefix) :])
            if below is not None:
                found.append((below, prefix))
        return min(found, key=lambda f: _owner_order(f[0])) if found else None

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
        with_history: set[str] = set()
        for topic_id, epoch, state in epochs:
            with_history.add(topic_id)
            if state == "ENABLED":
                enabled[topic_id].add(epoch)
        whole, below = recorded_objects(segs)
        return cls(
            topics=by_id,
            segments={(s.topic_id, s.segment_id): s for s in segs},
            enabled_epochs={k: frozenset(v) for k, v in enabled.items()},
            expired=expired_segments(by_id, segs, now_ms=now_ms),
            recorded_keys=whole,
            recorded_paths=below,
            with_history=frozenset(with_history),
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
    parsed: ObjectKey | None = None
    found_under: str | None = None

    def verdict(category: str, anomaly: str | None = None) -> ObjectVerdict:
        age = now_ms - obj.last_modified_ms if obj.last_modified_ms >= 0 else -1
        reclaimable = category in c.RECLAIMABLE and (category in c.NO_GRACE or (age >= 0 and age >= grace_ms))
        tid = str(parsed.segment.topic_id) if parsed else None
        sid = str(parsed.segment.segment_id) if parsed else None
        return ObjectVerdict(obj.key, obj.size, category, reclaimable, anomaly, tid, sid, found_under)

    located = meta.locate(obj.key, prefix)
    if located is not None:
        recorded, found_under = located
        parsed = ObjectKey(segment_key_of(recorded.segment), recorded.suffix)
    elif not obj.key.startswith(prefix):
        return verdict(c.OUTSIDE_PREFIX), None
    else:
        try:
            parsed = parse_key(obj.key, prefix)
        except KeyParseError:
            return verdict(c.UNPARSEABLE, c.UNPARSEABLE_KEY), None
        found_under = prefix
    tid, sid = str(parsed.segment.topic_id), str(parsed.segment.segment_id)
    topic = meta.topics.get(tid)
    if topic is None:
        return verdict(c.UNKNOWN_TOPIC), parsed
    if topic.deleted:
        return verdict(c.DELETED_TOPIC), parsed
    if deletes_everything(topic):
        return verdict(c.DISABLED_DELETE, c.DELETE_INCOMPLETE if topic.state == "DISABLED" else None), parsed
    seg = meta.segments.get((tid, sid))
    if seg is None:
        return verdict(c.NO_RLMM_ENTRY), parsed
    if seg.state == SegmentState.DELETE_SEGMENT_FINISHED.name:
        return verdict(c.RLMM_DELETED, c.DELETE_INCOMPLETE), parsed
    if seg.state == SegmentState.DELETE_SEGMENT_STARTED.name:
        stuck = seg.event_timestamp_ms >= 0 and now_ms - seg.event_timestamp_ms >= grace_ms
        return verdict(c.PENDING_DELETE, c.DELETE_INCOMPLETE if stuck else None), parsed
    if seg.state == SegmentState.COPY_SEGMENT_STARTED.name:
        return verdict(c.COPY_UNFINISHED), parsed
    return verdict(c.PAST_RETENTION if (tid, sid) in meta.expired else c.LIVE), parsed


@dataclass(frozen=True, slots=True)
class FoundObjects:
    """What the inventory holds of one segment: its suffixes, the bytes of all its objects, and its ``.log`` and
    ``.rsm-manifest`` as (key, size), the smallest key of each when there are several."""

    suffixes: frozenset[str] = frozenset()
    total_size: int = 0
    log: tuple[str, int] | None = None
    manifest: tuple[str, int] | None = None

    def add(self, key: str, suffix: str, size: int) -> FoundObjects:
        log, manifest = self.log, self.manifest
        if suffix == Suffix.LOG.value and (log is None or key < log[0]):
            log = (key, size)
        if suffix == Suffix.MANIFEST.value and (manifest is None or key < manifest[0]):
            manifest = (key, size)
        return FoundObjects(self.suffixes | {suffix}, self.total_size + size, log, manifest)


NEEDS_MANIFEST = "needs_manifest"  # the size rule's step 3: only the manifest can tell


def _size_judged(topic: TopicMeta, seg: SegmentMeta) -> bool:
    return not topic.deleted and not deletes_everything(topic) and seg.state == SegmentState.COPY_SEGMENT_FINISHED.name


def size_step(seg: SegmentMeta, found: FoundObjects) -> str | None:
    """Steps 1 and 2 of the size rule for a judged segment whose ``.log`` is found: None (right, or not judged),
    :data:`~remote_storage.scan.contract.SIZE_MISMATCH`, or :data:`NEEDS_MANIFEST`."""
    assert found.log is not None
    if seg.remote_size is not None:
        complete = len(found.suffixes) == len(SEGMENT_SUFFIXES)
        return c.SIZE_MISMATCH if complete and found.total_size != seg.remote_size else None
    if found.log[1] == seg.size_bytes:
        return None
    return NEEDS_MANIFEST if found.manifest is not None else None  # no manifest: manifest_missing says it


def manifests_needed(meta: Metadata, found: Mapping[tuple[str, str], FoundObjects]) -> list[tuple[str, str, str]]:
    """(Topic id, segment id, manifest key) of every segment whose size only its manifest can judge: one GET each."""
    out = []
    for (tid, sid), objs in sorted(found.items()):
        seg, topic = meta.segments.get((tid, sid)), meta.topics.get(tid)
        if seg is None or topic is None or objs.log is None or not _size_judged(topic, seg):
            continue
        if size_step(seg, objs) == NEEDS_MANIFEST and objs.manifest is not None:
            out.append((tid, sid, objs.manifest[0]))
    return out


def _size_anomaly(
    seg: SegmentMeta, objs: FoundObjects, manifests: Mapping[tuple[str, str], ManifestReading] | None
) -> Anomaly | None:
    """The size rule's anomaly for a judged segment whose ``.log`` is found (see the contract)."""
    assert objs.log is not None
    step = size_step(seg, objs)
    if step is None:
        return None
    log_key = objs.log[0]
    if step == c.SIZE_MISMATCH or manifests is None:
        return Anomaly(c.SIZE_MISMATCH, seg.topic_id, seg.segment_id, log_key)
    assert objs.manifest is not None
    reading = manifests.get((seg.topic_id, seg.segment_id), ManifestReading(mr.GONE))
    if reading.kind == mr.UNREADABLE:
        return Anomaly(c.MANIFEST_UNREADABLE, seg.topic_id, seg.segment_id, objs.manifest[0])
    if reading.kind == mr.LEGACY or (reading.kind == mr.AIVEN and reading.transformed_size != objs.log[1]):
        return Anomaly(c.SIZE_MISMATCH, seg.topic_id, seg.segment_id, log_key)
    return None


def segment_anomalies(
    meta: Metadata,
    found: Mapping[tuple[str, str], FoundObjects],
    manifests: Mapping[tuple[str, str], ManifestReading] | None = None,
) -> list[Anomaly]:
    """Segment-level anomalies; ``found`` maps (topic id, segment id) to what the inventory holds of it, and
    ``manifests`` to what its manifest said when read (None: manifests were not read; a needed one absent: gone)."""
    out: list[Anomaly] = []
    chains: dict[tuple[str, int, int], list[SegmentMeta]] = defaultdict(list)
    for (tid, sid), seg in meta.segments.items():
        topic = meta.topics.get(tid)
        if topic is None:
            continue
        stale = seg.tiered_epoch not in meta.enabled_epochs.get(tid, frozenset())
        if seg.state in _COPY_STATES and tid in meta.with_history and stale:
            out.append(Anomaly(c.STALE_EPOCH_COPY, tid, sid, None))
        if seg.custom_metadata_error is not None:
            out.append(Anomaly(c.CUSTOM_METADATA_UNREADABLE, tid, sid, None))
        if topic.deleted or seg.state != SegmentState.COPY_SEGMENT_FINISHED.name:
            continue
        objs = found.get((tid, sid), FoundObjects())
        if not objs.suffixes:
            out.append(Anomaly(c.MISSING_OBJECTS, tid, sid, None))
        elif objs.log is not None and objs.manifest is None:
            out.append(Anomaly(c.MANIFEST_MISSING, tid, sid, None))
        elif len(objs.suffixes) < len(SEGMENT_SUFFIXES):
            out.append(Anomaly(c.INCOMPLETE_OBJECT_SET, tid, sid, None))
        chains[(tid, seg.partition, seg.tiered_epoch)].append(seg)
        if objs.log is not None and _size_judged(topic, seg):
            size = _size_anomaly(seg, objs, manifests)
            if size is not None:
                out.append(size)
    for chain in chains.values():
        chain.sort(key=lambda s: (s.start_offset, s.end_offset, s.segment_id))
        for prev, cur in pairwise(chain):
            if cur.start_offset > prev.end_offset + 1:
                out.append(Anomaly(c.OFFSET_GAP, cur.topic_id, cur.segment_id, None))
            elif cur.start_offset <= prev.end_offset:
                overlap = c.OFFSET_OVERLAP if cur.topic_id in meta.with_history else c.OVERLAP_AFTER_LEADER_CHANGE
                out.append(Anomaly(overlap, cur.topic_id, cur.segment_id, None))
    return out


@dataclass(frozen=True, slots=True)
class Classification:
    objects: tuple[ObjectVerdict, ...]
    anomalies: tuple[Anomaly, ...]  # object-level and segment-level


def found_objects(verdicts: Iterable[tuple[ObjectVerdict, ObjectKey | None]]) -> dict[tuple[str, str], FoundObjects]:
    """What the inventory holds of each segment, from the objects' verdicts."""
    found: dict[tuple[str, str], FoundObjects] = {}
    for v, parsed in verdicts:
        if parsed is not None:
            key = (str(parsed.segment.topic_id), str(parsed.segment.segment_id))
            found[key] = found.get(key, FoundObjects()).add(v.key, parsed.suffix.value, v.size)
    return found


def classify(
    objects: Iterable[BucketObject],
    meta: Metadata,
    *,
    prefix: str,
    now_ms: int,
    grace_ms: int,
    manifests: Mapping[tuple[str, str], ManifestReading] | None = None,
) -> Classification:
    """Every object's verdict, and every anomaly (object level first, then segment level). ``manifests``: what each
    manifest :func:`manifests_needed` names said when read (None: manifests were not read)."""
    pairs = [classify_object(obj, meta, prefix=prefix, now_ms=now_ms, grace_ms=grace_ms) for obj in objects]
    anomalies = [Anomaly(v.anomaly, v.topic_id, v.segment_id, v.key) for v, _ in pairs if v.anomaly is not None]
    anomalies.extend(segment_anomalies(meta, found_objects(pairs), manifests))
    return Classification(tuple(v for v, _ in pairs), tuple(anomalies))
