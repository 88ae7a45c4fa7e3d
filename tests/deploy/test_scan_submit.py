"""The scheduled scan as deployed: the cron line, the Kubernetes CronJob, and the spark-submit wrapper run end to end
on a bucket in moto (exit status passed through, a dated output directory, ``latest`` pointing at it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.ids import Uuid
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.export import export_metadata
from remote_storage.inventory import build_inventory
from remote_storage.keys import SegmentKey, segment_keys
from remote_storage.scan import contract as c
from remote_storage.scan.session import QUICK_JIT_OPTION
from tests.support import REPO_ROOT

pytestmark = pytest.mark.spark

ROOT = REPO_ROOT
DEPLOY = ROOT / "deploy"
WRAPPER = DEPLOY / "spark" / "tieredctl-scan-submit"
CRON = DEPLOY / "cron" / "tieredctl-scan.cron"
CRONJOB = DEPLOY / "kubernetes" / "scan-cronjob.yaml"
SCAN_ENV = DEPLOY / "config" / "scan.env"
DAY_MS = 24 * 3600 * 1000
SUBPROCESS_TIMEOUT_S = 300
# The driver's JVM under the wrapper's spark-submit: a small job's (remote_storage/scan/session.py). Not the class
# archive: that fits only the JVM of its own Spark home, and this test's spark-submit is the one pyspark installed
# beside the interpreter, which is what the wrapper must find here (test_standalone_cluster.py runs the wrapper with
# the archive, from its Spark home through SPARK_HOME).
DRIVER_JAVA_OPTIONS = QUICK_JIT_OPTION

# One cron schedule field: *, N, N-M, lists of those, each with an optional /step.
_CRON_ITEM = r"(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?"
_CRON_FIELD = re.compile(rf"{_CRON_ITEM}(,{_CRON_ITEM})*")
_CRON_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _scan_env_keys() -> set[str]:
    """Every key scan.env documents, set or commented out."""
    return set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", SCAN_ENV.read_text(), re.M))


# -- the schedules -----------------------------------------------------------------------------------------------


def test_the_cron_line_is_a_valid_daily_entry_that_runs_the_wrapper_under_a_lock() -> None:
    lines = [ln for ln in CRON.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    jobs = [ln for ln in lines if not re.match(r"^[A-Z_]+=", ln)]  # the rest are cron's environment settings
    assert len(jobs) == 1
    fields = jobs[0].split(maxsplit=6)
    assert len(fields) == 7, "5 schedule fields, the user (an /etc/cron.d file), the command"
    *schedule, user, command = fields
    for field, (low, high) in zip(schedule, _CRON_RANGES, strict=True):
        assert _CRON_FIELD.fullmatch(field), field
        assert all(low <= int(n) <= high for n in re.findall(r"[0-9]+", field.split("/")[0])), field
    assert schedule[2:] == ["*", "*", "*"]  # daily
    assert re.fullmatch(r"[a-z_][a-z0-9_-]*", user)
    assert command.startswith("flock -n ")
    assert re.search(r"\s/\S*/deploy/spark/tieredctl-scan-submit\s", command)  # the wrapper, by absolute path
    assert WRAPPER.is_file()
    assert ">>" in command and "2>&1" in command  # logged to a file
    assert "%" not in command  # cron would turn it into a newline
    assert "TIEREDCTL_SCAN_ENV=" in CRON.read_text()


def test_the_cronjob_never_overlaps_and_is_configured_like_scan_env() -> None:
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(CRONJOB.read_text())}
    assert set(docs) == {"ConfigMap", "CronJob"}
    cronjob, config = docs["CronJob"], docs["ConfigMap"]
    assert cronjob["apiVersion"] == "batch/v1"
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert len(spec["schedule"].split()) == 5
    assert isinstance(spec["startingDeadlineSeconds"], int) and spec["startingDeadlineSeconds"] > 0
    job = spec["jobTemplate"]["spec"]
    assert isinstance(job["backoffLimit"], int)
    rule = job["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "FailJob" and 3 in rule["onExitCodes"]["values"]
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"][0].endswith("/deploy/spark/tieredctl-scan-submit")
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
    assert {"name": "TIEREDCTL_SCAN_ENV", "value": "/dev/null"} in container["env"]
    # The same settings as scan.env, every value a string (a ConfigMap holds strings only).
    assert set(config["data"]) <= _scan_env_keys()
    assert all(isinstance(v, str) for v in config["data"].values())
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert config["data"]["SCAN_OUTPUT_BASE"] in mounts
    volumes = {v["name"] for v in pod["volumes"]}
    assert {m["name"] for m in container["volumeMounts"]} <= volumes


def test_every_scan_env_setting_is_one_the_wrapper_reads() -> None:
    wrapper = WRAPPER.read_text()
    for key in _scan_env_keys() - {"SPARK_HOME", "JAVA_HOME"}:
        assert key in wrapper, key
    assert os.access(WRAPPER, os.X_OK)


# -- the wrapper's own checks (no Spark needed) ------------------------------------------------------------------


def _bare_path(tmp_path: Path, *tools: str) -> str:
    """A PATH with only bash, dirname and ``tools``: what is missing from it is really missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", *tools):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _run_wrapper(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WRAPPER), *args], env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False
    )


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCAN_") and k not in ("SPARK_HOME", "JAVA_HOME")}
    return {**env, **extra}


# The wrapper's clock, injected: a `date` first on its PATH that is the real date(1) at the second the test sets in
# FAKE_EPOCH_S, so each run's directory name is known and two runs are two seconds apart without waiting for one.
_FAKE_DATE = """#!/bin/sh
exec {real} -d "@$FAKE_EPOCH_S" "$@"
"""
RUN_AT_S = 1_767_225_600  # 2026-01-01T00:00:00Z


def _clock_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the fake ``date`` first on PATH; each call of the wrapper then sets FAKE_EPOCH_S."""
    real = shutil.which("date")
    assert real is not None
    clock_dir = tmp_path / "clock"
    clock_dir.mkdir()
    fake = clock_dir / "date"
    fake.write_text(_FAKE_DATE.format(real=real))
    fake.chmod(0o755)
    return {**env, "PATH": f"{clock_dir}{os.pathsep}{env.get('PATH', '')}"}


def _at(epoch_s: int) -> dict[str, str]:
    return {"FAKE_EPOCH_S": str(epoch_s)}


def test_the_wrapper_exits_2_without_java(tmp_path: Path) -> None:
    bare_path = _bare_path(tmp_path)
    scan_settings = {"SCAN_INVENTORY": "x", "SCAN_EXPORT_DIR": "x", "SCAN_OUTPUT_BASE": str(tmp_path / "out")}
    env = _clean_env(PATH=bare_path, TIEREDCTL_SCAN_ENV="/dev/null", SCAN_PYTHON=sys.executable, **scan_settings)
    result = _run_wrapper(env)
    assert result.returncode == 2 and "java not found" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_the_wrapper_exits_2_without_spark_submit(tmp_path: Path) -> None:
    python_dir = tmp_path / "python"
    python_dir.mkdir()
    (python_dir / "python").symlink_to(sys.executable)  # no spark-submit beside this one
    bare_path = _bare_path(tmp_path, "java")
    python = str(python_dir / "python")
    scan_settings = {"SCAN_INVENTORY": "x", "SCAN_EXPORT_DIR": "x", "SCAN_OUTPUT_BASE": str(tmp_path / "out")}
    env = _clean_env(PATH=bare_path, TIEREDCTL_SCAN_ENV="/dev/null", SCAN_PYTHON=python, **scan_settings)
    result = _run_wrapper(env)
    assert result.returncode == 2 and "spark-submit not found" in result.stderr, result.stderr


def test_the_wrapper_exits_2_on_a_missing_setting_or_settings_file(tmp_path: Path) -> None:
    result = _run_wrapper(_clean_env(TIEREDCTL_SCAN_ENV="/dev/null", SCAN_OUTPUT_BASE=str(tmp_path)))
    assert result.returncode == 2 and "SCAN_INVENTORY is not set" in result.stderr, result.stderr
    sources = {"SCAN_EXPORT_DIR": "x", "SCAN_METADATA_STORE": "y"}
    both = _clean_env(TIEREDCTL_SCAN_ENV="/dev/null", SCAN_INVENTORY="x", SCAN_OUTPUT_BASE=str(tmp_path), **sources)
    result = _run_wrapper(both)
    assert result.returncode == 2 and "set one of SCAN_EXPORT_DIR" in result.stderr, result.stderr
    result = _run_wrapper(_clean_env(TIEREDCTL_SCAN_ENV=str(tmp_path / "missing.env")))
    assert result.returncode == 2 and "missing.env" in result.stderr, result.stderr


_FAKE_SPARK_SUBMIT = """#!/usr/bin/env bash
# Records how it was called, keeps the --py-files zip, and plays a scan: summary.json unless FAKE_STATUS is 1.
printf '%s\\n' "$@" > "$FAKE_DIR/args"
prev=""
for arg in "$@"; do
    if [[ $prev == --py-files ]]; then cp "$arg" "$FAKE_DIR/py-files.zip"; fi
    if [[ $prev == --out ]]; then out="$arg"; fi
    prev="$arg"
done
if [[ $FAKE_STATUS != 1 ]]; then echo '{}' > "$out/summary.json"; fi
exit "$FAKE_STATUS"
"""


def test_the_wrapper_passes_settings_and_status_through_keeps_latest_and_prunes_old_runs(tmp_path: Path) -> None:
    """spark-submit replaced by a script ($SPARK_HOME/bin wins): the wrapper's own mechanics, without Spark."""
    spark_home = tmp_path / "spark"
    (spark_home / "bin").mkdir(parents=True)
    fake = spark_home / "bin" / "spark-submit"
    fake.write_text(_FAKE_SPARK_SUBMIT)
    fake.chmod(0o755)
    base = tmp_path / "scans"
    base.mkdir()
    for old in ("20200101T000000Z", "20200102T000000Z", "20200103T000000Z"):
        (base / old).mkdir()
    (base / "keep-me").mkdir()  # not a run directory: never pruned
    env_file = tmp_path / "scan.env"
    scan_env = (
        f"SCAN_INVENTORY=/inv/manifest.json\nSCAN_EXPORT_DIR=/export\nSCAN_OUTPUT_BASE={base}\n"
        "SCAN_DRIVER_MEMORY=2g\nSCAN_GRACE=24h\nSCAN_KEEP_RUNS=2\n"
    )
    env_file.write_text(scan_env)
    fake_spark = {"SPARK_HOME": str(spark_home), "FAKE_DIR": str(tmp_path)}
    env = _clock_env(tmp_path, _clean_env(TIEREDCTL_SCAN_ENV=str(env_file), **fake_spark, SCAN_PYTHON=sys.executable))

    result = _run_wrapper({**env, **_at(RUN_AT_S), "FAKE_STATUS": "3"}, "--max-anomalies", "7")
    assert result.returncode == 3, result.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--master") + 1] == "local[2]"
    assert args[args.index("--driver-memory") + 1] == "2g"
    app = args.index(str(DEPLOY / "spark" / "scan_main.py"))
    assert args.index("--driver-memory") < app and args.index("--py-files") < app  # spark-submit's, not the job's
    job_args = args[app + 1 :]
    assert job_args[job_args.index("--inventory") + 1] == "/inv/manifest.json"
    assert job_args[job_args.index("--export") + 1] == "/export"
    assert job_args[job_args.index("--grace") + 1] == "24h"
    assert job_args[-2:] == ["--max-anomalies", "7"]  # extra arguments come last
    run = Path(job_args[job_args.index("--out") + 1])
    assert run.parent == base and run.name == "20260101T000000Z"  # the UTC second it started, as a run directory
    assert os.readlink(base / "latest") == run.name
    with zipfile.ZipFile(tmp_path / "py-files.zip") as zipped:
        names = zipped.namelist()
    templates = "remote_storage/scan/templates/report.html.j2"  # package data travels too
    for module in ("orchestrator/cli/__init__.py", "remote_storage/scan/contract.py", "policies/orphans.py", templates):
        assert module in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Two runs kept (the new one and the newest old one), other directories untouched.
    assert sorted(p.name for p in base.iterdir()) == ["20200103T000000Z", run.name, "keep-me", "latest"]

    # A failed scan (no summary), a second later: status 1 passed through, `latest` stays on the last complete run.
    result = _run_wrapper({**env, **_at(RUN_AT_S + 1), "FAKE_STATUS": "1"})
    assert result.returncode == 1 and "FAILED" in result.stderr, result.stderr
    assert os.readlink(base / "latest") == run.name
    assert run.is_dir()  # the run `latest` names is never pruned

    # The environment wins over the file; a complete run two seconds later: status 0, `latest` moves to it.
    override = {"SCAN_DRIVER_MEMORY": "3g", "SCAN_MAX_ANOMALIES": "5", "FAKE_STATUS": "0"}
    result = _run_wrapper({**env, **_at(RUN_AT_S + 2), **override})
    assert result.returncode == 0 and "exit status 0" in result.stderr, result.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--driver-memory") + 1] == "3g"
    job_args = args[args.index(str(DEPLOY / "spark" / "scan_main.py")) + 1 :]
    assert job_args[job_args.index("--max-anomalies") + 1] == "5"
    assert os.readlink(base / "latest") == "20260101T000002Z"


# -- end to end --------------------------------------------------------------------------------------------------


@pytest.fixture
def scan_inputs(s3_client: Any, bucket: str, tmp_path: Path) -> dict[str, Any]:
    """A bucket with one segment of a topic id the metadata never had, a key that does not parse and an object
    outside the prefix; its inventory (made ten days later, so the orphans are past the grace period) and the
    export of an empty metadata store."""
    segment = SegmentKey("ghost", Uuid.random(), 0, 0, Uuid.random())
    objects = {key: b"x" * (100 * (n + 1)) for n, key in enumerate(segment_keys("tiered/", segment).values())}
    objects["tiered/not-a-segment.txt"] = b"hello"
    objects["elsewhere/readme.txt"] = b"not tiered storage's"
    for key, body in objects.items():
        s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    manifest = build_inventory(
        s3_client, bucket=bucket, dest=str(tmp_path / "inventory"), now_ms=int(time.time() * 1000) + 10 * DAY_MS
    )
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    try:
        export_metadata(store, tmp_path / "export")
    finally:
        store.close()
    return {"manifest": manifest, "export": tmp_path / "export", "orphan_bytes": 100 + 200 + 300}


@pytest.mark.timeout(SUBPROCESS_TIMEOUT_S + 60)
def test_the_wrapper_runs_the_scan_into_a_dated_directory_and_passes_its_exit_status(
    scan_inputs: dict[str, Any], tmp_path: Path
) -> None:
    out_base = tmp_path / "scans"
    env_file = tmp_path / "scan.env"
    settings = [
        "SCAN_MASTER='local[1]'",
        "SCAN_DRIVER_MEMORY=1g",
        f"SCAN_INVENTORY={scan_inputs['manifest']}",
        f"SCAN_EXPORT_DIR={scan_inputs['export']}",
        f"SCAN_OUTPUT_BASE={out_base}",
        "SCAN_PREFIX=tiered/",
        "SCAN_GRACE=72h",
        "SCAN_MAX_ANOMALIES=0",
        f"SCAN_PYTHON={sys.executable}",
    ]
    env_file.write_text("\n".join(settings) + "\n")
    # spark-submit is the one pyspark installed beside this interpreter; the wrapper finds it there.
    # A small job's JVM (remote_storage/scan/session.py): spark-submit's own, which the wrapper leaves to it.
    env = _clock_env(tmp_path, _clean_env(TIEREDCTL_SCAN_ENV=str(env_file), SPARK_SUBMIT_OPTS=DRIVER_JAVA_OPTIONS))

    # The unparseable key is one anomaly, over the threshold of 0: exit status 3, passed through.
    first = _run_wrapper({**env, **_at(RUN_AT_S)})
    assert first.returncode == c.EXIT_ANOMALIES, (first.stdout + first.stderr)[-4000:]
    (run,) = [p for p in out_base.iterdir() if p.name != "latest"]
    assert run.name == "20260101T000000Z"
    assert (run / c.SUMMARY_FILE).is_file() and (run / c.REPORT_FILE).is_file()
    assert os.readlink(out_base / "latest") == run.name  # relative: the base can be moved or mounted elsewhere
    summary = json.loads((run / c.SUMMARY_FILE).read_text())
    assert summary["totals"]["objects"] == 5 and summary["totals"]["outside_prefix_objects"] == 1
    assert summary["totals"]["reclaimable_bytes"][c.UNKNOWN_TOPIC] == scan_inputs["orphan_bytes"]
    assert summary["totals"]["anomalies"][c.UNPARSEABLE_KEY] == 1 and summary["alert"]["exceeded"]
    assert "ghost" in (run / c.REPORT_FILE).read_text()

    # The environment over the file, exit status 0 and `latest` moving on are the wrapper's own mechanics: the test
    # above checks them with spark-submit played by a script (a second real scan would add a minute, not a check).
