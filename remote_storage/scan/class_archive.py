"""The scan JVM's class-data archive: a JDK dynamic CDS archive of the classes a Spark job loads, so that a local
scan's JVM maps them from one file instead of finding, reading and verifying them jar by jar.

A small scan's JVM spends most of its start there: on a 2-core machine a local session and its first action took
about 8.4 CPU-s without the archive and 4.3 with it (7 s and 3.4 s of wall clock), and ``tieredctl scan run`` on a
small inventory finishes about 10 s sooner. The archive is built once per machine and Spark version
(:func:`build`, ``python -m remote_storage.scan.class_archive build``; ``make setup`` builds it) and then used by
every scan whose JVM starts in this process (:func:`installed`), never by one launched by ``spark-submit``.

Where it lives: ``$TIEREDCTL_SCAN_CLASS_ARCHIVE`` when set (empty: no archive), else
``$XDG_CACHE_HOME/tieredctl`` (``~/.cache/tieredctl``) ``/scan-classes-spark-<version>-<jars>.jsa``, about 185 MB,
where ``<jars>`` digests the names and sizes of the installed PySpark's jars. Beside it, ``<same name>.spark-home/``
is the Spark home it was made with: a mirror of the installed PySpark package (hard links where it can, else copies),
whose jars keep one path and one modification time on this machine.

Why the mirror: the JVM maps an archive only if every jar of its class path has the path, size and modification time
it had when the archive was made. A virtualenv's jars have the virtualenv's path and the time pip wrote them, so an
archive made from them served that one virtualenv: a fresh clone's (a CI run's, a newcomer's second checkout) fell
back to loading every class, with only a warning on stderr. The mirror is made once per machine and PySpark build, and
every virtualenv with the same jars starts its scan JVM from it (``SPARK_HOME``), with the same archive.

Invariants:
* An archive is installed only whole and proven: one JVM writes it to a temporary file at its exit, which this
  module waits for; a second JVM must start with it and ``-Xshare:on`` (which refuses any archive it cannot map, or
  one made for another JDK or class path) and run a query; only then is it renamed into place, atomically. Builders
  running at once each write their own temporary file, and the last rename wins with an archive as good.
* An archive is used only with its Spark home, and only while that home's jars are the installed PySpark's (names and
  sizes, :func:`jars_identity`); a mirror is renamed into place only whole.
* A JVM given an archive it cannot use starts without it (``-Xshare:auto``), and :func:`java_options` sends the
  JVM's own warnings to stderr, so stdout stays the command's result; a JVM that dies on a damaged archive is
  started again without it by :func:`remote_storage.scan.session.build_session`, with a warning.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
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


def installed_spark_home() -> Path:
    """The installed PySpark package: the Spark home its own launcher uses when ``SPARK_HOME`` is unset."""
    import pyspark

    return Path(pyspark.__file__).parent


def jars_identity(spark_home: Path) -> tuple[tuple[str, int], ...]:
    """The jars of a Spark home, by name and size: what tells one PySpark build's jars from another's."""
    jars = spark_home / "jars"
    if not jars.is_dir():
        return ()
    return tuple(sorted((p.name, p.stat().st_size) for p in jars.iterdir() if p.name.endswith(".jar")))


def _jars_digest(identity: tuple[tuple[str, int], ...]) -> str:
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:12]


def default_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """Where the archive is looked for and built (None: switched off by an empty ``$TIEREDCTL_SCAN_CLASS_ARCHIVE``)."""
    env = os.environ if environ is None else environ
    if ARCHIVE_ENV in env:
        return Path(env[ARCHIVE_ENV]).expanduser() if env[ARCHIVE_ENV] else None
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    digest = _jars_digest(jars_identity(installed_spark_home()))
    return cache / "tieredctl" / f"scan-classes-spark-{spark_version()}-{digest}.jsa"


def spark_home_of(archive: Path) -> Path:
    """The Spark home an archive is made with and used with: beside it, ``<name>.spark-home``."""
    return archive.with_name(archive.name.removesuffix(".jsa") + ".spark-home")


@dataclass(frozen=True, slots=True)
class Archive:
    path: Path  # the archive
    spark_home: Path  # the Spark home (SPARK_HOME) a JVM must start from to use it


def installed(environ: os._Environ[str] | dict[str, str] | None = None) -> Archive | None:
    """The archive a scan's JVM should use: the configured one if it and its Spark home exist and that home's jars
    are the installed PySpark's; else None."""
    path = default_path(environ)
    if path is None or not path.is_file():
        return None
    home = spark_home_of(path)
    if not home.is_dir() or jars_identity(home) != jars_identity(installed_spark_home()):
        return None
    # Resolved: the JVM checks its class path's jars by the paths they had when the archive was made, which are
    # the mirror's own (a link to the mirror, as a set-up newcomer's HOME has, would be another path).
    return Archive(path.resolve(), home.resolve())


def java_options(archive: Path) -> str:
    """The JVM options that use ``archive`` when it fits, and start as usual when it does not."""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto {JVM_LOG_TO_STDERR}"


def make_spark_home(target: Path, source: Path | None = None) -> Path:
    """Mirror the PySpark package ``source`` (default: the installed one) at ``target``, unless a mirror with the
    same jars is there: hard links where the file system allows, else copies that keep each file's modification
    time. Made in a temporary directory beside ``target`` and renamed into place whole; a stale mirror (other jars)
    is replaced. Returns ``target``."""
    source = source or installed_spark_home()
    want = jars_identity(source)
    if not want:
        raise ClassArchiveError(f"no Spark jars under {source / 'jars'}: is PySpark installed?")
    if target.is_dir() and jars_identity(target) == want:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent))
    try:
        mirror = tmp / "home"
        shutil.copytree(source, mirror, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("__pycache__"))
        if target.exists():  # stale: other jars (a mirror of these would have been returned above)
            shutil.rmtree(target)
        try:
            os.rename(mirror, target)
        except OSError:
            if not (target.is_dir() and jars_identity(target) == want):  # not another builder's mirror of these
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy with the same modification time
        shutil.copy2(src, dst)


@dataclass(frozen=True, slots=True)
class Built:
    path: Path
    bytes: int
    seconds: float


def build(path: Path, *, timeout_s: float = BUILD_TIMEOUT_S, python: str = sys.executable) -> Built:
    """Build the archive at ``path`` (see the module's invariants); :class:`ClassArchiveError` if it cannot be."""
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    home = make_spark_home(spark_home_of(path))
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the JVM creates it at its exit
    try:
        _child(python, "train", tmp, home, timeout_s)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise ClassArchiveError(f"the training JVM wrote no archive at {tmp}")
        _child(python, "prove", tmp, home, timeout_s)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return Built(path, path.stat().st_size, time.monotonic() - started)


def _child(python: str, step: str, archive: Path, spark_home: Path, timeout_s: float) -> None:
    command = [python, "-m", "remote_storage.scan.class_archive", f"_{step}", str(archive)]
    env = {**os.environ, "SPARK_HOME": str(spark_home)}  # the JVM's jars: the mirror's, as every later scan's
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
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
    if args.path is None and ARCHIVE_ENV not in os.environ and path.parent.is_dir():
        for old in remove_unusable(path.parent):
            print(f"removed {old}: an archive without its Spark home, which no JVM here can use")
    ready = installed({ARCHIVE_ENV: str(path)})
    if ready is not None and not args.force:
        print(f"class archive {path} is there ({path.stat().st_size:,} bytes), with its Spark home {ready.spark_home}")
        return 0
    try:
        built = build(path)
    except ClassArchiveError as exc:
        print(f"error: class archive not built: {exc}", file=sys.stderr)
        return 1
    print(f"class archive {built.path} built ({built.bytes:,} bytes, {built.seconds:.1f} s)")
    return 0


def remove_unusable(cache: Path) -> list[Path]:
    """Delete the archives in ``cache`` that have no Spark home beside them (those an earlier version made from a
    virtualenv's jars: the JVM refuses them in any other virtualenv, and they are about 185 MB each)."""
    removed = []
    for archive in sorted(cache.glob("scan-classes-spark-*.jsa")):
        if not spark_home_of(archive).is_dir():
            archive.unlink(missing_ok=True)
            removed.append(archive)
    return removed


if __name__ == "__main__":
    sys.exit(main())
