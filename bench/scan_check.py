"""The scan bench's agreement check: the DuckDB SQL (and the Spark job) against :func:`policies.orphans.classify`.

:func:`check` generates a small bucket with edge-case keys (:mod:`bench.scan_data`), classifies it with the plain-Python
reference (:func:`reference`), and compares the DuckDB reference's outputs with it object by object and anomaly by
anomaly, with the manifests read; then, unless told not to, the Spark job's outputs with both sides judging sizes
without the manifests (the job has no bucket to read them from here), and the two sides' totals.

Invariants: a verdict is compared as (category, reclaimable, anomaly) per key, anomalies as a multiset of (type, topic
id, segment id, key); the check's result is the count of mismatches (zero: they agree), each printed (the first 40
verdicts and 20 anomalies either way).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.scan_data import GRACE_MS, NOW_MS, PREFIX, Dataset, generate
from bench.scan_reference import duckdb_scan
from bench.scan_runs import THREADS, child_spark, compare_totals
from policies import orphans as o
from remote_storage import export
from remote_storage import inventory as inv
from remote_storage.scan import contract as c
from remote_storage.scan.manifest_reading import ManifestReading


def manifest_readings(data: Dataset) -> dict[tuple[str, str], ManifestReading]:
    """What the generated segments' manifests say (as if the scan's executors had read them)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(data.manifests_file).to_pylist()
    return {(r["topic_id"], r["segment_id"]): ManifestReading(r["m_kind"], r["m_size"], r["m_detail"]) for r in rows}


def reference(
    data: Dataset, *, manifests_read: bool = False
) -> tuple[dict[str, tuple[str, bool, str | None]], Counter[tuple[Any, ...]], int]:
    """policies.orphans.classify on the generated bucket: per-key verdicts, anomalies, malformed row count; with
    ``manifests_read``, the size rule reads :func:`manifest_readings`."""
    topics, segments, epochs = export.load_export(data.export_dir)
    meta = o.Metadata.build(topics, segments, epochs, now_ms=NOW_MS)
    inventory = inv.read_inventory(str(data.inventory_dir))
    objs = [o.BucketObject(r.key, r.size, r.last_modified_ms) for r in inventory.rows()]
    readings = manifest_readings(data) if manifests_read else None
    result = o.classify(objs, meta, prefix=PREFIX, now_ms=NOW_MS, grace_ms=GRACE_MS, manifests=readings)
    verdicts = {v.key: (v.category, v.reclaimable, v.anomaly) for v in result.objects}
    assert len(verdicts) == len(objs), "generated keys are not unique"
    anomalies = Counter((a.type, a.topic_id, a.segment_id, a.key) for a in result.anomalies)
    return verdicts, anomalies, inventory.malformed.total


def read_outputs(out_dir: Path) -> tuple[dict[str, tuple[str, bool, str | None]], Counter[tuple[Any, ...]]]:
    import pyarrow.dataset as ds

    objects = ds.dataset(out_dir / c.OBJECTS_DIR, format="parquet").to_table().to_pylist()
    anomalies = ds.dataset(out_dir / c.ANOMALIES_DIR, format="parquet").to_table().to_pylist()
    verdicts = {r["key"]: (r["category"], r["reclaimable"], r["anomaly"]) for r in objects}
    found = Counter((a["type"], a["topic_id"], a["segment_id"], a["key"]) for a in anomalies)
    return verdicts, found


def _diff(name: str, expected: dict[str, Any], got: dict[str, Any], exp_a: Counter[Any], got_a: Counter[Any]) -> int:
    bad = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    for k in bad[:40]:
        print(f"  {name} object {k!r}: expected {expected.get(k)} got {got.get(k)}")
    missing, extra = exp_a - got_a, got_a - exp_a
    for a in list(missing)[:20]:
        print(f"  {name} anomaly missing: {a}")
    for a in list(extra)[:20]:
        print(f"  {name} anomaly extra: {a}")
    anomaly_counts = f"{sum(exp_a.values()):,} anomalies, {sum(missing.values())} missing, {sum(extra.values())} extra"
    by_type = dict(sorted(Counter(a[0] for a in exp_a.elements()).items()))
    print(f"{name}: {len(expected):,} objects, {len(bad)} verdict mismatches; {anomaly_counts} (by type: {by_type})")
    return len(bad) + sum(missing.values()) + sum(extra.values())


def check(rows: int = 20_000, *, spark: bool = True) -> int:
    """DuckDB SQL (and the Spark job) against policies.orphans.classify, object by object; the mismatch count."""
    with tempfile.TemporaryDirectory(prefix="bench-scan-check-") as tmp:
        root = Path(tmp)
        data = generate(root / "data", rows, topics=20, partitions=3, rare=5.0, edge_cases=True)
        expected, expected_anomalies, malformed = reference(data, manifests_read=True)
        cats = Counter(v[0] for v in expected.values())
        by_category = dict(sorted(cats.items()))
        print(f"generated {rows:,} rows ({malformed} malformed), {data.segments:,} segments; categories {by_category}")
        files = [str(f) for f in data.data_files]
        duck_dir = root / "duckdb"
        options: dict[str, Any] = {"prefix": PREFIX, "now_ms": NOW_MS, "grace_ms": GRACE_MS, "threads": THREADS}
        duck = duckdb_scan(files, data.export_dir, duck_dir, **options, manifests=data.manifests_file)
        got, got_anomalies = read_outputs(duck_dir)
        bad = _diff("duckdb", expected, got, expected_anomalies, got_anomalies)
        if duck["totals"]["anomalies"][c.MALFORMED_INVENTORY_ROW] != malformed:
            print(f"  duckdb malformed rows {duck['totals']['anomalies'][c.MALFORMED_INVENTORY_ROW]}, want {malformed}")
            bad += 1
        if spark:  # no bucket to read manifests from: both sides judge sizes without them
            unread, unread_anomalies, _ = reference(data)
            unread_duck = duckdb_scan(files, data.export_dir, root / "duckdb-unread", **options)
            common = {"export_dir": str(data.export_dir), "prefix": PREFIX, "now_ms": NOW_MS, "grace_ms": GRACE_MS}
            spark_args = {"out_dir": str(root / "spark"), "inventory_dir": str(data.inventory_dir), **common}
            result = child_spark(spark_args)
            got, got_anomalies = read_outputs(root / "spark")
            bad += _diff("spark", unread, got, unread_anomalies, got_anomalies)
            for line in compare_totals(result["totals"], unread_duck["totals"]):
                print(f"  totals {line}")
                bad += 1
    return bad
