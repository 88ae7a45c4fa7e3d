"""``tieredctl inventory build`` and ``tieredctl scan run`` end to end through the CLI: an inventory written to an
``s3://`` destination on moto's server, staged and checked by the scan, exit status 3 over the anomaly threshold and
0 within it, and ``scan report``. The scan reuses the test session's SparkSession (and must not stop it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from orchestrator.cli import cli
from orchestrator.ids import Uuid
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import SegmentKey, Suffix, build_key
from remote_storage.scan import contract as c
from tests.support import REPO_ROOT
from tests.support.broker_harness import ControllerWriter

pytestmark = pytest.mark.spark


def tieredctl(*args: str) -> Result:
    """Run the CLI in-process; log events are captured (the real entry point sends them to stderr)."""
    with capture_logs():
        return CliRunner().invoke(cli, list(args))


def test_inventory_build_scan_run_and_report_through_the_cli(
    spark: Any, s3_client: Any, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    db = tmp_path / "metadata.db"
    store = SqliteMetadataStore(db)
    try:
        ControllerWriter(store).create_topic("orders")
    finally:
        store.close()
    orphan = build_key("tiered/", SegmentKey("ghost", Uuid.random(), 0, 0, Uuid.random()), Suffix.LOG)
    s3_client.put_object(Bucket=bucket, Key=orphan, Body=b"x" * 100)
    s3_client.put_object(Bucket=bucket, Key="tiered/not-a-segment.txt", Body=b"y")
    s3_client.create_bucket(Bucket=f"{bucket}-inv")
    bucket_location = ["--s3-endpoint", moto_endpoint, "--bucket", bucket, "--prefix", "tiered/"]
    common = [*bucket_location, "--cluster-dir", str(tmp_path / "no-cluster")]

    inventory_dest = f"s3://{bucket}-inv/inventory/"
    built = tieredctl("--output", "json", "inventory", "build", *common, "--dest", inventory_dest, "--format", "csv")
    assert built.exit_code == 0, built.output
    manifest = json.loads(built.stdout)["manifest"]
    assert manifest == f"s3://{bucket}-inv/inventory/manifest.json"

    out = tmp_path / "scan"
    inputs = ["--inventory", manifest, "--metadata-store", str(db)]
    args = ["--output", "json", "scan", "run", *common, *inputs, "--out", str(out), "--grace", "0s"]
    over = tieredctl(*args)
    assert over.exit_code == c.EXIT_ANOMALIES, over.output
    summary = json.loads(over.stdout)
    assert summary["inventory"]["rows"] == 2
    assert summary["totals"]["reclaimable_objects"][c.UNKNOWN_TOPIC] == 1
    assert summary["totals"]["anomalies"][c.UNPARSEABLE_KEY] == 1
    assert summary["alert"] == {"anomalies_total": 1, "threshold": 0, "exceeded": True}
    # The outputs and nothing else: the s3:// inventory's files were read by the executors, not copied here.
    outputs = {c.OBJECTS_DIR, c.ANOMALIES_DIR, c.SUMMARY_FILE, c.REPORT_FILE, c.EXPORT_DIR, c.UPLOADS_FILE}
    assert {p.name for p in out.iterdir()} == outputs
    assert (out / c.REPORT_FILE).is_file() and (out / c.EXPORT_DIR / "topics.parquet").is_file()

    within = tieredctl(*args, "--max-anomalies", "1")
    assert within.exit_code == 0, within.output
    assert spark.range(3).count() == 3  # the session the scan reused is still running

    # A local cluster's defaults: its store, prefix and S3 endpoint, with nothing but --inventory given.
    LocalClusterState(str(tmp_path), "127.0.0.1:1", moto_endpoint, bucket, "tiered/", embedded_s3=False).save()
    cluster_and_inventory = ["--cluster-dir", str(tmp_path), "--inventory", manifest]
    output_and_limits = ["--out", str(tmp_path / "scan2"), "--grace", "0s", "--max-anomalies", "1"]
    defaults = tieredctl("--output", "json", "scan", "run", *cluster_and_inventory, *output_and_limits)
    assert defaults.exit_code == 0, defaults.output
    assert json.loads(defaults.stdout)["totals"] == summary["totals"]

    report = tieredctl("scan", "report", str(out))
    assert report.exit_code == 0, report.output
    assert "unknown_topic" in report.output and "report.html" in report.output

    bad = tieredctl("scan", "run", "--out", str(tmp_path / "x"), "--grace", "soon", *common)
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_no_credentials_for_the_bucket_is_said_as_such_with_what_to_do(moto_endpoint: str, tmp_path: Path) -> None:
    """Without any AWS credentials a command that reads the bucket fails with MISSING_CREDENTIALS and its hint, not
    with a storage error (the environment has no AWS_* variables, HOME has no ~/.aws, instance metadata is off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true")
    where = ["--s3-endpoint", moto_endpoint, "--bucket", "any", "--cluster-dir", str(tmp_path / "none")]
    command = [sys.executable, "-m", "orchestrator.cli", "inventory", "build", *where, "--dest", str(tmp_path / "inv")]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "error: MISSING_CREDENTIALS: " in proc.stderr and "AWS_ACCESS_KEY_ID" in proc.stderr
    assert not (tmp_path / "inv" / "manifest.json").exists()


def test_a_local_cluster_on_the_embedded_s3_needs_no_credentials_in_the_environment(
    s3_client: Any, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    """As the README's commands are run on a fresh machine: the local cluster's embedded S3 takes its own key pair."""
    s3_client.put_object(Bucket=bucket, Key="tiered/any.log", Body=b"x")
    local = LocalClusterState(str(tmp_path), "127.0.0.1:1", moto_endpoint, bucket, "tiered/", embedded_s3=True)
    local.save()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true")
    build = ["inventory", "build", "--cluster-dir", str(tmp_path), "--dest", str(tmp_path / "inv")]
    command = [sys.executable, "-m", "orchestrator.cli", "--output", "json", *build]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bucket"] == bucket and (tmp_path / "inv" / "manifest.json").exists()
