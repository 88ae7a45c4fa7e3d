"""A scan's output (``objects.parquet`` and ``summary.json``) written without Spark, from a bucket's listing
classified against a metadata export: what ``reclaim`` reads, for tests that need a scan but not its engine."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from policies.orphans import BucketObject, Metadata, classify
from remote_storage.export import load_export
from remote_storage.keys import KeyParseError, parse_key
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan import contract as c

PREFIX = "tiered/"
_ARROW = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}


def wall_ms() -> int:
    return int(time.time() * 1000)


def write_scan(s3_client, bucket: str, out: Path, *, grace_ms: int = 0, extra_rows: list[dict] = ()) -> list[dict]:
    """List ``bucket``, classify it against ``out/export`` and write ``objects.parquet`` and ``summary.json``."""
    rsm = S3RemoteStorage(client=s3_client, bucket=bucket, prefix=PREFIX)
    objects = [BucketObject(o.key, o.size, o.last_modified_ms) for o in rsm.list_objects("")]
    now = wall_ms()
    topics, segments, epochs = load_export(out / c.EXPORT_DIR)
    meta = Metadata.build(topics, segments, epochs, now_ms=now)
    verdicts = classify(objects, meta, prefix=PREFIX, now_ms=now, grace_ms=grace_ms).objects
    rows = []
    for obj, v in zip(objects, verdicts, strict=True):
        try:
            seg = parse_key(obj.key, v.object_prefix) if v.object_prefix is not None else None
        except KeyParseError:  # a recorded key that is not the layout's: its parts are the segment's
            seg = None
        rlmm = meta.segments.get((v.topic_id, v.segment_id)) if seg else None
        row = {
            "key": obj.key,
            "size": obj.size,
            "last_modified_ms": obj.last_modified_ms,
            "age_ms": now - obj.last_modified_ms,
            "topic": seg.segment.topic if seg else None,
            "topic_id": v.topic_id,
            "partition": seg.segment.partition if seg else None,
            "start_offset": seg.segment.start_offset if seg else None,
            "segment_id": v.segment_id,
            "suffix": seg.suffix.value if seg else None,
            "segment_state": rlmm.state if rlmm else None,
            "segment_epoch": rlmm.tiered_epoch if rlmm else None,
            "category": v.category,
            "reclaimable": v.reclaimable,
            "anomaly": v.anomaly,
            "object_prefix": v.object_prefix,
        }
        rows.append(row)
    rows.extend(extra_rows)
    schema = pa.schema([pa.field(name, _ARROW[kind]) for name, kind in c.OBJECT_COLUMNS])
    objects_dir = out / c.OBJECTS_DIR
    objects_dir.mkdir(parents=True, exist_ok=True)
    for old in objects_dir.iterdir():
        old.unlink()
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, objects_dir / "part-00000-5b3a7c1e-0000-4000-8000-000000000000-c000.snappy.parquet")
    (objects_dir / "_SUCCESS").write_text("")
    summary = {
        "format_version": 1,
        "inventory": {"uri": f"s3://{bucket}-inventory/manifest.json", "source_bucket": bucket, "creation_ms": now},
        "export": {"dir": str(out / c.EXPORT_DIR)},
        "parameters": {"prefix": PREFIX, "grace_ms": grace_ms, "now_ms": now, "max_anomalies": 0},
        "totals": {"objects": len(rows)},
        "topics": [],
        "alert": {"anomalies_total": 0, "threshold": 0, "exceeded": False},
    }
    (out / c.SUMMARY_FILE).write_text(json.dumps(summary))
    return rows
