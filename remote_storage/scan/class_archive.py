"""The scan JVM's class-data archive: a JDK dynamic CDS archive of the classes a Spark job loads, so that a local
scan's JVM maps them from one file instead of finding, reading and verifying them jar by jar.

A small scan's JVM spends most of its start there: on a 2-core machine a local session and its first action took
about 8.4 CPU-s without the archive and 4.3 with it (7 s and 3.4 s of wall clock), and ``tieredctl scan run`` on a
small inventory finishes about 10 s sooner. The archive is built once per machine and Spark version
(:func:`build`, ``python -m remote_storage.scan.class_archive build``; ``make setup`` builds it) and then used by
every scan whose JVM starts in this process (:func:`installed`), never by one launched by ``spark-submit``.

Where it lives: ``$TIEREDCTL_SCAN_CLASS_ARCHIVE`` when set (empty: no archive), else
``$XDG_CACHE_HOME/tieredctl`` (``~/.cache/tieredctl``) ``/scan-classes-spark-<version>.jsa``; about 150 MB.

Invariants:
* An archive is installed only whole and proven: one JVM writes it to a temporary file at its exit, which this
  module waits for; a second JVM must start with it and ``-Xshare:on`` (which refuses any archive it cannot map, or
  one made for another JDK or class path) and run a query; only then is it renamed into place, atomically. Builders
  running at once each write their own temporary file, and the last rename wins with an archive as good.
* A JVM given an archive it cannot use starts without it (``-Xshare:auto``), and :func:`java_options` sends the
  JVM's own warnings to stderr, so stdout stays the command's result; a JVM that dies on a damaged archive is
  started again without it by :func:`remote_storage.scan.session.build_session`, with a warning.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARCHIVE_ENV = "TIEREDCTL_SCAN_CLASS_ARCHIVE"
JVM_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
BUILD_TIMEOUT_S = 600.0


class ClassArchiveError(Exception):
    """The archive could not be built or proven; nothing was installed."""


def spark_version() -> str:
    from pyspark.version import __version__

    return str(__version__)


def default_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """Where the archive is looked for and built (None: switched off by an empty ``$TIEREDCTL_SCAN_CLASS_ARCHIVE``)."""
    env = os.environ if environ is None else environ
    if ARCHIVE_ENV in env:
        return Path(env[ARCHIVE_ENV]).expanduser() if env[ARCHIVE_ENV] else None
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "tieredctl" / f"scan-classes-spark-{spark_version()}.jsa"


def installed(environ: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """The archive a scan's JVM should use: the configured one if it exists, else None."""
    path = default_path(environ)
    return path if path is not None and path.is_file() else None


def java_options(archive: Path) -> str:
    """The JVM options that use ``archive`` when it fits, and start as usual when it does not."""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto {JVM_LOG_TO_STDERR}"


def installed_java_options(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """:func:`java_options` of the installed archive, or nothing: for a JVM that Spark starts from options given as
    one string (``SPARK_SUBMIT_OPTS``, ``SPARK_DAEMON_JAVA_OPTS``)."""
    archive = installed(environ)
    return "" if archive is None else java_options(archive)


@dataclass(frozen=True, slots=True)
class Built:
    path: Path
    bytes: int
    seconds: float


def build(path: Path, *, timeout_s: float = BUILD_TIMEOUT_S, python: str = sys.executable) -> Built:
    """Build the archive at ``path`` (see the module's invariants); :class:`ClassArchiveError` if it cannot be."""
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the JVM creates it at its exit
    try:
        _child(python, "train", tmp, timeout_s)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise ClassArchiveError(f"the training JVM wrote no archive at {tmp}")
        _child(python, "prove", tmp, timeout_s)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return Built(path, path.stat().st_size, time.monotonic() - started)


def _child(python: str, step: str, archive: Path, timeout_s: float) -> None:
    command = [python, "-m", "remote_storage.scan.class_archive", f"_{step}", str(archive)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ClassArchiveError(f"the {step} JVM did not end within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ClassArchiveError(f"the {step} JVM failed (exit status {done.returncode}): {tail}")


def _workload(spark: Any, scratch: Path) -> None:
    """What a scan does, small: CSV (gzip) and Parquet written and read, a broadcast join, grouping, collecting."""
    from pyspark.sql import functions as F

    rows = [(f"tiered/topic-{i % 7}/{i:020d}.log", i * 100, 1_700_000_000_000 + i, i % 3) for i in range(500)]
    df = spark.createDataFrame(rows, "key string, size long, last_modified_ms long, kind int")
    df.write.mode("overwrite").option("compression", "gzip").csv(str(scratch / "csv"))
    df.write.mode("overwrite").parquet(str(scratch / "parquet"))
    read = spark.read.schema(df.schema).csv(str(scratch / "csv"))
    facts = spark.read.parquet(str(scratch / "parquet")).select("key", F.col("kind").alias("k"))
    joined = read.join(F.broadcast(facts), "key", "left").withColumn("topic", F.split("key", "/").getItem(1))
    per = joined.groupBy("topic", "k").agg(F.count(F.lit(1)).alias("n"), F.sum("size"), F.min("last_modified_ms"))
    per.write.mode("overwrite").parquet(str(scratch / "out"))
    spark.read.parquet(str(scratch / "out")).orderBy("topic").collect()


def _run_child(step: str, archive: Path) -> int:
    from pyspark import SparkContext

    from remote_storage.scan.session import build_session

    quiet = "-Xlog:disable -Xlog:all=error:stderr"  # the dump's warnings list every class it leaves out
    if step == "train":
        options = f"-XX:ArchiveClassesAtExit={archive} {quiet}"
    else:
        options = f"-XX:SharedArchiveFile={archive} -Xshare:on {quiet}"
    spark = build_session(
        driver_memory="1g",
        shuffle_partitions=2,
        app_name=f"tieredctl-class-archive-{step}",
        quick_jit=True,  # as the scans that use the archive most (small ones) run
        extra_java_options=options,
    )
    with tempfile.TemporaryDirectory(prefix="tieredctl-class-archive-") as scratch:
        _workload(spark, Path(scratch))
    spark.stop()
    # The JVM writes the archive as it exits, which it does once its stdin (our pipe) closes: wait for that.
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        print("error: pyspark kept no handle on its JVM: cannot wait for the archive", file=sys.stderr)
        return 1
    gateway.shutdown()
    proc.stdin.close()
    status = proc.wait(timeout=BUILD_TIMEOUT_S)
    if status != 0:
        print(f"error: the JVM exited with status {status}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m remote_storage.scan.class_archive", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="build the archive (default: where scans look for it) unless it is there")
    b.add_argument("path", nargs="?", type=Path, default=None)
    b.add_argument("--force", action="store_true", help="build it again even if it is there")
    for hidden in ("_train", "_prove"):
        sub.add_parser(hidden).add_argument("archive", type=Path)
    args = parser.parse_args(argv)
    if args.step in ("_train", "_prove"):
        return _run_child(args.step[1:], args.archive)
    path = args.path or default_path()
    if path is None:
        print(f"no class archive: ${ARCHIVE_ENV} is empty", file=sys.stderr)
        return 0
    if path.is_file() and not args.force:
        print(f"class archive {path} is there ({path.stat().st_size:,} bytes)")
        return 0
    try:
        built = build(path)
    except ClassArchiveError as exc:
        print(f"error: class archive not built: {exc}", file=sys.stderr)
        return 1
    print(f"class archive {built.path} built ({built.bytes:,} bytes, {built.seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
