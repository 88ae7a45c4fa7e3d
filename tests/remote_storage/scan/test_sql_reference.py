"""The bench's DuckDB reference (the scan's rules in SQL) agrees object by object with the rules' source of truth.

The classification rules are written once, as :mod:`remote_storage.scan.contract` and its plain-Python reference
classifier :mod:`policies.orphans`. Two other implementations exist for speed: the Spark job (checked against the
reference in ``test_scan_agreement``) and the DuckDB SQL that ``make bench`` times the Spark job against. This test
keeps the SQL honest: on a generated bucket holding every category and every anomaly type, each object gets the
same category, reclaimability and anomaly, and the same anomalies are found, with the size rule given the same
manifest readings (as the scan's executors would have read them) and without any.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import scan as bench
from remote_storage.scan import contract as c

pytestmark = pytest.mark.integration


def test_the_duckdb_rules_classify_every_object_as_the_reference_classifier_does(tmp_path: Path) -> None:
    data = bench.generate(tmp_path / "data", 12_000, topics=20, partitions=3, rare=5.0, edge_cases=True)
    expected, expected_anomalies, malformed = bench._reference(data, manifests_read=True)
    files = [str(f) for f in data.data_files]
    out = tmp_path / "duckdb"
    options = {"prefix": bench.PREFIX, "now_ms": bench.NOW_MS, "grace_ms": bench.GRACE_MS, "threads": 2}
    duck = bench.duckdb_scan(files, data.export_dir, out, **options, manifests=data.manifests_file)
    got, got_anomalies = bench._read_outputs(out)

    assert {v[0] for v in expected.values()} == set(c.CATEGORIES), "the generated bucket lacks a category"
    found_types = {a[0] for a in expected_anomalies} | ({c.MALFORMED_INVENTORY_ROW} if malformed else set())
    assert found_types == set(c.ANOMALY_TYPES), "the generated bucket lacks an anomaly type"
    differing = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    assert not differing, [(k, expected.get(k), got.get(k)) for k in differing[:10]]
    assert got_anomalies == expected_anomalies
    assert duck["totals"]["anomalies"][c.MALFORMED_INVENTORY_ROW] == malformed


def test_without_manifest_readings_the_duckdb_rules_still_classify_as_the_reference_does(tmp_path: Path) -> None:
    """How the bench times both sides: no bucket to read manifests from."""
    data = bench.generate(tmp_path / "data", 6_000, topics=20, partitions=3, rare=5.0, edge_cases=True)
    expected, expected_anomalies, _ = bench._reference(data)
    out = tmp_path / "duckdb"
    options = {"prefix": bench.PREFIX, "now_ms": bench.NOW_MS, "grace_ms": bench.GRACE_MS, "threads": 2}
    bench.duckdb_scan([str(f) for f in data.data_files], data.export_dir, out, **options)
    got, got_anomalies = bench._read_outputs(out)
    differing = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    assert not differing, [(k, expected.get(k), got.get(k)) for k in differing[:10]]
    assert got_anomalies == expected_anomalies
    assert c.MANIFEST_UNREADABLE not in {a[0] for a in expected_anomalies}  # nothing was read
