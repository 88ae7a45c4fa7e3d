"""The newcomer's commands (issue 13, item 5), run as the README shows them: the real ``tieredctl`` in a subprocess,
in a fresh working directory, with nothing in the environment but HOME and PATH.

- the global options after the command (``tiering status --output json``, ``topic describe x --bootstrap-server``);
- ``inventory build``, ``scan run`` and ``reclaim`` against the local cluster's embedded S3 with no AWS_* variables,
  all three taking the local cluster the same way (``--cluster-dir``, default ``./var/cluster``);
- no credentials for another endpoint is MISSING_CREDENTIALS with its hint;
- no local cluster, or a stopped one, is said plainly with how to start one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.export import export_metadata
from remote_storage.keys import SegmentKey, Suffix, build_key
from remote_storage.scan import contract as c
from tests.support.broker_harness import ControllerWriter
from tests.support.live_cluster import LiveCluster
from tests.support.newcomer_home import newcomer_home
from tests.support.scan_output import PREFIX, write_scan

pytestmark = [pytest.mark.timeout(300)]  # each test's kind beside it: one needs Spark

TIEREDCTL = str(Path(sys.executable).parent / "tieredctl")  # the console script, as a user runs it
CLEAN_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def tieredctl(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, check: int | None = 0, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``tieredctl ARGS`` in ``cwd`` with only PATH and HOME (``cwd/home``, a set-up newcomer's) set, plus ``env``."""
    home = newcomer_home(cwd / "home")
    environment = {**CLEAN_ENV, "HOME": str(home), **(env or {})}
    proc = subprocess.run([TIEREDCTL, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LiveCluster]]:
    """A working directory with a running local cluster where ``tieredctl cluster up`` puts it: ./var/cluster."""
    workdir = tmp_path_factory.mktemp("newcomer")
    cluster = LiveCluster(workdir / "var" / "cluster", brokers=1, controllers=1)
    try:
        yield workdir, cluster
    finally:
        cluster.close()


# -- the global options ---------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_global_options_are_accepted_after_the_command_on_a_live_cluster(
    newcomer: tuple[Path, LiveCluster], tmp_path: Path
) -> None:
    workdir, cluster = newcomer
    tieredctl("topic", "create", "newbie", "--partitions", "2", cwd=workdir)

    statuses = json.loads(tieredctl("tiering", "status", "--output", "json", cwd=workdir).stdout)
    assert [s["topic"] for s in statuses] == ["newbie"] and statuses[0]["state"] == "NOT_TIERED"

    elsewhere = tmp_path  # no local cluster here: only the option says where the cluster is
    described = tieredctl("topic", "describe", "newbie", "--bootstrap-server", cluster.bootstrap, cwd=elsewhere)
    assert described.stdout.startswith("topic newbie ") and "partition 1:" in described.stdout

    closed = f"127.0.0.1:{_closed_port()}"
    after_wins = ["--bootstrap-server", closed, "topic", "describe", "newbie", "--bootstrap-server", cluster.bootstrap]
    described_json = json.loads(tieredctl(*after_wins, "-o", "json", cwd=elsewhere).stdout)
    assert described_json["topic"] == "newbie" and len(described_json["partitions"]) == 2


# -- the bucket commands with nothing in the environment -----------------------------------------------------------


@pytest.mark.spark
def test_inventory_scan_and_reclaim_work_on_the_local_cluster_with_no_environment(
    newcomer: tuple[Path, LiveCluster],
) -> None:
    workdir, cluster = newcomer
    state = cluster.state
    s3 = lc.s3_client(state)
    orphan = build_key(state.prefix, SegmentKey("ghost", Uuid.random(), 0, 0, Uuid.random()), Suffix.LOG)
    s3.put_object(Bucket=state.bucket, Key=orphan, Body=b"x" * 100)

    built = json.loads(tieredctl("--output", "json", "inventory", "build", "--dest", "./inv", cwd=workdir).stdout)
    assert built["bucket"] == state.bucket and (workdir / "inv" / "manifest.json").is_file()

    scan_args = ["scan", "run", "--out", "./scan", "--grace", "0s", "--driver-memory", "1g", "--max-anomalies", "1000"]
    tieredctl(*scan_args, cwd=workdir, timeout=240)
    summary = json.loads((workdir / "scan" / c.SUMMARY_FILE).read_text())
    assert summary["totals"]["reclaimable_objects"][c.UNKNOWN_TOPIC] == 1

    reclaim = ["--output", "json", "reclaim", "./scan", "--older-than", "0s", "--max-orphan-ratio", "1"]
    dry = json.loads(tieredctl(*reclaim, cwd=workdir).stdout)
    assert dry["planned_objects"] == 1 and dry["metadata_source"].startswith("store ")  # the cluster's store
    assert dry["warnings"] == []
    done = json.loads(tieredctl(*reclaim, "--execute", cwd=workdir).stdout)
    assert done["deleted_objects"] == 1
    assert s3.list_objects_v2(Bucket=state.bucket, Prefix=orphan)["KeyCount"] == 0


def _scan_of_one_orphan(s3_client: Any, bucket: str, directory: Path) -> tuple[Path, Path, str]:
    """A metadata store with one topic, a bucket with one object of a topic id it never held, and the scan's output
    of that bucket (built without Spark): (store, scan directory, the orphan's key)."""
    directory.mkdir(parents=True, exist_ok=True)
    store_path = directory / "metadata.db"
    scan_dir = directory / "scan"
    with SqliteMetadataStore(store_path) as store:
        ControllerWriter(store).create_topic("orders")
        export_metadata(store, scan_dir / c.EXPORT_DIR)
    orphan = build_key(PREFIX, SegmentKey("ghost", Uuid.random(), 0, 0, Uuid.random()), Suffix.LOG)
    s3_client.put_object(Bucket=bucket, Key=orphan, Body=b"x" * 100)
    write_scan(s3_client, bucket, scan_dir)
    return store_path, scan_dir, orphan


@pytest.mark.integration
def test_reclaim_takes_the_local_cluster_like_inventory_and_scan(
    s3_client: Any, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    """The README's `tieredctl reclaim ./scan`: endpoint, key pair and store from ./var/cluster, no options."""
    cluster_dir = tmp_path / "var" / "cluster"
    cluster_dir.mkdir(parents=True)
    _, scan_dir, orphan = _scan_of_one_orphan(s3_client, bucket, cluster_dir)
    LocalClusterState(str(cluster_dir), "127.0.0.1:1", moto_endpoint, bucket, PREFIX, embedded_s3=True).save()
    (tmp_path / "scan").symlink_to(scan_dir)

    reclaim = ["--output", "json", "reclaim", "./scan", "--older-than", "0s", "--max-orphan-ratio", "1"]
    dry = json.loads(tieredctl(*reclaim, cwd=tmp_path).stdout)
    assert dry["planned_objects"] == 1 and dry["metadata_source"] == f"store {cluster_dir / 'metadata.db'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    explicit = ["--cluster-dir", str(cluster_dir), "--s3-endpoint", moto_endpoint, "--bucket", bucket]
    again = json.loads(tieredctl(*reclaim[:3], str(scan_dir), *reclaim[4:], *explicit, cwd=elsewhere).stdout)
    assert again["planned_objects"] == 1 and again["metadata_source"] == dry["metadata_source"]
    assert s3_client.head_object(Bucket=bucket, Key=orphan)["ContentLength"] == 100  # a dry run


@pytest.mark.integration
def test_reclaim_of_another_bucket_does_not_take_the_local_clusters_store(
    s3_client: Any, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    """Re-checking another bucket's objects against the local cluster's metadata would call its live segments
    orphans: the local cluster's store is the default for the cluster's own bucket only."""
    cluster_dir = tmp_path / "var" / "cluster"
    cluster_dir.mkdir(parents=True)
    SqliteMetadataStore(cluster_dir / "metadata.db").close()
    LocalClusterState(str(cluster_dir), "127.0.0.1:1", moto_endpoint, "another", PREFIX, embedded_s3=True).save()
    _, scan_dir, _ = _scan_of_one_orphan(s3_client, bucket, tmp_path / "elsewhere")

    reclaim = ["--output", "json", "reclaim", str(scan_dir), "--older-than", "0s", "--max-orphan-ratio", "1"]
    dry = json.loads(tieredctl(*reclaim, cwd=tmp_path).stdout)
    assert dry["metadata_source"] == f"scan export {scan_dir / c.EXPORT_DIR}" and len(dry["warnings"]) == 1


@pytest.mark.integration
def test_no_credentials_for_another_endpoint_is_missing_credentials_with_its_hint(
    s3_client: Any, moto_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    store, scan_dir, _ = _scan_of_one_orphan(s3_client, bucket, tmp_path)
    no_instance_role = {"AWS_EC2_METADATA_DISABLED": "true"}
    where = ["--s3-endpoint", moto_endpoint, "--metadata-store", str(store), "--older-than", "0s"]
    reclaim = ["reclaim", str(scan_dir), *where, "--max-orphan-ratio", "1"]
    proc = tieredctl(*reclaim, cwd=tmp_path, env=no_instance_role, check=1)
    assert "error: MISSING_CREDENTIALS: " in proc.stderr and "AWS_ACCESS_KEY_ID" in proc.stderr
    assert "INVALID_REQUEST" not in proc.stderr

    with_keys = {**no_instance_role, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}  # the usual AWS way
    dry = tieredctl("--output", "json", *reclaim, cwd=tmp_path, env=with_keys)
    assert json.loads(dry.stdout)["planned_objects"] == 1


# -- no local cluster -----------------------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_a_missing_local_cluster_is_said_plainly_with_how_to_start_one(tmp_path: Path) -> None:
    for args in (["cluster", "status", "--dir", "/nowhere"], ["cluster", "down", "--dir", "/nowhere"]):
        proc = tieredctl(*args, cwd=tmp_path, check=1)
        assert proc.stderr.startswith("error: LOCAL_CLUSTER_ERROR: no local cluster in /nowhere"), proc.stderr
        assert "'tieredctl cluster up'" in proc.stderr and "KAFKA_STORAGE_ERROR" not in proc.stderr
    status = tieredctl("cluster", "status", cwd=tmp_path, check=1)
    assert f"no local cluster in {tmp_path / 'var' / 'cluster'}" in status.stderr

    falling_back = tieredctl("tiering", "status", cwd=tmp_path, check=2)
    assert "no local cluster in var/cluster" in falling_back.stderr and "'tieredctl cluster up'" in falling_back.stderr
    no_bucket = tieredctl("inventory", "build", "--dest", "./inv", cwd=tmp_path, check=2)
    assert "no local cluster in var/cluster" in no_bucket.stderr


@pytest.mark.integration
def test_a_stopped_local_cluster_is_said_plainly_with_how_to_start_it_again(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "var" / "cluster"
    cluster_dir.mkdir(parents=True)
    bootstrap = f"127.0.0.1:{_closed_port()}"  # what 'cluster down' leaves: the record, and nothing listening
    LocalClusterState(str(cluster_dir), bootstrap, "http://127.0.0.1:1", "b", PREFIX, embedded_s3=True).save()
    proc = tieredctl("topic", "list", cwd=tmp_path, check=1)
    assert proc.stderr.startswith("error: LOCAL_CLUSTER_ERROR: the local cluster in var/cluster is not running")
    assert bootstrap in proc.stderr and "'tieredctl cluster up'" in proc.stderr
