"""Generated buckets for the scan: metadata (topics, segments, tiered-state history) and the objects a bucket holds.

A :class:`World` can be written as a metadata export (the three Parquet files of :mod:`remote_storage.export_format`, in
their exact schemas) and as an AWS inventory (by hand, :mod:`tests.support.aws_inventory`), and classified by the
pure reference classifier (:mod:`policies.orphans`). The hypothesis strategy :func:`worlds` covers every category
and anomaly of the contract: deleted and unknown topic ids, delete-policy topics, every segment state, retention
by time and bytes, stale epochs, offset gaps and overlaps, incomplete object sets, size mismatches, objects inside
and outside the grace period, keys that nearly parse, and keys outside the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from policies.orphans import BucketObject, Classification, Metadata, classify
from remote_storage import export_format
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SEGMENT_SUFFIXES, SegmentKey, build_key
from tests.support import aws_inventory

PREFIX = "tiered/"
NOW_MS = 1_700_000_000_000
GRACE_MS = 3_600_000
BUCKET = "kafka-tiered"
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

    def metadata(self) -> Metadata:
        return Metadata.build(self.topics, self.segments, self.epochs, now_ms=self.now_ms)

    def classify(self) -> Classification:
        return classify(self.objects, self.metadata(), prefix=self.prefix, now_ms=self.now_ms, grace_ms=self.grace_ms)

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

    def write_inventory(self, root: Path, fmt: str, *, per_file: int = 1000) -> Path:
        rows = [(BUCKET, o.key, o.size, o.last_modified_ms) for o in self.objects]
        return aws_inventory.write_rows(root, rows, fmt=fmt, creation_ms=self.now_ms, per_file=per_file)


def segment_key(seg: SegmentMeta, suffix_index: int, prefix: str = PREFIX) -> str:
    topic_id, segment_id = Uuid.from_string(seg.topic_id), Uuid.from_string(seg.segment_id)
    key = SegmentKey(seg.topic, topic_id, seg.partition, seg.start_offset, segment_id)
    return build_key(prefix, key, SEGMENT_SUFFIXES[suffix_index])


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
                in_rlmm = draw(st.integers(0, 5)) > 0
                if in_rlmm:
                    segments.append(seg)
                wanted = draw(st.sampled_from(["all", "all", "all", "some"]))
                present = [0, 1, 2] if wanted == "all" else draw(st.lists(st.integers(0, 2), max_size=3, unique=True))
                for i in present:
                    size = seg.size_bytes if draw(st.integers(0, 5)) > 0 else seg.size_bytes + 1
                    obj(segment_key(seg, i), size if i == 0 else 17)
    if segments or objects:
        valid = objects[0].key if objects else segment_key(segments[0], 0)
        for key in draw(st.lists(near_miss_keys(valid), max_size=3, unique=True)):
            obj(key, 5)
    outside_prefix = st.sampled_from(["other/file.bin", "tiered", "tiered-old/x.log"])
    for key in draw(st.lists(outside_prefix, max_size=2, unique=True)):
        obj(key, 3)
    # A key appears once in a bucket.
    unique = list({o.key: o for o in objects}.values())
    return World(topics, segments, epochs, unique)
