"""The SparkSession of the scan: local mode by default, and whatever ``spark-submit`` chose when it launched us.

Local mode is tuned for a small machine (the settings measured to matter): ``local[2]``, the driver's memory set
before the JVM starts, few shuffle partitions, UI and console progress off, UTC session time zone, the running
interpreter as ``PYSPARK_PYTHON``, loopback as ``SPARK_LOCAL_IP``, and Spark's own logging at ERROR once the
session is up (the JVM's three start-up lines remain).

A small job (``quick_jit``: :func:`small_inventory` for a scan, always for the tests' session) starts its JVM with
the first JIT tier only (``-XX:TieredStopAtLevel=1``). A scan of a few thousand rows is over before the optimising
compiler's work pays off, and that work is most of its CPU: on a 2-core machine the tests' scans took 22 CPU
seconds instead of 37, and finished sooner. A large inventory keeps the JVM's default tiers, whose optimised code
the long read needs.

A JVM started here collects its garbage with the parallel collector (``-XX:+UseParallelGC``, unless
``extra_java_options`` chooses a collector), made for throughput, instead of the default G1, made for short pauses,
whose concurrent threads share the two cores with the tasks. make bench's 1M-row scan took 23.5 s with it against
25.4 s with G1 (41-44 CPU seconds against 46-48), and the 10M-row scan 99.4 s against 107.4 s.

PySpark's DataFrame debugging is off (``spark.python.sql.dataFrameDebugging.enabled=false``, a static setting, so
set before the session exists). When on, every PySpark function call (``F.col``, ``F.when``: a scan builds about 400)
first asks the JVM for the active session and a setting and then records its Python call site there, about a dozen
gateway round trips each, so an error can name the line of Python that built the failing expression. The scan's
plans are built by this package alone, and the cost was most of a small scan's driver time: a warm scan of 50 rows
made 8,600 gateway calls with it and 3,000 without, and took about a third less time. ``deploy/spark``'s wrapper
passes the same setting to spark-submit (a ``SCAN_SPARK_CONF`` entry after it wins).

A JVM started here with ``class_archive`` (:mod:`remote_storage.scan.class_archive`) starts from the archive's Spark
home (``SPARK_HOME`` for the launch only) and maps the classes it would load from the archive, and starts in about
half the time. It is used only where the JVM would otherwise run the installed PySpark's own jars: not when
``SPARK_HOME`` names another Spark. If that JVM dies before the session exists (a damaged archive can make the JVM
crash as it maps it), the session is started once more without the archive, with a warning naming it.

Invariant: under ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` is set: the JVM exists already) nothing that
spark-submit decided is overridden, so the same job runs unchanged on a cluster; only the scan's SQL settings
(time zone, shuffle partitions) are applied.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from remote_storage.scan.class_archive import Archive, java_options

DEFAULT_MASTER = "local[2]"
DEFAULT_DRIVER_MEMORY = "4g"
DEFAULT_SHUFFLE_PARTITIONS = 4
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"
GC_OPTION = "-XX:+UseParallelGC"
_CHOOSES_GC = re.compile(r"-XX:\+Use\w*GC\b")
DATAFRAME_DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"
log = structlog.get_logger(__name__)

JVM_DIED = "JAVA_GATEWAY_EXITED"  # pyspark's error class for a JVM that ended before it gave its port

SMALL_INVENTORY_BYTES = 8 * 1024 * 1024
"""Up to this many bytes of inventory data files (as the manifest lists them) a scan is a small job: about 290,000
rows of the bench's Parquet inventory (29 bytes a row). At 1,000,000 rows the first tier alone was 11% slower than
the default tiers (make bench's scan section, 31.1 s against 27.8 s), so the bound stays well below that."""


def small_inventory(data_file_bytes: int) -> bool:
    """Whether an inventory whose data files hold this many bytes is a small job (see the module docstring)."""
    return data_file_bytes <= SMALL_INVENTORY_BYTES


def launched_by_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    *,
    master: str | None = None,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    app_name: str = "tieredctl-scan",
    quick_jit: bool = False,
    class_archive: Archive | None = None,
    extra_java_options: str = "",
) -> Any:
    """A SparkSession for the scan (``master`` None: spark-submit's choice, else ``local[2]``). ``quick_jit``,
    ``class_archive`` and ``extra_java_options`` apply only to a JVM started here (not under spark-submit, nor when a
    session is already running)."""
    from pyspark.errors import PySparkRuntimeError

    options = [QUICK_JIT_OPTION] if quick_jit else []
    options += [] if _CHOOSES_GC.search(extra_java_options) else [GC_OPTION]
    options += [extra_java_options] if extra_java_options else []
    if class_archive is None or launched_by_spark_submit() or os.environ.get("SPARK_HOME"):
        return _session(master, driver_memory, shuffle_partitions, app_name, " ".join(options))
    with_archive = " ".join([*options, java_options(class_archive.path)])
    try:
        with _spark_home(class_archive.spark_home):
            return _session(master, driver_memory, shuffle_partitions, app_name, with_archive)
    except PySparkRuntimeError as exc:
        if exc.getCondition() != JVM_DIED:  # another failure: the archive is not its cause, nor a retry its cure
            raise
        log.warning("scan.class_archive_refused", archive=str(class_archive.path), error=str(exc)[:300])
        return _session(master, driver_memory, shuffle_partitions, app_name, " ".join(options))


@contextmanager
def _spark_home(home: Path) -> Iterator[None]:
    """``SPARK_HOME`` set to ``home`` while the JVM is launched (it keeps it, and so do the Python workers it starts),
    and unset again after, so nothing else in this process sees it."""
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        os.environ.pop("SPARK_HOME", None)


def _session(master: str | None, driver_memory: str, shuffle_partitions: int, app_name: str, java: str) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        master = master or DEFAULT_MASTER
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        builder = (
            builder.master(master)
            .config("spark.driver.memory", driver_memory)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config(DATAFRAME_DEBUGGING, "false")
        )
        # Always set, empty too: SparkSession.builder is one object per process, and keeps what an earlier call set.
        builder = builder.config("spark.driver.extraJavaOptions", java)
    elif master:
        builder = builder.master(master)
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
