"""The scan's SparkSession (remote_storage.scan.session): a small job's JVM runs the first JIT tier only, a large one
keeps the JVM's default tiers, and a scan picks by the size of the inventory's data files; PySpark's DataFrame
debugging (a JVM round trip per function call) is off, here and under deploy/spark's spark-submit wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remote_storage.scan import run as scan_run
from remote_storage.scan import session
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.session import (
    DATAFRAME_DEBUGGING,
    GC_OPTION,
    QUICK_JIT_OPTION,
    SMALL_INVENTORY_BYTES,
    small_inventory,
)
from tests.support import aws_inventory
from tests.support.scan_world import PREFIX, World


@pytest.mark.unit
def test_an_inventory_is_a_small_job_up_to_the_bound_and_a_large_one_past_it() -> None:
    assert small_inventory(0)
    assert small_inventory(SMALL_INVENTORY_BYTES)
    assert not small_inventory(SMALL_INVENTORY_BYTES + 1)


@pytest.mark.spark
def test_the_session_built_for_a_small_job_runs_its_jvm_with_the_first_jit_tier_only(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert QUICK_JIT_OPTION in arguments


@pytest.mark.spark
def test_the_session_jvm_collects_garbage_with_the_parallel_collector(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert GC_OPTION in arguments
    collectors = [b.getName() for b in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()]
    assert sorted(collectors) == ["PS MarkSweep", "PS Scavenge"]  # the parallel collector's, not G1's


@pytest.mark.unit
@pytest.mark.parametrize(
    ("extra", "java"),
    [
        ("", "-XX:+UseParallelGC"),
        ("-Xss4m", "-XX:+UseParallelGC -Xss4m"),
        ("-XX:+UseG1GC -Xss4m", "-XX:+UseG1GC -Xss4m"),  # a collector chosen by the caller is the one used
        ("-XX:+UseZGC", "-XX:+UseZGC"),
    ],
)
def test_the_parallel_collector_is_chosen_unless_the_extra_options_choose_one(
    monkeypatch: pytest.MonkeyPatch, extra: str, java: str
) -> None:
    started: list[str] = []

    def fake_session(master: Any, memory: str, partitions: int, name: str, options: str) -> str:
        started.append(options)
        return "session"

    monkeypatch.setattr(session, "_session", fake_session)
    assert session.build_session(extra_java_options=extra) == "session"
    assert started == [java]


@pytest.mark.spark
def test_the_session_records_no_python_call_site_per_dataframe_function(spark: Any) -> None:
    from pyspark.errors import utils

    assert spark.conf.get(DATAFRAME_DEBUGGING) == "false"
    assert utils.is_debugging_enabled() is False  # what PySpark's per-call wrapper reads


@pytest.mark.unit
def test_the_spark_submit_wrapper_turns_dataframe_debugging_off_before_the_operators_settings() -> None:
    wrapper = (Path(__file__).parents[3] / "deploy" / "spark" / "tieredctl-scan-submit").read_text()
    ours = wrapper.index(f"--conf {DATAFRAME_DEBUGGING}=false")
    assert ours < wrapper.index('for kv in "${extra_conf[@]}"')  # an operator's SCAN_SPARK_CONF comes later and wins


@pytest.mark.spark
@pytest.mark.parametrize(("bound", "quick"), [(SMALL_INVENTORY_BYTES, True), (0, False)])
def test_a_scan_that_starts_spark_asks_for_the_quick_jit_only_for_a_small_inventory(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: int, quick: bool
) -> None:
    lines = [aws_inventory.csv_line("kafka-tiered", "tiered/x", 1, 1_600_000_000_000)]
    manifest = aws_inventory.write_aws_inventory(
        tmp_path / "inventory", {"a.csv.gz": aws_inventory.gz(lines)}, fmt="CSV", schema=aws_inventory.CSV_SCHEMA
    )
    asked: list[dict[str, Any]] = []

    def session_of_this_worker(**kwargs: Any) -> Any:  # never a second JVM: record what was asked, hand ours back
        asked.append(kwargs)
        return spark

    monkeypatch.setattr(session, "SMALL_INVENTORY_BYTES", bound)  # the inventory's one file is a few dozen bytes
    monkeypatch.setattr(scan_run, "build_session", session_of_this_worker)
    outcome = scan_run.scan(
        inventory_uri=str(manifest),
        export_dir=World([], [], [], []).write_export(tmp_path / "export"),
        out_dir=tmp_path / "out",
        settings=ScanSettings(prefix=PREFIX),
    )
    assert [a["quick_jit"] for a in asked] == [quick]
    assert outcome.summary["inventory"]["rows"] == 1
    assert not spark.sparkContext._jsc.sc().isStopped()  # a session that was running is not the scan's to stop
