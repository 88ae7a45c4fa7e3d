"""Generated buckets for the scan: metadata (topics, segments, tiered-state history) and the objects a bucket holds.

A :class:`World` can be written as a metadata export (the three Parquet files of :mod:`remote_storage.export_format`, in
their exact schemas) and as an AWS inventory (by hand, :mod:`tests.support.aws_inventory`), its manifests put in a
bucket, and classified by the pure reference classifier (:mod:`policies.orphans`). The hypothesis strategy
:func:`worlds` covers every category and anomaly of the contract: deleted and unknown topic ids, delete-policy
topics, every segment state, retention by time and bytes, stale epochs, offset gaps and overlaps, incomplete object
sets and missing manifests, objects inside and outside the grace period, keys that nearly parse, keys outside the
prefix; and Aiven's format: segments written by Aiven's library (compressed: the ``.log`` is not the RLMM's size)
or by our code before it (a legacy manifest), truncated ``.log`` objects, unreadable manifests and manifests gone
from the bucket, and custom metadata recording a remote size (right or wrong), another prefix, an explicit key
(sometimes one two segments share) or bytes that did not decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from policies.orphans import (
    BucketObject,
    Classification,
    Metadata,
    classify,
    classify_object,
    found_objects,
    manifests_needed,
)
from remote_storage import export_format
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SEGMENT_SUFFIXES, SegmentKey, build_key
from remote_storage.scan import manifest_reading as mr
from remote_storage.scan.manifest_reading import ManifestReading, read_manifest
from tests.support import aws_inventory
from tests.support.aiven_objects import aiven_objects, legacy_manifest, segment_bytes

PREFIX = "tiered/"
NOW_MS = 1_700_000_000_000
GRACE_MS = 3_600_000
BUCKET = "kafka-tiered"
OTHER_PREFIX = "custom/"  # a prefix segments record in their custom metadata
STATES = ("NOT_TIERED", "ENABLED", "DISABLING", "DISABLED")
POLICIES = ("NONE", "RETAIN", "DELETE")
SEGMENT_STATES = ("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED")


@dataclass(frozen=True)
class World:
    topics: list[TopicMeta]
    segments: list[SegmentMeta]
    epochs: list[tuple[str, int, str]]
    objects: list[BucketObject]
    prefix: str = PREFIX
    now_ms: int = NOW_MS
    grace_ms: int = GRACE_MS
    bodies: dict[str, bytes] = field(default_factory=dict)  # key -> bytes, of the manifests in the bucket

    def metadata(self) -> Metadata:
        return Metadata.build(self.topics, self.segments, self.epochs, now_ms=self.now_ms)

    def manifest_readings(self) -> dict[tuple[str, str], ManifestReading]:
        """What the scan's executors find reading the manifests the size rule needs from a bucket holding
        :attr:`bodies` (a manifest in the inventory but not in the bucket is gone)."""
        meta = self.metadata()
        args = {"prefix": self.prefix, "now_ms": self.now_ms, "grace_ms": self.grace_ms}
        found = found_objects(classify_object(o, meta, **args) for o in self.objects)
        return {
            (tid, sid): read_manifest(self.bodies[key]) if key in self.bodies else ManifestReading(mr.GONE)
            for tid, sid, key in manifests_needed(meta, found)
        }

    def classify(self, *, manifests_read: bool = False) -> Classification:
        readings = self.manifest_readings() if manifests_read else None
        args = {"prefix": self.prefix, "now_ms": self.now_ms, "grace_ms": self.grace_ms}
        return classify(self.objects, self.metadata(), **args, manifests=readings)

    def write_export(self, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        topics = {
            "topic_id": [t.topic_id for t in self.topics],
            "name": [t.name for t in self.topics],
            "state": [t.state for t in self.topics],
            "tiered_epoch": [t.tiered_epoch for t in self.topics],
            "policy": [t.policy for t in self.topics],
            "retention_ms": [t.retention_ms for t in self.topics],
            "retention_bytes": [t.retention_bytes for t in self.topics],
            "local_retention_ms": [-2 for _ in self.topics],
            "deleted": [t.deleted for t in self.topics],
        }
        pq.write_table(
            pa.Table.from_pydict(topics, schema=export_format.topics_schema()), dest / export_format.TOPICS_FILE
        )
        segs = {name: [getattr(s, name) for s in self.segments] for name in export_format.segments_schema().names}
        pq.write_table(
            pa.Table.from_pydict(segs, schema=export_format.segments_schema()), dest / export_format.SEGMENTS_FILE
        )
        epochs = {
            "topic_id": [e[0] for e in self.epochs],
            "tiered_epoch": [e[1] for e in self.epochs],
            "state": [e[2] for e in self.epochs],
        }
        pq.write_table(
            pa.Table.from_pydict(epochs, schema=export_format.epochs_schema()), dest / export_format.EPOCHS_FILE
        )
        return dest

    def write_inventory(self, root: Path, fmt: str, *, per_file: int = 1000, bucket: str = BUCKET) -> Path:
        rows = [(bucket, o.key, o.size, o.last_modified_ms) for o in self.objects]
        return aws_inventory.write_rows(root, rows, fmt=fmt, creation_ms=self.now_ms, per_file=per_file)


def segment_key(seg: SegmentMeta, suffix_index: int, prefix: str = PREFIX) -> str:
    """The key of a segment's object where its recorded location (else the layout under ``prefix``) puts it."""
    suffix = SEGMENT_SUFFIXES[suffix_index]
    if seg.object_key is not None:
        return f"{seg.object_prefix if seg.object_prefix is not None else prefix}{seg.object_key}.{suffix.value}"
    topic_id, segment_id = Uuid.from_string(seg.topic_id), Uuid.from_string(seg.segment_id)
    key = SegmentKey(seg.topic, topic_id, seg.partition, seg.start_offset, segment_id)
    return build_key(seg.object_prefix if seg.object_prefix is not None else prefix, key, suffix)


ids = st.binary(min_size=16, max_size=16).map(lambda b: str(Uuid(b)))
ages = st.sampled_from([-1, 0, GRACE_MS - 1, GRACE_MS, GRACE_MS + 1, 10 * GRACE_MS])


def near_miss_keys(valid: str) -> st.SearchStrategy[str]:
    """Keys that differ from a valid key by one detail the parser must notice (or must not mind)."""
    body = valid[len(PREFIX) :]
    topic_part, partition, file = body.split("/")
    name, tid = topic_part[:-23], topic_part[-22:]
    return st.sampled_from(
        [
            f"{PREFIX}{body}/extra",
            f"{PREFIX}{topic_part}/{partition}",
            f"{PREFIX}{topic_part}/0{partition}/{file}",
            f"{PREFIX}{topic_part}/99999999999/{file}",
            f"{PREFIX}{topic_part}/{partition}/{file[:-3]}bin",
            f"{PREFIX}{topic_part}/{partition}/{file[1:]}",
            f"{PREFIX}{topic_part}/{partition}/99999999999999999999{file[20:]}",
            f"{PREFIX}{name}-{tid[:-1]}B/{partition}/{file}",  # non-canonical id
            f"{PREFIX}{name}_{tid}/{partition}/{file}",  # no dash before the id
            f"{PREFIX}-{tid}/{partition}/{file}",  # empty topic name
            f"{PREFIX}..-{tid}/{partition}/{file}",  # an illegal name
            f"{PREFIX}na me-{tid}/{partition}/{file}",
            f"{PREFIX}{name}-{tid}/{partition}/{file[:20]}_{file[21:]}",
            f"{PREFIX}{topic_part}/{partition}/{file[:-4]}.LOG",
            f"{PREFIX}{topic_part}/{partition}/{file}".replace("0", "\u0660", 1),  # a non-ASCII digit
            f"{PREFIX}a.b-c_d-{tid}/{partition}/{file}",  # a legal name with dashes and dots: parses
            f"{PREFIX}{name}\n-{tid}/{partition}/{file}",  # newlines: Java's '$' would match before them
            f"{PREFIX}{topic_part}/{partition}\n/{file}",
            f"{PREFIX}{body}\n",
        ]
    )


@st.composite
def worlds(draw: st.DrawFn, *, max_topics: int = 4) -> World:
    topics: list[TopicMeta] = []
    segments: list[SegmentMeta] = []
    epochs: list[tuple[str, int, str]] = []
    objects: list[BucketObject] = []
    bodies: dict[str, bytes] = {}
    layout_keys: list[str] = []
    used: set[str] = set()

    def fresh_id() -> str:
        """Ids are unique in a cluster (random 128 bits); shrinking must not make two of them equal."""
        value = draw(ids.filter(lambda i: i not in used))
        used.add(value)
        return value

    def obj(key: str, size: int) -> None:
        age = draw(ages)
        objects.append(BucketObject(key, size, -1 if age < 0 else NOW_MS - age))

    for _ in range(draw(st.integers(1, max_topics))):
        tid = fresh_id()
        state = draw(st.sampled_from(("ENABLED", "ENABLED", *STATES)))
        topic = TopicMeta(
            topic_id=tid,
            name=draw(st.sampled_from(["orders", "payments", "a.b-c_d"])),  # names repeat: re-created topics
            state=state,
            tiered_epoch=draw(st.integers(0, 4)),
            policy=draw(st.sampled_from(POLICIES)),
            retention_ms=draw(st.sampled_from([-1, 1000, 50_000, 10**9])),
            retention_bytes=draw(st.sampled_from([-1, 0, 300, 5000])),
            deleted=draw(st.integers(0, 4)) == 0,
        )
        known = draw(st.integers(0, 9)) > 0  # now and then an id the metadata never held
        if known:
            topics.append(topic)
            if draw(st.integers(0, 5)) > 0:  # else no tiered-state history, as a Kafka cluster's export
                epochs.append((tid, 1, "ENABLED"))
                for epoch in draw(st.lists(st.integers(0, 4), max_size=3, unique=True)):
                    epochs.append((tid, epoch, draw(st.sampled_from(STATES))))
        for partition in range(draw(st.integers(1, 2))):
            offset = 0
            for _ in range(draw(st.integers(0, 8))):
                offset += draw(st.sampled_from([0, 0, 0, 1, -3, 7]))  # mostly contiguous; gaps and overlaps
                offset = max(offset, 0)
                length = draw(st.integers(1, 50))
                seg = SegmentMeta(
                    topic_id=tid,
                    topic=topic.name,
                    partition=partition,
                    segment_id=fresh_id(),
                    start_offset=offset,
                    end_offset=offset + length - 1,
                    size_bytes=draw(st.integers(0, 400)),
                    tiered_epoch=draw(st.sampled_from([1, 1, 1, 0, 2])),  # mostly one epoch: chains to check
                    state=draw(st.sampled_from(("COPY_SEGMENT_FINISHED",) * 4 + SEGMENT_STATES)),
                    max_timestamp_ms=NOW_MS - draw(st.sampled_from([0, 2000, 60_000, 10**10])),
                    event_timestamp_ms=NOW_MS - draw(st.sampled_from([-1, 0, GRACE_MS, 2 * GRACE_MS])),
                )
                offset += length
                seg, sizes, body = _as_written(draw, seg)
                in_rlmm = draw(st.integers(0, 5)) > 0
                if in_rlmm:
                    segments.append(seg)
                wanted = draw(st.sampled_from(["all", "all", "all", "some"]))
                present = [0, 1, 2] if wanted == "all" else draw(st.lists(st.integers(0, 2), max_size=3, unique=True))
                for i in present:
                    key = segment_key(seg, i)
                    obj(key, sizes[i])
                    if i == 2 and body is not None:
                        bodies[key] = body
                    if not seg.recorded_location:
                        layout_keys.append(key)
    if layout_keys or segments:
        valid = (
            layout_keys[0] if layout_keys else segment_key(replace(segments[0], object_prefix=None, object_key=None), 0)
        )
        for key in draw(st.lists(near_miss_keys(valid), max_size=3, unique=True)):
            obj(key, 5)
    # The last two: a character of two or three UTF-8 bytes across the prefix's last byte (the parser cuts by bytes).
    outside = ["other/file.bin", "tiered", "tiered-old/x.log", "tiered\u00e9/0/x.log", "tiere\u20ac-x/0/y.log"]
    outside_prefix = st.sampled_from(outside)
    for key in draw(st.lists(outside_prefix, max_size=2, unique=True)):
        obj(key, 3)
    # A key appears once in a bucket.
    unique = list({o.key: o for o in objects}.values())
    return World(
        topics, segments, epochs, unique, bodies={k: b for k, b in bodies.items() if k in {o.key for o in unique}}
    )


def _as_written(draw: st.DrawFn, seg: SegmentMeta) -> tuple[SegmentMeta, list[int], bytes | None]:
    """How the segment's objects were written: (the segment with its custom metadata, each object's size by suffix
    index, the manifest's bytes in the bucket or None when it is not there)."""
    size = seg.size_bytes
    mismatched = size + 1 if draw(st.integers(0, 3)) == 0 else size  # a raw .log of the wrong size, now and then
    written = draw(st.sampled_from(["legacy", "legacy", "aiven", "aiven", "unreadable", "gone"]))
    body: bytes | None = None
    if written == "aiven":  # compressed by Aiven's library: the .log is not the segment's size
        chunk_size = draw(st.sampled_from([16, 64, 1000]))
        data = segment_bytes(size, seed=draw(st.integers(0, 1000)))
        objects = aiven_objects(
            topic=seg.topic,
            topic_id=seg.topic_id,
            partition=seg.partition,
            segment_id=seg.segment_id,
            start_offset=seg.start_offset,
            end_offset=seg.end_offset,
            data=data,
            chunk_size=chunk_size,
            compression=True,
        )
        truncated = draw(st.integers(0, 4)) == 0
        log = len(objects.log) - 1 if truncated and objects.log else len(objects.log)
        sizes, body = [log, len(objects.indexes), len(objects.manifest_text)], objects.manifest_text
    elif written == "legacy":  # ours, before Aiven's format: a raw .log and a flat JSON manifest
        body = legacy_manifest(
            topic=seg.topic, topic_id=seg.topic_id, partition=seg.partition, segment_id=seg.segment_id
        )
        sizes = [mismatched, 17, len(body)]
    elif written == "unreadable":
        body = draw(st.sampled_from([b"\x00 not a manifest", b'{"version":"1"}', b'{"version":"9","tieredEpoch":1}']))
        sizes = [mismatched, 17, len(body)]
    else:  # the manifest is in the inventory but gone from the bucket (or never was: the scan cannot tell)
        sizes = [mismatched, 17, 40]
    location = draw(st.sampled_from([None, None, None, None, "prefix", "key", "shared key"]))
    remote_size = draw(st.sampled_from([None, None, "right", "wrong"]))
    if draw(st.integers(0, 12)) == 0:
        return replace(seg, custom_metadata_error="custom metadata: truncated the field count"), sizes, body
    seg = replace(
        seg,
        remote_size=None if remote_size is None else sum(sizes) + (remote_size == "wrong"),
        object_prefix=OTHER_PREFIX if location == "prefix" else None,
        object_key={"key": f"keyed/{seg.segment_id}", "shared key": "keyed/shared"}.get(location or ""),
    )
    return seg, sizes, body
