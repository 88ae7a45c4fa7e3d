"""A bucket holding segments in Aiven's format, scanned for real: moto's S3 server, a SQLite store written through
its API (Aiven's custom metadata in the COPY_SEGMENT_FINISHED records), a local SparkSession whose executors read
the manifests they need. The summary's numbers are exact.

Planted, in topic ``orders`` (one partition, contiguous offsets, every segment COPY_SEGMENT_FINISHED):

=====================  ===========================================================  =========================
segment                objects                                                      the scan says
=====================  ===========================================================  =========================
compressed+encrypted   Aiven's three objects; no custom metadata                    nothing (manifest read)
remote size            compressed; custom metadata REMOTE_SIZE = all three objects  nothing (no read)
truncated              compressed and encrypted, the ``.log`` cut short             size_mismatch (read)
no manifest            ``.log`` and ``.indexes`` only                               manifest_missing
garbage manifest       compressed ``.log``, a manifest that is not one              manifest_unreadable (read)
legacy                 ours from before: a raw ``.log``, a flat JSON manifest       nothing (no read)
legacy, wrong size     ours from before, the raw ``.log`` one byte short            size_mismatch (read)
=====================  ===========================================================  =========================

and in topic ``clicks`` one segment whose custom metadata records the prefix ``old-cluster/`` (and its remote size):
its objects are found there, live, not outside the prefix; once ``clicks`` is deleted they are ``deleted_topic`` and
``tieredctl reclaim`` deletes them there, and nothing else.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from orchestrator.cli import cli
from orchestrator.ids import Uuid
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage import export
from remote_storage.inventory import build_inventory
from remote_storage.keys import Suffix, segment_keys
from remote_storage.rlmm import RemoteSegment
from remote_storage.s3 import make_s3_client
from remote_storage.scan import contract as c
from remote_storage.scan.errors import ScanError
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.run import recorded_prefixes, scan
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata, encode_custom_metadata
from remote_storage.segment_format.object_set import SegmentObjects
from tests.support.aiven_objects import aiven_objects, key_ring, legacy_manifest, segment_bytes
from tests.support.broker_harness import ControllerWriter
from tests.support.rlmm_records import finish_copy

pytestmark = pytest.mark.spark

PREFIX = "tiered/"
OTHER_PREFIX = "old-cluster/"
HOUR = 3_600_000
SEGMENT_BYTES = 40_000


@dataclass
class Planted:
    db: Path
    export_dir: Path
    inventory: str
    keys: dict[str, list[str]] = field(default_factory=dict)  # segment -> its object keys
    topics: dict[str, Uuid] = field(default_factory=dict)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class _Bucket:
    """Puts a segment's objects and records its copy, as a broker writing Aiven's format does."""

    def __init__(self, s3: Any, bucket: str, store: SqliteMetadataStore) -> None:
        self.s3, self.bucket, self.store = s3, bucket, store
        self.now = _wall_ms() - 2 * HOUR
        self.offset: dict[Uuid, int] = {}

    def segment(self, topic: str, tid: Uuid, data: bytes) -> RemoteSegment:
        start = self.offset.get(tid, 0)
        self.offset[tid] = start + 100
        return RemoteSegment(topic, tid, 0, Uuid.random(), start, start + 99, self.now, len(data), 1, broker_id=1)

    def aiven(self, seg: RemoteSegment, data: bytes, **kw: Any) -> SegmentObjects:
        common = dict(topic=seg.topic, topic_id=seg.topic_id, partition=0, segment_id=seg.segment_id)
        return aiven_objects(**common, start_offset=seg.start_offset, end_offset=seg.end_offset, data=data, **kw)

    def put(self, seg: RemoteSegment, bodies: dict[Suffix, bytes], *, prefix: str = PREFIX) -> list[str]:
        keys = segment_keys(prefix, seg.key)
        for suffix, body in bodies.items():
            self.s3.put_object(Bucket=self.bucket, Key=keys[suffix], Body=body)
        return [keys[s] for s in bodies]

    def copied(self, seg: RemoteSegment, custom: SegmentCustomMetadata | None = None) -> None:
        blob = None if custom is None else encode_custom_metadata(custom)
        finish_copy(self.store, seg, custom_metadata=blob, now_ms=self.now)


def _bodies(objects: SegmentObjects, *, log: bytes | None = None, manifest: bytes | None = None) -> dict[Suffix, bytes]:
    return {
        Suffix.LOG: objects.log if log is None else log,
        Suffix.INDEXES: objects.indexes,
        Suffix.MANIFEST: objects.manifest_text if manifest is None else manifest,
    }


def plant(s3: Any, bucket: str, tmp_path: Path) -> Planted:
    db = tmp_path / "metadata.db"
    ring = key_ring()
    with SqliteMetadataStore(db) as store:
        writer = ControllerWriter(store)
        b = _Bucket(s3, bucket, store)
        orders = writer.create_topic("orders")
        clicks = writer.create_topic("clicks")
        keys: dict[str, list[str]] = {}

        def data(n: int) -> bytes:
            return segment_bytes(SEGMENT_BYTES, seed=n)

        seg = b.segment("orders", orders, data(1))
        keys["compressed+encrypted"] = b.put(seg, _bodies(b.aiven(seg, data(1), compression=True, ring=ring)))
        b.copied(seg)

        seg = b.segment("orders", orders, data(2))
        objects = b.aiven(seg, data(2), compression=True)
        keys["remote size"] = b.put(seg, _bodies(objects))
        b.copied(seg, SegmentCustomMetadata(remote_size=sum(objects.uploaded_bytes.values())))

        seg = b.segment("orders", orders, data(3))
        objects = b.aiven(seg, data(3), compression=True, ring=ring)
        keys["truncated"] = b.put(seg, _bodies(objects, log=objects.log[:-10]))
        b.copied(seg)

        seg = b.segment("orders", orders, data(4))
        objects = b.aiven(seg, data(4), compression=True)
        keys["no manifest"] = b.put(seg, {s: v for s, v in _bodies(objects).items() if s != Suffix.MANIFEST})
        b.copied(seg)

        seg = b.segment("orders", orders, data(5))
        objects = b.aiven(seg, data(5), compression=True)
        keys["garbage manifest"] = b.put(seg, _bodies(objects, manifest=b"<html>not a manifest</html>"))
        b.copied(seg)

        for name, cut in (("legacy", 0), ("legacy, wrong size", 1)):
            seg = b.segment("orders", orders, data(6))
            ids = dict(topic="orders", topic_id=str(orders), partition=0, segment_id=str(seg.segment_id))
            raw = data(6)[: SEGMENT_BYTES - cut]
            keys[name] = b.put(seg, {Suffix.LOG: raw, Suffix.INDEXES: b"ii", Suffix.MANIFEST: legacy_manifest(**ids)})
            b.copied(seg)

        seg = b.segment("clicks", clicks, data(7))
        objects = b.aiven(seg, data(7), compression=True, ring=ring)
        keys["other prefix"] = b.put(seg, _bodies(objects), prefix=OTHER_PREFIX)
        size = sum(objects.uploaded_bytes.values())
        b.copied(seg, SegmentCustomMetadata(remote_size=size, object_prefix=OTHER_PREFIX))
        s3.put_object(Bucket=bucket, Key=f"{OTHER_PREFIX}README.txt", Body=b"not a segment")  # never claimed
        planted = Planted(db, tmp_path / "export", "", keys, {"orders": orders, "clicks": clicks})
        inventory(s3, bucket, store, planted, tmp_path / "inventory")
    return planted


def inventory(s3: Any, bucket: str, store: SqliteMetadataStore, planted: Planted, dest: Path) -> None:
    """Export the store and list the bucket: the scanned prefix and every prefix a segment records."""
    export.export_metadata(store, planted.export_dir)
    also = recorded_prefixes(planted.export_dir, PREFIX)
    assert also == (OTHER_PREFIX,)
    taken_ms = _wall_ms() + 2 * HOUR  # every object is past the one-hour grace period
    listing = {"bucket": bucket, "prefix": PREFIX, "also_prefixes": also}
    planted.inventory = build_inventory(s3, **listing, dest=str(dest), now_ms=taken_ms)


@pytest.fixture
def planted(s3_client: Any, bucket: str, tmp_path: Path) -> Planted:
    """A bucket of its own, for a test that changes it or its metadata."""
    return plant(s3_client, bucket, tmp_path)


@pytest.fixture(scope="module")
def planted_once(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Planted:
    """One planted bucket for the tests that only scan it (each into its own output directory)."""
    s3 = make_s3_client(endpoint_url=moto_endpoint)
    bucket = f"aiven-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(Bucket=bucket)
    return plant(s3, bucket, tmp_path_factory.mktemp("aiven"))


def _scan(spark: Any, s3_client: Any, planted: Planted, out: Path, **settings: Any) -> dict[str, Any]:
    options = ScanSettings(prefix=PREFIX, grace_ms=HOUR, max_anomalies=100, **settings)
    inputs = dict(inventory_uri=planted.inventory, export_dir=planted.export_dir, out_dir=out)
    return scan(**inputs, settings=options, spark=spark, s3_client=s3_client).summary


def test_aiven_objects_are_judged_by_the_format_and_the_summary_is_exact(
    spark: Any, s3_client: Any, planted_once: Planted, tmp_path: Path
) -> None:
    out = tmp_path / "scan"
    summary = _scan(spark, s3_client, planted_once, out)

    anomalies = {k: v for k, v in summary["totals"]["anomalies"].items() if v}
    assert anomalies == {c.SIZE_MISMATCH: 2, c.MANIFEST_MISSING: 1, c.MANIFEST_UNREADABLE: 1}
    rows = pq.read_table(out / c.ANOMALIES_DIR).to_pylist()
    by_key = {(r["type"], r["key"]) for r in rows}
    keys = planted_once.keys
    assert (c.SIZE_MISMATCH, keys["truncated"][0]) in by_key
    assert (c.SIZE_MISMATCH, keys["legacy, wrong size"][0]) in by_key
    assert (c.MANIFEST_UNREADABLE, keys["garbage manifest"][2]) in by_key
    # Four GETs: the segments whose .log is not the RLMM's size, have a manifest and no REMOTE_SIZE.
    assert summary["manifests"] == {
        "read": True,
        "cap": c.DEFAULT_MAX_MANIFEST_READS,
        "needed": 4,
        "by_kind": {"aiven": 2, "legacy": 1, "unreadable": 1, "gone": 0},
        "file": c.MANIFESTS_DIR,
    }
    assert len(pq.read_table(out / c.MANIFESTS_DIR)) == 4

    objects = {o["key"]: o for o in pq.read_table(out / c.OBJECTS_DIR).to_pylist()}
    planted_keys = [k for ks in keys.values() for k in ks]
    assert len(objects) == len(planted_keys) + 1 == summary["inventory"]["rows"]
    assert {objects[k]["category"] for k in planted_keys} == {c.LIVE}
    assert {objects[k]["object_prefix"] for k in keys["other prefix"]} == {OTHER_PREFIX}
    assert objects[f"{OTHER_PREFIX}README.txt"]["category"] == c.OUTSIDE_PREFIX
    assert summary["totals"]["outside_prefix_objects"] == 1
    assert sum(summary["totals"]["reclaimable_bytes"].values()) == 0
    assert summary["parameters"]["object_prefixes"] == [OTHER_PREFIX]
    clicks = next(t for t in summary["topics"] if t["topic"] == "clicks")
    assert sum(clicks["anomalies"].values()) == 0 and clicks["objects"] == 3

    report = (out / c.REPORT_FILE).read_text()
    for name in (c.MANIFEST_MISSING, c.MANIFEST_UNREADABLE, c.SIZE_MISMATCH):
        assert name in report


def test_without_manifest_reads_a_transformed_log_is_judged_by_the_rlmm_alone(
    spark: Any, s3_client: Any, planted_once: Planted, tmp_path: Path
) -> None:
    summary = _scan(spark, s3_client, planted_once, tmp_path / "scan", max_manifest_reads=0)
    # compressed+encrypted, truncated, garbage manifest, legacy wrong size: every .log not of the RLMM's size
    # that only a manifest could vouch for; the one with REMOTE_SIZE and the untransformed legacy one are right.
    assert {k: v for k, v in summary["totals"]["anomalies"].items() if v} == {c.SIZE_MISMATCH: 4, c.MANIFEST_MISSING: 1}
    assert summary["manifests"]["read"] is False and summary["manifests"]["needed"] == 0


def test_more_manifests_to_read_than_the_cap_stops_the_scan_before_any_get(
    spark: Any, s3_client: Any, planted_once: Planted, tmp_path: Path
) -> None:
    with pytest.raises(ScanError, match=r"4 segments need their \.rsm-manifest read.*cap of 3.*--max-manifest-reads"):
        _scan(spark, s3_client, planted_once, tmp_path / "scan", max_manifest_reads=3)
    assert not (tmp_path / "scan" / c.MANIFESTS_DIR).exists()


def test_a_deleted_topic_s_objects_under_the_prefix_its_segments_record_are_reclaimed_there(
    spark: Any, s3_client: Any, moto_endpoint: str, bucket: str, planted: Planted, tmp_path: Path
) -> None:
    with SqliteMetadataStore(planted.db) as store:
        ControllerWriter(store).delete_topic(planted.topics["clicks"])
        inventory(s3_client, bucket, store, planted, tmp_path / "inventory-2")
    out = tmp_path / "scan"
    summary = _scan(spark, s3_client, planted, out)
    clicks = planted.keys["other prefix"]
    assert summary["totals"]["reclaimable_objects"][c.DELETED_TOPIC] == 3
    objects = {o["key"]: o for o in pq.read_table(out / c.OBJECTS_DIR).to_pylist()}
    assert {(objects[k]["category"], objects[k]["reclaimable"]) for k in clicks} == {(c.DELETED_TOPIC, True)}

    def listing() -> set[str]:
        pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"] for p in pages for o in p.get("Contents", [])}

    before = listing()
    args = ["--output", "json", "reclaim", str(out), "--older-than", "0s", "--execute"]
    with capture_logs():  # the CLI's log lines stay out of its JSON output
        result = CliRunner().invoke(cli, [*args, "--metadata-store", str(planted.db), "--s3-endpoint", moto_endpoint])
    assert result.exit_code == 0, result.output
    assert listing() == before - set(clicks)
    clicks_id = planted.topics["clicks"]
    assert json.loads(result.stdout)["planned_by_topic"] == {
        f"clicks-{clicks_id}": {"objects": 3, "bytes": sum(objects[k]["size"] for k in clicks)}
    }
    journal = [json.loads(line) for line in (out / "reclaim-journal.jsonl").read_text().splitlines()]
    assert {j["prefix"] for j in journal} == {f"{OTHER_PREFIX}clicks-{clicks_id}/"}
