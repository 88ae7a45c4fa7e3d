"""A bucket on moto's server with known orphans and anomalies, planted the way real clusters leave them; the scan's
summary (counts and bytes, per topic and in total), its Parquet outputs and its report equal the planted ones exactly.

The metadata is a real SQLite store written through the controller's records and the RLMM; the objects are real
objects on moto's S3 server; the inventory is built by listing the bucket; the scan runs on a local SparkSession.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage import export, export_format
from remote_storage.inventory import build_inventory
from remote_storage.keys import segment_keys
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from remote_storage.s3 import make_s3_client
from remote_storage.scan import contract as c
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.run import ScanOutcome, scan
from tests.support.broker_harness import ControllerWriter

pytestmark = pytest.mark.spark

PREFIX = "tiered/"
HOUR = 3_600_000
GRACE_MS = HOUR


@dataclass
class Planted:
    """What the test put in the bucket and the metadata, and what the scan must therefore report."""

    reclaimable: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic id, category) -> bytes
    reclaimable_objects: Counter[tuple[str, str]] = field(default_factory=Counter)
    anomalies: Counter[tuple[str | None, str]] = field(default_factory=Counter)  # (topic id, type) -> count
    categories: dict[str, str] = field(default_factory=dict)  # key -> category
    stale_rows: list[RemoteSegment] = field(default_factory=list)


class Plant:
    def __init__(self, s3: Any, bucket: str, store: SqliteMetadataStore) -> None:
        self.s3, self.bucket = s3, bucket
        self.writer = ControllerWriter(store)
        self.rlmm = RemoteLogMetadataManager(store)
        self.p = Planted()
        self.now = int(time.time() * 1000)

    def put(self, key: str, size: int, category: str, topic_id: Uuid | None = None, anomaly: str | None = None) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"x" * size)
        self.p.categories[key] = category
        if category in c.RECLAIMABLE and topic_id is not None:
            self.p.reclaimable[(str(topic_id), category)] += size
            self.p.reclaimable_objects[(str(topic_id), category)] += 1
        if anomaly:
            self.p.anomalies[(str(topic_id) if topic_id else None, anomaly)] += 1

    def segment(
        self,
        topic: str,
        tid: Uuid,
        partition: int,
        start: int,
        end: int,
        *,
        size: int = 1000,
        epoch: int = 1,
        max_ts: int | None = None,
    ) -> RemoteSegment:
        max_timestamp = self.now - HOUR if max_ts is None else max_ts
        return RemoteSegment(topic, tid, partition, Uuid.random(), start, end, max_timestamp, size, epoch, broker_id=1)

    def copied(self, seg: RemoteSegment, state: SegmentState = SegmentState.COPY_SEGMENT_FINISHED) -> RemoteSegment:
        self.rlmm.copy_started(seg, now_ms=self.now - 2 * HOUR)
        later_states = (
            SegmentState.COPY_SEGMENT_FINISHED,
            SegmentState.DELETE_SEGMENT_STARTED,
            SegmentState.DELETE_SEGMENT_FINISHED,
        )
        for s in later_states:
            if s > state:
                break
            self.rlmm.transition([seg], s, broker_id=1, now_ms=self.now - 2 * HOUR)
        return seg

    def objects(
        self,
        seg: RemoteSegment,
        category: str,
        *,
        suffixes: tuple[int, ...] = (0, 1, 2),
        log_size: int | None = None,
        anomaly: str | None = None,
    ) -> None:
        keys = list(segment_keys(PREFIX, seg.key).values())
        for i in suffixes:
            size = (seg.size_bytes if log_size is None else log_size) if i == 0 else 40 + i
            self.put(keys[i], size, category, seg.topic_id, anomaly if i == 0 else None)
            if anomaly and anomaly != c.SIZE_MISMATCH and i != 0:
                self.p.anomalies[(str(seg.topic_id), anomaly)] += 1  # object-level: one per object


def plant(s3: Any, bucket: str, store: SqliteMetadataStore) -> tuple[Planted, dict[str, Uuid]]:
    pl = Plant(s3, bucket, store)
    w, p = pl.writer, pl.p
    ids: dict[str, Uuid] = {}

    # orders: live, two partitions. p0 has a gap then an overlap; p1 a missing set, a missing manifest, an incomplete
    # set, a wrong size.
    orders = ids["orders"] = w.create_topic("orders", partitions=2)
    s0 = pl.copied(pl.segment("orders", orders, 0, 0, 99))
    s1 = pl.copied(pl.segment("orders", orders, 0, 100, 199))
    s2 = pl.copied(pl.segment("orders", orders, 0, 205, 299))  # gap after 199
    s3 = pl.copied(pl.segment("orders", orders, 0, 290, 399))  # overlaps 290..299
    for seg in (s0, s1, s2, s3):
        pl.objects(seg, c.LIVE)
    p.anomalies[(str(orders), c.OFFSET_GAP)] += 1
    p.anomalies[(str(orders), c.OFFSET_OVERLAP)] += 1
    pl.copied(pl.segment("orders", orders, 1, 0, 9))  # no object at all
    p.anomalies[(str(orders), c.MISSING_OBJECTS)] += 1
    pl.objects(pl.copied(pl.segment("orders", orders, 1, 10, 19)), c.LIVE, suffixes=(0,))
    p.anomalies[(str(orders), c.MANIFEST_MISSING)] += 1  # its .log is there, its manifest is not
    pl.objects(pl.copied(pl.segment("orders", orders, 0, 400, 449)), c.LIVE, suffixes=(0, 2))
    p.anomalies[(str(orders), c.INCOMPLETE_OBJECT_SET)] += 1  # the .indexes is missing
    pl.objects(pl.copied(pl.segment("orders", orders, 1, 20, 29)), c.LIVE, log_size=999, anomaly=c.SIZE_MISMATCH)
    # An upload that never finished: the RLMM says COPY_SEGMENT_STARTED and only the .log made it.
    unfinished = pl.copied(pl.segment("orders", orders, 1, 30, 39), SegmentState.COPY_SEGMENT_STARTED)
    pl.objects(unfinished, c.COPY_UNFINISHED, suffixes=(0,))
    # A segment the RLMM knows nothing of (an upload whose metadata write was lost).
    pl.objects(pl.segment("orders", orders, 0, 400, 499, size=1300), c.NO_RLMM_ENTRY)
    # A delete the RLMM says finished, whose objects are still there.
    rlmm_deleted = pl.copied(pl.segment("orders", orders, 0, 500, 599, size=1400), SegmentState.DELETE_SEGMENT_FINISHED)
    pl.objects(rlmm_deleted, c.RLMM_DELETED, anomaly=c.DELETE_INCOMPLETE)
    # A copy at tiered epoch 2, when orders was never ENABLED at 2 (exported from a cluster without the fence).
    stale = pl.segment("orders", orders, 0, 600, 699, size=1500, epoch=2)
    pl.objects(stale, c.LIVE)
    p.stale_rows.append(stale)
    p.anomalies[(str(orders), c.STALE_EPOCH_COPY)] += 1

    # payments: deleted (KIP-516), then re-created with the same name: a new id whose objects are live.
    old = ids["payments-old"] = w.create_topic("payments")
    pl.objects(pl.copied(pl.segment("payments", old, 0, 0, 49, size=2000)), c.DELETED_TOPIC)
    w.delete_topic(old)
    new = ids["payments"] = w.create_topic("payments")
    pl.objects(pl.copied(pl.segment("payments", new, 0, 0, 49, size=2100)), c.LIVE)

    # clicks: disabled with the delete policy and acknowledged (DISABLED), yet objects remain.
    clicks = ids["clicks"] = w.create_topic("clicks")
    seg = pl.copied(pl.segment("clicks", clicks, 0, 0, 9, size=2200))
    w.set_state(clicks, TieredState.DISABLING, DisablePolicy.DELETE)
    w.set_state(clicks, TieredState.DISABLED, DisablePolicy.DELETE)
    pl.objects(seg, c.DISABLED_DELETE, anomaly=c.DELETE_INCOMPLETE)

    # logs: one-second retention; its only segment is long past it (the brokers' expiry has not run yet).
    logs = ids["logs"] = w.create_topic("logs", configs={"retention.ms": "1000"})
    pl.objects(pl.copied(pl.segment("logs", logs, 0, 0, 9, size=2300, max_ts=pl.now - HOUR)), c.PAST_RETENTION)

    # A topic id the metadata never held, keys that do not parse, and an object that is not tiered storage's.
    ghost = Uuid.random()
    pl.objects(pl.segment("ghost", ghost, 0, 0, 9, size=2400), c.UNKNOWN_TOPIC)
    for key in (f"{PREFIX}orders-garbage/0/x.log", f"{PREFIX}README.txt"):
        pl.put(key, 7, c.UNPARSEABLE, anomaly=c.UNPARSEABLE_KEY)
    pl.put("other/file.bin", 11, c.OUTSIDE_PREFIX)
    return p, ids


def add_stale_rows(export_dir: Path, rows: list[RemoteSegment]) -> None:
    path = export_dir / export_format.SEGMENTS_FILE
    table = pq.read_table(path)
    extra = {
        "topic_id": [str(s.topic_id) for s in rows],
        "topic": [s.topic for s in rows],
        "partition": [s.partition for s in rows],
        "segment_id": [str(s.segment_id) for s in rows],
        "start_offset": [s.start_offset for s in rows],
        "end_offset": [s.end_offset for s in rows],
        "size_bytes": [s.size_bytes for s in rows],
        "tiered_epoch": [s.tiered_epoch for s in rows],
        "state": ["COPY_SEGMENT_FINISHED" for _ in rows],
        "max_timestamp_ms": [s.max_timestamp_ms for s in rows],
        "event_timestamp_ms": [s.event_timestamp_ms for s in rows],
        **{column: [None for _ in rows] for column in export_format.ADDED_SEGMENT_COLUMNS},
    }
    pq.write_table(pa.concat_tables([table, pa.Table.from_pydict(extra, schema=export_format.segments_schema())]), path)


def plant_and_inventory(s3: Any, bucket: str, tmp_path: Path, fmt: str) -> tuple[Planted, dict[str, Uuid], Path, str]:
    """Plant into a store at tmp_path/metadata.db, export it (plus the stale-epoch rows), build the inventory."""
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    try:
        planted, ids = plant(s3, bucket, store)
        export_dir = tmp_path / "export"
        export.export_metadata(store, export_dir)
    finally:
        store.close()
    add_stale_rows(export_dir, planted.stale_rows)
    # Taken two hours after the uploads, so every object is past the one-hour grace period.
    taken_ms = int(time.time() * 1000) + 2 * HOUR
    inventory_dir = str(tmp_path / "inventory")
    manifest = build_inventory(s3, bucket=bucket, dest=inventory_dir, fmt=fmt, now_ms=taken_ms, rows_per_file=10)  # type: ignore[arg-type]
    return planted, ids, export_dir, manifest


@dataclass
class Scanned:
    """A planted bucket, its store and inventory, and the scan of it."""

    bucket: str
    db: Path
    planted: Planted
    ids: dict[str, Uuid]
    out: Path
    outcome: ScanOutcome


@pytest.fixture(scope="module")
def scanned(spark: Any, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Scanned]:
    """The scan of a planted bucket per inventory format, made once for the module: the Parquet one is both checked
    and reclaimed (reclaim leaves the scan's outputs as they are; only the reclaim test changes the bucket)."""
    s3 = make_s3_client(endpoint_url=moto_endpoint)
    made: dict[str, Scanned] = {}

    def scan_of(fmt: str) -> Scanned:
        if fmt not in made:
            tmp_path = tmp_path_factory.mktemp(f"planted-{fmt}")
            bucket = f"planted-{uuid.uuid4().hex[:20]}"
            s3.create_bucket(Bucket=bucket)
            planted, ids, export_dir, manifest = plant_and_inventory(s3, bucket, tmp_path, fmt)
            out = tmp_path / "scan"
            settings = ScanSettings(prefix=PREFIX, grace_ms=GRACE_MS, max_anomalies=5)
            outcome = scan(inventory_uri=manifest, export_dir=export_dir, out_dir=out, spark=spark, settings=settings)
            made[fmt] = Scanned(bucket, tmp_path / "metadata.db", planted, ids, out, outcome)
        return made[fmt]

    return scan_of


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_scan_reports_exactly_what_was_planted(scanned: Callable[[str], Scanned], fmt: str) -> None:
    done = scanned(fmt)
    planted, ids, out, outcome = done.planted, done.ids, done.out, done.outcome
    summary = outcome.summary

    # Every object classified as planted.
    objects = pq.read_table(out / c.OBJECTS_DIR).to_pylist()
    assert {o["key"]: o["category"] for o in objects} == planted.categories
    assert summary["inventory"]["rows"] == len(planted.categories)
    assert summary["inventory"]["malformed_rows"]["total"] == 0
    assert summary["totals"]["outside_prefix_objects"] == 1

    # Reclaimable bytes and objects, per topic id and category, and in total.
    topics = summary["topics"]
    got_bytes = Counter({(t["topic_id"], cat): n for t in topics for cat, n in t["reclaimable_bytes"].items() if n})
    got_objects = Counter({(t["topic_id"], cat): n for t in topics for cat, n in t["reclaimable_objects"].items() if n})
    assert got_bytes == planted.reclaimable
    assert got_objects == planted.reclaimable_objects
    totals: Counter[str] = Counter()
    for (_, cat), n in planted.reclaimable.items():
        totals[cat] += n
    assert {k: v for k, v in summary["totals"]["reclaimable_bytes"].items() if v} == dict(totals)
    assert summary["totals"]["within_grace_bytes"] == 0

    # Anomalies per topic id and type, unattributed ones (unparseable keys) only in the totals.
    got_anomalies = Counter({(t["topic_id"], a): n for t in summary["topics"] for a, n in t["anomalies"].items() if n})
    attributed = Counter({k: v for k, v in planted.anomalies.items() if k[0] is not None})
    assert got_anomalies == attributed
    by_type: Counter[str] = Counter()
    for (_, a), n in planted.anomalies.items():
        by_type[a] += n
    assert {k: v for k, v in summary["totals"]["anomalies"].items() if v} == dict(by_type)
    assert summary["alert"] == {"anomalies_total": sum(by_type.values()), "threshold": 5, "exceeded": True}
    assert outcome.exit_status == c.EXIT_ANOMALIES
    assert len(pq.read_table(out / c.ANOMALIES_DIR)) == sum(by_type.values())

    # The same name twice: the deleted id's bytes are reclaimable, the re-created one's are not.
    payments = {t["topic_id"]: t for t in summary["topics"] if t["topic"] == "payments"}
    assert set(payments) == {str(ids["payments-old"]), str(ids["payments"])}
    assert payments[str(ids["payments-old"])]["deleted"] is True
    assert sum(payments[str(ids["payments"])]["reclaimable_bytes"].values()) == 0
    # An unknown id is named by its keys.
    assert any(t["topic"] == "ghost" and t["known"] is False for t in summary["topics"])

    report = (out / c.REPORT_FILE).read_text()
    for name in ("orders", "payments", "clicks", "logs", "ghost"):
        assert name in report
    assert "<svg" in report


def test_reclaim_after_a_real_scan_deletes_exactly_the_reclaimable_objects_once(
    scanned: Callable[[str], Scanned], s3_client: Any, moto_endpoint: str
) -> None:
    """Reclaims the Parquet scan of test_scan_reports_exactly_what_was_planted (the same scan, made once)."""
    from click.testing import CliRunner

    from orchestrator.cli import cli

    done = scanned("parquet")
    planted, db, out, bucket = done.planted, done.db, done.out, done.bucket

    def listing() -> set[str]:
        pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"] for p in pages for o in p.get("Contents", [])}

    sources = ["--metadata-store", str(db), "--s3-endpoint", moto_endpoint]
    args = ["--output", "json", "reclaim", str(out), "--older-than", "0s", *sources]
    before = listing()
    dry = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert listing() == before

    first = CliRunner().invoke(cli, [*args, "--execute"], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    deletable = {k for k, cat in planted.categories.items() if cat in c.RECLAIM_CAN_DELETE}
    assert deletable  # the planted bucket has orphans of every deletable category
    assert {cat for k, cat in planted.categories.items() if k in deletable} == set(c.RECLAIM_CAN_DELETE)
    assert listing() == before - deletable

    second = CliRunner().invoke(cli, [*args, "--execute"], catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert listing() == before - deletable
    assert '"deleted_objects": 0' in second.output
