"""The Spark scan: every inventory row classified against the metadata export, with reclaimable bytes and anomalies.

DataFrame API only (no Python UDF on the hot path), so the same code runs in local mode and under ``spark-submit``
on a cluster. It implements :mod:`remote_storage.scan.contract` exactly as :mod:`policies.orphans` does in plain
Python (a hypothesis test checks that they agree on generated buckets):

1. **Rows.** The executors read the data files themselves (:mod:`.sources`: one task per file, local or ``s3://``,
   through boto3 and pyarrow, no JAR, nothing staged on the driver). CSV lines are parsed by Spark's CSV parser
   (``from_csv``) with every ``fileSchema`` column as a string plus the corrupt-record column; Parquet rows come
   with the scan's types. Local Parquet files that Spark's own reader reads the same way (string keys, integer or
   string sizes, millisecond or microsecond timestamps: :func:`sources.native_parquet`) are read by it instead, so
   no row crosses into Python; the ``scan.reader`` log line says which reader ran. A task's inventory error (a
   data file whose MD5 is not the manifest's) is raised on the driver as that error. Each row is valid or gets
   the inventory reader's malformed reason (:mod:`remote_storage.inventory`: wrong column count, undecodable key,
   missing key, bad size, bad last modified date): malformed rows are counted by reason with examples, never
   dropped silently. They are counted while the classification reads the rows (an observation of that pass), so a
   clean inventory is read once; only when one is malformed is it read again, for the examples.
2. **Keys** (:mod:`.locate`): parsed by the layout, or found among the locations segments record in their custom
   metadata (a key under another prefix, or an explicit key).
3. **Objects** (:mod:`.classify`): topics and the tiered-state history are small and broadcast; segments join on
   (topic id, segment id). An export that lists a topic id or a segment twice is refused (a join would count its
   objects twice): the driver reads the few topic rows itself, and the segments' ids too up to
   ``driver_facts_max_segments`` (pyarrow, no Spark job: a job of three stages cost several seconds of a 1M-row
   scan); a larger export is counted, checked and its recorded prefixes found by one small Spark job.
   ``objects.parquet`` is written once and read back by every later step.
4. **Segments** (:mod:`.segment_checks`): one grouping of the written objects per segment gives the object-set,
   chain and size anomalies; the manifests the size rule needs are read by the executors, counted and capped first.
5. **Outputs** (names in the contract): ``objects.parquet``, ``anomalies.parquet`` and, when manifests were read,
   ``manifests.parquet`` directories, and the aggregates that :mod:`remote_storage.scan.summary` turns into
   ``summary.json``.

An export written before the custom-metadata columns is read with them null
(:data:`remote_storage.export_format.ADDED_SEGMENT_COLUMNS`).

"Now" is the inventory's creation time (inventories lag the bucket), never the wall clock.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from orchestrator.errors import MissingCredentialsError, RemoteStorageError, TieredError
from remote_storage import export_format
from remote_storage import inventory as inv
from remote_storage.scan import contract as c
from remote_storage.scan import sources
from remote_storage.scan.classify import classify_objects, object_anomalies
from remote_storage.scan.errors import ScanError
from remote_storage.scan.locate import locate, parse_keys, recorded_locations
from remote_storage.scan.segment_checks import (
    ManifestReads,
    ManifestSource,
    linked_segments,
    read_manifests,
    segment_anomalies,
)
from remote_storage.scan.sources import InventorySource

__all__ = ["ManifestSource", "ScanAggregates", "ScanError", "ScanSettings", "native_files", "run_scan"]

log = structlog.get_logger(__name__)

_REPLACEMENT_CHAR = "\ufffd"

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ScanSettings:
    prefix: str = ""
    grace_ms: int = c.DEFAULT_GRACE_MS
    max_anomalies: int = 0
    max_examples: int = inv.DEFAULT_MAX_EXAMPLES
    # Up to this many RLMM segments are broadcast to the objects' join (about 120 bytes each in the driver).
    broadcast_segments_max: int = 4_000_000
    # Manifests the executors may read for the size rule (one GET each); more stops the scan; 0: never read.
    max_manifest_reads: int = c.DEFAULT_MAX_MANIFEST_READS
    # Up to this many segments the driver reads their ids itself to check the export before planning (about 60 MB
    # at the bound); more are checked by a Spark job.
    driver_facts_max_segments: int = 1_000_000


@dataclass(frozen=True, slots=True)
class ScanAggregates:
    """What the job collects to the driver; :mod:`.summary` builds summary.json from it."""

    rows: int
    # Objects and bytes per (topic_id, category, reclaimable), with the name the keys carry; topic_id is None for
    # objects outside the prefix or unparseable.
    objects: list[dict[str, Any]]
    anomalies_by_topic: list[dict[str, Any]]  # topic_id (None: unattributed), type, count
    malformed_by_reason: dict[str, int]
    malformed_examples: list[dict[str, Any]]
    topics: list[dict[str, Any]]  # the export's topic rows for every topic id seen
    seconds: dict[str, float]
    manifests: ManifestReads = field(default_factory=lambda: ManifestReads(read=False, cap=0))
    object_prefixes: tuple[str, ...] = ()  # prefixes segments record, other than the scanned one


def _F() -> Any:
    from pyspark.sql import functions

    return functions


# -- 1. rows ------------------------------------------------------------------------------------------------------


def _file_rows(spark: Any, src: InventorySource, schema: str) -> Any:
    """What the executors read from the data files: one partition per file, in manifest order."""
    refs = spark.sparkContext.parallelize([f.as_row() for f in src.files], numSlices=len(src.files))
    read = functools.partial(sources.read_data_files, file_format=src.file_format, access=src.access)
    return spark.createDataFrame(refs.mapPartitions(read), schema, verifySchema=False)


def _csv_rows(spark: Any, src: InventorySource) -> Any:
    F = _F()
    from pyspark.sql import types as T

    cols = src.csv_columns
    # Column pruning would parse only the columns a query uses, and a row with too few or too many fields would no
    # longer be flagged: every CSV parse of the scan parses whole rows (the parser's and from_csv's pruning off).
    spark.conf.set("spark.sql.csv.parser.columnPruning.enabled", "false")
    spark.conf.set("spark.sql.optimizer.enableCsvExpressionOptimization", "false")
    fields = [T.StructField(name, T.StringType()) for name in cols]
    corrupt = T.StructField("_corrupt", T.StringType())
    schema = T.StructType([*fields, corrupt])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt", "quote": '"', "escape": '"'}
    lines = _file_rows(spark, src, sources.CSV_LINES_SCHEMA)
    df = lines.select("file", F.from_csv("line", schema.simpleString(), options).alias("r")).select("file", "r.*")
    key_raw = F.col("Key")
    decoded = F.try_url_decode(key_raw)
    size_text = F.trim(F.col("Size"))
    lm_raw = F.col("LastModifiedDate") if "LastModifiedDate" in cols else F.lit(None).cast("string")
    lm_ts = F.try_to_timestamp(lm_raw)
    # URLDecoder replaces a malformed UTF-8 sequence with U+FFFD where the reader raises: same verdict for both.
    bad_utf8 = decoded.contains(_REPLACEMENT_CHAR) & ~F.upper(key_raw).contains("%EF%BF%BD")
    reason = (
        F.when(F.col("_corrupt").isNotNull(), F.lit(inv.WRONG_COLUMN_COUNT))
        .when(key_raw.isNotNull() & (decoded.isNull() | bad_utf8), F.lit(inv.BAD_KEY))
        .when(decoded.isNull() | (decoded == ""), F.lit(inv.MISSING_KEY))
        .when(~F.coalesce(size_text.rlike("^[0-9]{1,18}$"), F.lit(False)), F.lit(inv.BAD_SIZE))
        .when(lm_raw.isNotNull() & lm_ts.isNull(), F.lit(inv.BAD_LAST_MODIFIED))
    )
    raw = F.coalesce(F.col("_corrupt"), F.concat_ws(",", *[F.coalesce(F.col(n), F.lit("")) for n in cols]))
    return df.select(
        decoded.alias("key"),
        size_text.try_cast("bigint").alias("size"),
        F.coalesce(F.unix_millis(lm_ts), F.lit(-1).cast("bigint")).alias("last_modified_ms"),
        reason.alias("malformed"),
        raw.alias("raw"),
        F.col("file"),
    )


def native_files(src: InventorySource) -> tuple[sources.NativeParquet, ...] | None:
    """Every data file as Spark's own Parquet reader can read it, or None when one of them cannot (see
    :func:`sources.native_parquet`): then all go through pyarrow on the executors."""
    if src.file_format != "parquet":
        return None
    native = tuple(sources.native_parquet(f) for f in src.files)
    return None if any(n is None for n in native) else tuple(n for n in native if n is not None)


def _native_parquet_rows(spark: Any, native: tuple[sources.NativeParquet, ...]) -> Any:
    """:data:`sources.PARQUET_ROWS_SCHEMA` rows read by Spark itself (no row crosses into Python): one read per
    group of files with the same column types, the conversions of :func:`sources._parquet_rows` as expressions."""
    F = _F()
    groups: dict[tuple[str, ...], list[sources.NativeParquet]] = {}
    for f in native:
        groups.setdefault(f.signature, []).append(f)
    frames = []
    for files in groups.values():
        first = files[0]
        df = spark.read.parquet(*[f.path for f in files])
        if first.last_modified == "timestamp":  # with or without a time zone: the instant, floored to ms
            lm = F.unix_millis(F.col("last_modified_date").cast("timestamp"))
        elif first.last_modified == "integer":
            lm = F.col("last_modified_date").cast("bigint")
        else:
            lm = F.lit(None).cast("bigint")
        bucket = F.col("bucket").cast("string") if first.has_bucket else F.lit(None).cast("string")
        frames.append(
            df.select(
                F.col("_metadata.file_path").alias("file"),
                bucket.alias("bucket"),
                F.col("key").cast("string").alias("key"),
                F.col("size").cast("string").alias("size"),
                lm.alias("last_modified_ms"),
            )
        )
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _parquet_rows(spark: Any, src: InventorySource, native: tuple[sources.NativeParquet, ...] | None) -> Any:
    F = _F()
    df = _native_parquet_rows(spark, native) if native else _file_rows(spark, src, sources.PARQUET_ROWS_SCHEMA)
    size = F.col("size").try_cast("bigint")
    reason = F.when(F.col("key").isNull() | (F.col("key") == ""), F.lit(inv.MISSING_KEY)).when(
        size.isNull() | (size < 0), F.lit(inv.BAD_SIZE)
    )
    raw_fields = [F.col("bucket"), F.col("key"), F.col("size")]
    raw = F.concat_ws(",", *[F.coalesce(f, F.lit("")) for f in raw_fields])
    return df.select(
        F.col("key"),
        size.alias("size"),
        F.coalesce(F.col("last_modified_ms"), F.lit(-1).cast("bigint")).alias("last_modified_ms"),
        reason.alias("malformed"),
        raw.alias("raw"),
        F.col("file"),
    )


# A task's error as its traceback's last line names it: "<module>.InventoryError: INVALID_INVENTORY: <message>".
_TASK_ERRORS: tuple[type[TieredError], ...] = (inv.InventoryError, MissingCredentialsError, RemoteStorageError)
_TASK_ERROR = re.compile(
    "|".join(rf"\b{cls.__name__}: {cls.name}: (?P<m{i}>[^\n]*)" for i, cls in enumerate(_TASK_ERRORS))
)


#: Every malformed-row reason the inventory readers give (:mod:`remote_storage.inventory`).
MALFORMED_REASONS = (inv.WRONG_COLUMN_COUNT, inv.BAD_KEY, inv.MISSING_KEY, inv.BAD_SIZE, inv.BAD_LAST_MODIFIED)


def _observe_malformed(rows: Any) -> tuple[Any, Any]:
    """``rows``, observed: the first action that reads them also counts their malformed rows, in all and by each
    of :data:`MALFORMED_REASONS` (Spark's ``observe``: aggregated as the rows go by, no job of its own)."""
    from pyspark.sql import Observation

    F = _F()
    seen = Observation("malformed_rows")
    reason = F.col("malformed")
    by_reason = [F.count(F.when(reason == r, True)).alias(f"reason{i}") for i, r in enumerate(MALFORMED_REASONS)]
    return rows.observe(seen, F.count(reason).alias("malformed"), *by_reason), seen


def _malformed_counts(seen: Any) -> dict[str, int] | None:
    """The malformed rows by reason, as observed once the rows were read; None if some row has a reason not in
    :data:`MALFORMED_REASONS` (the caller then counts them by reading the rows again)."""
    metrics = seen.get
    counts = {r: int(metrics[f"reason{i}"]) for i, r in enumerate(MALFORMED_REASONS) if metrics[f"reason{i}"]}
    return counts if sum(counts.values()) == int(metrics["malformed"]) else None


@contextmanager
def _task_errors_raised_here() -> Iterator[None]:
    """An inventory or object-store error raised in an executor's task (wrapped by Spark in its own exception)
    raised as itself."""
    try:
        yield
    except TieredError:
        raise
    except Exception as exc:
        found = _TASK_ERROR.search(str(exc))
        if found is None:
            raise
        i = next(int(k[1:]) for k, v in found.groupdict().items() if v is not None)
        raise _TASK_ERRORS[i](found.group(f"m{i}")) from exc


# -- 3. metadata --------------------------------------------------------------------------------------------------


def _read_export(spark: Any, export_dir: Path) -> tuple[Any, Any, Any]:
    names = (export_format.TOPICS_FILE, export_format.SEGMENTS_FILE, export_format.EPOCHS_FILE)
    paths = {name: export_dir / name for name in names}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ScanError(
            f"the metadata export in {export_dir} lacks {', '.join(missing)}; export it again with this version "
            "('tieredctl scan run --metadata-store PATH' exports before scanning)"
        )
    topics, segments, epochs = (spark.read.parquet(str(paths[n])) for n in names)
    return topics, _with_added_columns(segments), epochs


def _with_added_columns(segments: Any) -> Any:
    """Segments with every column of today's schema: those an older export lacks are null."""
    F = _F()
    schema = export_format.segments_schema()
    absent = [n for n in export_format.ADDED_SEGMENT_COLUMNS if n not in segments.columns]
    spark_types = {"int64": "bigint", "string": "string"}
    nulls = [F.lit(None).cast(spark_types[str(schema.field(n).type)]).alias(n) for n in absent]
    return segments.select("*", *nulls) if nulls else segments


def _duplicate_error(export_dir: Path, what: str, example: str, count: int) -> ScanError:
    return ScanError(
        f"the metadata export in {export_dir} lists {what} more than once ({example}, {count} rows): "
        "it is not an export of one cluster's metadata; export it again"
    )


def _refuse_duplicates(df: Any, keys: list[str], what: str, export_dir: Path) -> None:
    """An export holds each topic id, and each (topic id, segment id), once; a join would multiply rows otherwise."""
    F = _F()
    dup = df.groupBy(*keys).count().filter(F.col("count") > 1).limit(1).collect()
    if dup:
        raise _duplicate_error(export_dir, what, ", ".join(f"{k}={dup[0][k]}" for k in keys), dup[0]["count"])


def _topic_rows(export_dir: Path) -> list[dict[str, Any]]:
    """The export's topic rows, read by the driver itself (topics are few: they are broadcast), without a Spark
    job; an export that lists a topic id twice is refused as :func:`_refuse_duplicates` refuses it."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pq.read_table(export_dir / export_format.TOPICS_FILE)
    for entry in pc.value_counts(table.column("topic_id")).to_pylist():
        if entry["counts"] > 1:
            raise _duplicate_error(export_dir, "a topic id", f"topic_id={entry['values']}", entry["counts"])
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


@dataclass(frozen=True, slots=True)
class _SegmentFacts:
    count: int  # segments in the export
    any_recorded: bool  # a segment records a location (a prefix or a key) in its custom metadata
    recorded_prefixes: tuple[str, ...]  # the prefixes they record (a recorded key alone records none)


def _segment_facts(segments: Any, export_dir: Path, *, driver_max: int) -> _SegmentFacts:
    """What the job needs to know of the segments before it plans (see :class:`_SegmentFacts`); an export that lists a
    segment twice is refused. Up to ``driver_max`` segments (the Parquet footer's row count) the driver reads their
    ids itself (:func:`_facts_read_here`), more are counted by a Spark job (:func:`_facts_by_spark`): the same facts
    either way."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(export_dir / export_format.SEGMENTS_FILE) as file:
        if file.metadata.num_rows <= driver_max:
            return _facts_read_here(file, export_dir)
    return _facts_by_spark(segments, export_dir)


def _facts_read_here(file: Any, export_dir: Path) -> _SegmentFacts:
    """:func:`_segment_facts` by the driver, from the segments' open Parquet ``file`` with pyarrow: four columns
    (about 60 bytes a segment), no Spark job. A small export's facts took a Spark job of three stages, several
    seconds of a scan of 1M rows."""
    import pyarrow.compute as pc

    present = set(file.schema_arrow.names)
    located = [n for n in ("object_prefix", "object_key") if n in present]  # an older export has neither
    table = file.read(columns=["topic_id", "segment_id", *located])
    counted = table.group_by(["topic_id", "segment_id"]).aggregate([([], "count_all")])
    if counted.num_rows != table.num_rows:
        first = counted.filter(pc.greater(counted.column("count_all"), 1)).slice(0, 1).to_pylist()[0]
        example = f"topic_id={first['topic_id']}, segment_id={first['segment_id']}"
        raise _duplicate_error(export_dir, "a segment", example, first["count_all"])
    any_recorded = any(table.column(name).null_count < table.num_rows for name in located)
    prefixes = table.column("object_prefix").drop_null().unique().to_pylist() if "object_prefix" in present else []
    return _SegmentFacts(table.num_rows, any_recorded, tuple(sorted(prefixes)))


def _facts_by_spark(segments: Any, export_dir: Path) -> _SegmentFacts:
    """:func:`_segment_facts` in one small Spark job: the count of distinct (topic id, segment id) is smaller than the
    count of rows when a segment is listed twice; then a grouping finds one to name."""
    F = _F()
    recording = F.col("object_prefix").isNotNull() | F.col("object_key").isNotNull()
    row = segments.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count_distinct(F.struct("topic_id", "segment_id")).alias("distinct"),
        F.coalesce(F.max(recording), F.lit(False)).alias("any_recorded"),
        F.collect_set(F.when(recording, F.col("object_prefix"))).alias("prefixes"),
    ).collect()[0]
    if row["distinct"] != row["rows"]:
        _refuse_duplicates(segments, ["topic_id", "segment_id"], "a segment", export_dir)
    return _SegmentFacts(row["rows"], bool(row["any_recorded"]), tuple(sorted(row["prefixes"])))


# -- the job ------------------------------------------------------------------------------------------------------


def run_scan(
    spark: Any,
    source: InventorySource,
    export_dir: Path,
    out_dir: Path,
    settings: ScanSettings,
    *,
    progress: Progress | None = None,
    manifests: ManifestSource | None = None,
) -> ScanAggregates:
    """Classify every row of ``source`` against the export in ``export_dir``; write the contract's files.

    ``manifests``: where the executors read the manifests the size rule needs (None: they are not read)."""
    with _task_errors_raised_here():
        return _run_scan(spark, source, export_dir, out_dir, settings, progress=progress, manifests=manifests)


def _run_scan(
    spark: Any,
    source: InventorySource,
    export_dir: Path,
    out_dir: Path,
    settings: ScanSettings,
    *,
    progress: Progress | None = None,
    manifests: ManifestSource | None = None,
) -> ScanAggregates:
    F = _F()
    say = progress or (lambda _m: None)
    now_ms = source.creation_ms
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    if not source.files:
        raise ScanError(f"inventory {source.uri} lists no data files")
    topics, segments, epochs = _read_export(spark, export_dir)
    topic_list = _topic_rows(export_dir)
    facts = _segment_facts(segments, export_dir, driver_max=settings.driver_facts_max_segments)

    say(f"reading {len(source.files)} inventory data file(s) ({source.file_format})")

    native = native_files(source)
    log.info("scan.reader", reader="spark parquet" if native else "python", files=len(source.files))

    def read_rows() -> Any:
        return _csv_rows(spark, source) if source.file_format == "csv" else _parquet_rows(spark, source, native)

    # Not cached: the classification reads the rows once, and counts the malformed ones as it goes by.
    rows, malformed_seen = _observe_malformed(read_rows())
    valid = rows.filter(F.col("malformed").isNull()).select("key", "size", "last_modified_ms")

    say("classifying objects against the metadata export")
    broadcast = facts.count <= settings.broadcast_segments_max
    prefixes = sorted(p for p in facts.recorded_prefixes if p != settings.prefix)
    if facts.any_recorded:
        log.info("scan.recorded_locations", other_prefixes=prefixes)
    # Three keys per segment that records a location, and never more segments than the ones broadcast.
    recorded = recorded_locations(segments, settings.prefix) if facts.any_recorded else None
    keyed = locate(parse_keys(valid, settings.prefix), recorded, settings.prefix, broadcast=broadcast)
    objects = classify_objects(keyed, topics, segments, grace_ms=settings.grace_ms, now_ms=now_ms, broadcast=broadcast)
    objects_path = out_dir / c.OBJECTS_DIR
    objects.write.mode("overwrite").parquet(str(objects_path))
    seconds["classify_and_write_objects"] = time.perf_counter() - started

    say("checking segments: object sets, offset gaps and overlaps, stale epochs, sizes")
    t0 = time.perf_counter()
    written = spark.read.parquet(str(objects_path))
    linked = linked_segments(written, topics, segments, epochs)
    reads = ManifestReads(read=False, cap=settings.max_manifest_reads)
    readings = None
    if manifests is not None and settings.max_manifest_reads > 0:
        linked = linked.persist()  # counted, then read for the GETs, then for the anomalies
        readings, reads = read_manifests(
            spark, linked, source=manifests, cap=settings.max_manifest_reads, out_dir=out_dir
        )
        if reads.needed:
            say(f"read {reads.needed:,} segment manifest(s) from s3://{manifests.bucket} to judge .log sizes")
    seconds["manifest_reads"] = time.perf_counter() - t0
    found = segment_anomalies(linked, readings, manifests_read=reads.read)
    anomalies = object_anomalies(written).unionByName(found)
    anomalies.write.mode("overwrite").parquet(str(out_dir / c.ANOMALIES_DIR))
    linked.unpersist()
    seconds["anomalies"] = time.perf_counter() - t0

    say("summarising")
    t0 = time.perf_counter()
    written = spark.read.parquet(str(objects_path))
    agg = [F.count(F.lit(1)).alias("objects"), F.coalesce(F.sum("size"), F.lit(0)).alias("bytes")]
    # One pass: per (topic id, category, reclaimable); unattributed objects have a null topic id.
    per_group = written.groupBy("topic_id", "category", "reclaimable").agg(*agg, F.min("topic").alias("topic"))
    grouped = [r.asDict() for r in per_group.collect()]
    anomalies_by_topic = spark.read.parquet(str(out_dir / c.ANOMALIES_DIR)).groupBy("topic_id", "type").count()
    malformed = read_rows().filter(F.col("malformed").isNotNull())
    malformed_counts = _malformed_counts(malformed_seen)
    if malformed_counts is None:  # a reason the observation does not name: counted by a second read
        malformed_counts = {r["malformed"]: r["count"] for r in malformed.groupBy("malformed").count().collect()}
    # Examples only when there is a malformed row: otherwise the inventory is not read again for none.
    examples = [
        {"file": sources.file_name(native or (), r["file"]), "reason": r["malformed"], "raw": (r["raw"] or "")[:500]}
        for r in (malformed.limit(settings.max_examples).collect() if malformed_counts else [])
    ]
    seen_ids = {r["topic_id"] for r in grouped if r["topic_id"] is not None}
    anomaly_rows = [r.asDict() for r in anomalies_by_topic.collect()]
    seen_ids |= {r["topic_id"] for r in anomaly_rows if r["topic_id"] is not None}
    topic_rows = [r for r in topic_list if r["topic_id"] in seen_ids]
    seconds["summarise"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - started
    total_rows = sum(r["objects"] for r in grouped) + sum(malformed_counts.values())
    log.info("scan.classified", rows=total_rows, malformed=sum(malformed_counts.values()), seconds=seconds)
    return ScanAggregates(
        rows=total_rows,
        objects=grouped,
        anomalies_by_topic=anomaly_rows,
        malformed_by_reason=malformed_counts,
        malformed_examples=examples,
        topics=topic_rows,
        seconds=seconds,
        manifests=reads,
        object_prefixes=tuple(prefixes),
    )
