"""The scan on a real standalone Spark cluster reading an ``s3://`` inventory from moto's server: its summary (and its
Parquet outputs) equal the local-mode scan's exactly.

The cluster: a master and a worker started from the installed PySpark's ``spark-class`` as separate processes (each
in its own process group, killed as a group at the end: the worker forks the executor's JVM, which forks Python),
bound to 127.0.0.1 on free ports, the worker with 1 core, 1 GiB and its own work directory in a temporary directory,
so the executor is another JVM with another working directory than the driver's. The job is submitted by the deployed
wrapper (``deploy/spark/tieredctl-scan-submit``, a separate process, so this test's session-wide local SparkSession
is not disturbed): it ships the project as a ``--py-files`` zip; the executors' Python is the repository's venv (the
wrapper's ``PYSPARK_PYTHON``), which has pyarrow and boto3.

The worker runs without any AWS credentials in its environment (no ``AWS_*`` variables, no credentials file, no
instance metadata): the executors can read the inventory only with the endpoint and keys the job ships them.

Soak-sized (:mod:`tests.support.soak`): ``make soak`` scans both inventory formats on the cluster, ``make test``
the CSV one. What only a cluster shows (code shipped as ``--py-files``, an executor in another JVM and directory,
credentials and endpoint that must travel with the job) does not depend on the format; each format's decoding by
the executors is checked in every run in local mode (``test_planted_bucket.py``, ``test_agreement.py``,
``test_native_parquet.py``).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import Phase, find, settings

from remote_storage.scan import contract as c
from remote_storage.scan.class_archive import installed, installed_spark_home, java_options
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.run import scan
from remote_storage.scan.session import QUICK_JIT_OPTION
from tests.support import REPO_ROOT, aws_inventory
from tests.support.ports import free_port
from tests.support.scan_world import GRACE_MS, PREFIX, World, worlds
from tests.support.soak import sized

pytestmark = pytest.mark.spark

FORMATS = sized(["csv"], soak=["csv", "parquet"])

WRAPPER = REPO_ROOT / "deploy" / "spark" / "tieredctl-scan-submit"
START_TIMEOUT_S = 90
SUBMIT_TIMEOUT_S = 300
POLL_S = 0.5
MAX_ANOMALIES = 1_000_000  # the scan exits 0 (an alert is not what this test is about)


def _spark_home_and_options() -> tuple[Path, str]:
    """The Spark home the cluster's and the driver's JVMs start from, and the JVM options of a small job there: the
    class archive make setup built and its Spark home (the mirror whose jars it was made with), if it did; else the
    installed PySpark package."""
    archive = installed()
    if archive is None:
        return installed_spark_home(), QUICK_JIT_OPTION
    return archive.spark_home, f"{QUICK_JIT_OPTION} {java_options(archive.path)}"


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    worker_dir: Path
    processes: list[subprocess.Popen[bytes]]
    spark_home: Path  # the cluster's, which the driver's spark-submit is started from too
    java_options: str  # the JVMs' (see _spark_home_and_options)


def _workers_alive(ui_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{ui_url}/json/", timeout=2) as resp:
            state = json.load(resp)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group this test started (the JVM and whatever it forked), SIGKILL what outlives 20 s."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):  # the leader is gone; anything it forked goes with the group
            os.killpg(proc.pid, signal.SIGKILL)
        return


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    root = tmp_path_factory.mktemp("spark-standalone")
    home, java = _spark_home_and_options()
    spark_class = str(home / "bin" / "spark-class")
    master_port, master_ui, worker_ui = free_port(), free_port(), free_port()  # this worker's, below the ephemeral
    # No AWS credentials of any kind for the cluster's processes: what the executors use must come with the job.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_HOST": "127.0.0.1",
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "AWS_SHARED_CREDENTIALS_FILE": str(root / "no-credentials"),
        "AWS_CONFIG_FILE": str(root / "no-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        # A small job (see remote_storage/scan/session.py), and the class archive make setup built, if it did.
        "SPARK_DAEMON_JAVA_OPTS": java,
    }
    master_cmd = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master_cmd += ["--port", str(master_port), "--webui-port", str(master_ui)]
    master_url = f"spark://127.0.0.1:{master_port}"
    worker_cmd = [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1"]
    worker_cmd += ["--webui-port", str(worker_ui), "--cores", "1", "--memory", "1g", "--work-dir", str(root / "work")]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, cmd in (("master", master_cmd), ("worker", worker_cmd)):
            with (root / f"{name}.log").open("wb") as log:
                processes.append(
                    subprocess.Popen(
                        cmd, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        ui_url = f"http://127.0.0.1:{master_ui}"
        deadline = time.monotonic() + START_TIMEOUT_S
        for _ in range(int(START_TIMEOUT_S / POLL_S)):
            if _workers_alive(ui_url) >= 1 or time.monotonic() > deadline:
                break
            assert all(p.poll() is None for p in processes), (root / "worker.log").read_text()[-3000:]
            time.sleep(POLL_S)
        assert _workers_alive(ui_url) >= 1, "the worker did not register: " + (root / "worker.log").read_text()[-3000:]
        yield StandaloneCluster(master_url, ui_url, root / "work", processes, home, java)
    finally:
        for proc in reversed(processes):
            _stop_group(proc)


def _world() -> World:
    """A fixed generated bucket (every run the same), with enough objects to span several data files."""
    fixed = settings(database=None, derandomize=True, max_examples=500, phases=[Phase.generate])
    return find(worlds(max_topics=4), lambda w: len({o.key for o in w.objects}) >= 30, settings=fixed)


def _inventory_files(world: World, fmt: str, source: str) -> dict[str, bytes]:
    """The world's objects in bucket ``source``, 8 to a data file, plus one file of malformed rows (CRLF and blank
    lines in CSV)."""
    rows = [(source, o.key, o.size, o.last_modified_ms) for o in world.objects]
    chunks = [rows[i : i + 8] for i in range(0, len(rows), 8)]
    if fmt == "csv":
        files = {
            f"part-{i}.csv.gz": aws_inventory.gz([aws_inventory.csv_line(*r) for r in ch])
            for i, ch in enumerate(chunks)
        }
        junk = [
            '"kafka-tiered","tiered/x","12"',  # wrong column count
            '"kafka-tiered","tiered/%ZZ","1","2023-11-14T00:00:00.000Z","e","STANDARD"',  # undecodable key
            '"kafka-tiered","tiered/y","NaN","2023-11-14T00:00:00.000Z","e","STANDARD"',  # bad size
            "",
            '"kafka-tiered","tiered/z","5","yesterday","e","STANDARD"',  # bad last modified date
        ]
        files["junk.csv.gz"] = gzip.compress(("\r\n".join(junk) + "\r\n").encode())
        return files
    files = {f"part-{i}.parquet": aws_inventory.parquet_bytes(ch) for i, ch in enumerate(chunks)}
    files["junk.parquet"] = aws_inventory.parquet_bytes([(source, "", 3, 0), (source, "tiered/neg", -1, 0)])
    return files


def _upload_inventory(s3: Any, bucket: str, world: World, fmt: str, root: Path) -> str:
    """The inventory of a scanned bucket of its own, which holds the world's manifests (the scan's executors read
    those its size rule needs), uploaded to ``bucket``."""
    source = f"scanned-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=source)
    for key, body in world.bodies.items():
        s3.put_object(Bucket=source, Key=key, Body=body)
    manifest = aws_inventory.write_aws_inventory(
        root,
        _inventory_files(world, fmt, source),
        fmt="CSV" if fmt == "csv" else "Parquet",
        schema=aws_inventory.CSV_SCHEMA if fmt == "csv" else aws_inventory.PARQUET_SCHEMA,
        creation_ms=world.now_ms,
        source=source,
    )
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.put_object(Bucket=bucket, Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    return f"s3://{bucket}/{manifest.relative_to(root).as_posix()}"


def _comparable(out: Path) -> dict[str, Any]:
    summary = json.loads((out / c.SUMMARY_FILE).read_text())
    summary.pop("generated_at_ms")
    objects = sorted(pq.read_table(out / c.OBJECTS_DIR).to_pylist(), key=lambda r: r["key"])
    anomalies = sorted(pq.read_table(out / c.ANOMALIES_DIR).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))
    return {"summary": summary, "objects": objects, "anomalies": anomalies}


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_standalone_cluster_scans_an_s3_inventory_exactly_as_local_mode_does(
    standalone_cluster: StandaloneCluster,
    spark: Any,
    s3_client: Any,
    moto_endpoint: str,
    bucket: str,
    tmp_path: Path,
    fmt: str,
) -> None:
    world = _world()
    inventory_uri = _upload_inventory(s3_client, bucket, world, fmt, tmp_path / "inventory")
    export_dir = world.write_export(tmp_path / "export")
    local_out = tmp_path / "local"
    scan(
        inventory_uri=inventory_uri,
        export_dir=export_dir,
        out_dir=local_out,
        settings=ScanSettings(prefix=PREFIX, grace_ms=GRACE_MS, max_anomalies=MAX_ANOMALIES),
        s3_client=s3_client,
        spark=spark,
    )

    runs = tmp_path / "runs"
    env = dict(os.environ)
    env |= {
        "TIEREDCTL_SCAN_ENV": "/dev/null",
        "SCAN_PYTHON": sys.executable,
        "SCAN_MASTER": standalone_cluster.master_url,
        "SCAN_DRIVER_MEMORY": "1g",
        "SCAN_EXECUTOR_MEMORY": "512m",
        "SCAN_INVENTORY": inventory_uri,
        "SCAN_EXPORT_DIR": str(export_dir),
        "SCAN_OUTPUT_BASE": str(runs),
        "SCAN_PREFIX": PREFIX,
        "SCAN_GRACE": f"{GRACE_MS // 1000}s",
        "SCAN_MAX_ANOMALIES": str(MAX_ANOMALIES),
        "SCAN_S3_ENDPOINT": moto_endpoint,
        "SPARK_LOCAL_IP": "127.0.0.1",  # the driver binds loopback; the executor connects back to it there
        "SCAN_SPARK_CONF": "spark.driver.host=127.0.0.1 spark.ui.enabled=false spark.cores.max=1"
        f" spark.executor.extraJavaOptions={QUICK_JIT_OPTION}",
        "SPARK_HOME": str(standalone_cluster.spark_home),  # the wrapper's spark-submit: the cluster's Spark home's
        "SPARK_SUBMIT_OPTS": standalone_cluster.java_options,  # the driver's JVM: spark-submit's own
    }
    done = subprocess.run(
        [str(WRAPPER)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-5000:]

    # The job ran on the cluster: the worker started an executor for it, in the worker's own directory.
    apps = [d for d in standalone_cluster.worker_dir.iterdir() if d.name.startswith("app-")]
    assert apps, "no application ran on the worker"
    assert any((d / "0" / "stderr").exists() for d in apps)

    cluster = _comparable(runs / "latest")
    local = _comparable(local_out)
    assert cluster["summary"]["inventory"]["malformed_rows"]["total"] > 0
    assert (
        cluster["summary"]["inventory"]["rows"]
        == len(world.objects) + cluster["summary"]["inventory"]["malformed_rows"]["total"]
    )
    assert cluster == local
