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
   dropped silently.
2. **Keys** are parsed with fixed widths (ids are 22 characters, offsets 20 digits), ``get``/``try_cast`` and
   anchored character-class patterns, never a backtracking regex: Spark 4 runs with ANSI mode on, and one junk key
   must not fail the job. A key this parser accepts is one :func:`remote_storage.keys.parse_key` accepts.
3. **Joins.** Topics and the tiered-state history are small and broadcast; segments join on (topic id, segment id).
   An export that lists a topic id or a segment twice is refused (a join would count its objects twice).
   Retention expiry is computed on the segments with window functions, following
   :func:`policies.retention.plan_remote_expiry`.
4. **Outputs** (names in the contract): ``objects.parquet`` and ``anomalies.parquet`` directories, and the
   aggregates that :mod:`remote_storage.scan.summary` turns into ``summary.json``.

"Now" is the inventory's creation time (inventories lag the bucket), never the wall clock.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from orchestrator.errors import MissingCredentialsError, ScanInputError, TieredError
from remote_storage import export_format
from remote_storage import inventory as inv
from remote_storage.keys import ID_WIDTH, OFFSET_WIDTH
from remote_storage.scan import contract as c
from remote_storage.scan import sources
from remote_storage.scan.sources import InventorySource

log = structlog.get_logger(__name__)

_SUFFIXES = ("log", "indexes", "rsm-manifest")
_REPLACEMENT_CHAR = "\ufffd"

Progress = Callable[[str], None]


class ScanError(ScanInputError):
    """The scan cannot run on these inputs (missing export file, unreadable inventory data)."""

    name, retriable = "INVALID_SCAN_INPUT", False


@dataclass(frozen=True, slots=True)
class ScanSettings:
    prefix: str = ""
    grace_ms: int = c.DEFAULT_GRACE_MS
    max_anomalies: int = 0
    max_examples: int = inv.DEFAULT_MAX_EXAMPLES
    # Up to this many RLMM segments are broadcast to the objects' join (about 120 bytes each in the driver).
    broadcast_segments_max: int = 4_000_000


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
_TASK_ERRORS: tuple[type[TieredError], ...] = (inv.InventoryError, MissingCredentialsError)
_TASK_ERROR = re.compile(
    "|".join(rf"\b{cls.__name__}: {cls.name}: (?P<m{i}>[^\n]*)" for i, cls in enumerate(_TASK_ERRORS))
)


@contextmanager
def _task_errors_raised_here() -> Iterator[None]:
    """An inventory error raised in an executor's task (wrapped by Spark in its own exception) raised as itself."""
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


# -- 2. keys ------------------------------------------------------------------------------------------------------


def java_quote(text: str) -> str:
    """``text`` as a literal in a Java regex (what ``Pattern.quote`` does)."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E" if text else ""


def key_pattern(prefix: str) -> str:
    """One anchored pattern for a whole key. Character classes cannot cross ``/``, so the only backtracking is the
    topic name giving back the 23 characters of ``-<topic id>``; ``\\z`` (not ``$``, which Java also matches before
    a final newline) ends it."""
    id_ = f"[A-Za-z0-9_-]{{{ID_WIDTH - 1}}}[AQgw]"  # canonical: the last character's 4 spare bits are 0
    return (
        f"^{java_quote(prefix)}[a-zA-Z0-9._-]{{1,249}}-{id_}/(?:0|[1-9][0-9]{{0,9}})/[0-9]{{{OFFSET_WIDTH}}}-{id_}"
        f"\\.(?:{'|'.join(_SUFFIXES)})\\z"
    )


def _parse_keys(rows: Any, prefix: str) -> Any:
    """Add ``under_prefix``, ``parsed`` and the key's parts (null unless parsed).

    One regex match decides the shape; the parts are then cut at fixed places (``substring_index`` and widths), and
    ``try_cast`` runs only on keys that matched (it is slow on input that fails). The match and the casts are
    projected once and referred to by name: Spark does not share them between the conditions of ``when`` (inlined,
    they ran once per output column, and parsing took 70% longer).
    """
    F = _F()
    key = F.col("key")
    under = key.startswith(prefix) if prefix else F.lit(True)
    rest = F.substring(key, len(prefix) + 1, 1 << 30)
    row_columns = ["key", "size", "last_modified_ms"]
    shape_columns = [
        F.coalesce(under, F.lit(False)).alias("under_prefix"),
        F.coalesce(key.rlike(key_pattern(prefix)), F.lit(False)).alias("shaped"),
    ]
    # <topic>-<topic id>, <partition> and the file name: the key below the prefix cut at its slashes.
    split_columns = [
        F.substring_index(rest, "/", 1).alias("topic_part"),
        F.substring_index(F.substring_index(rest, "/", 2), "/", -1).alias("partition_text"),
        F.substring_index(rest, "/", -1).alias("file"),
    ]
    cut = rows.select(*row_columns, *shape_columns, *split_columns)
    shaped, tlen = F.col("shaped"), F.length("topic_part")
    cast = cut.select(
        "*",
        F.substring("topic_part", F.lit(1), tlen - (ID_WIDTH + 1)).alias("name"),
        F.when(shaped, F.col("partition_text").try_cast("int")).alias("partition_number"),
        F.when(shaped, F.substring("file", 1, OFFSET_WIDTH).try_cast("bigint")).alias("offset"),
    )
    ok = shaped & F.col("partition_number").isNotNull() & F.col("offset").isNotNull() & ~F.col("name").isin(".", "..")
    checked = cast.select("*", F.coalesce(ok, F.lit(False)).alias("parsed"))

    def when_ok(col: Any) -> Any:
        return F.when(F.col("parsed"), col)

    kept_columns = ["key", "size", "last_modified_ms", "under_prefix", "parsed"]
    part_columns = [
        when_ok(F.col("name")).alias("topic"),
        when_ok(F.substring("topic_part", tlen - ID_WIDTH + 1, ID_WIDTH)).alias("topic_id"),
        when_ok(F.col("partition_number")).alias("partition"),
        when_ok(F.col("offset")).alias("start_offset"),
        when_ok(F.substring("file", OFFSET_WIDTH + 2, ID_WIDTH)).alias("segment_id"),
        when_ok(F.substring("file", OFFSET_WIDTH + ID_WIDTH + 3, 1 << 20)).alias("suffix"),
    ]
    return checked.select(*kept_columns, *part_columns)


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
    return tuple(spark.read.parquet(str(paths[n])) for n in names)


def _refuse_duplicates(df: Any, keys: list[str], what: str, export_dir: Path) -> None:
    """An export holds each topic id, and each (topic id, segment id), once; a join would multiply rows otherwise."""
    F = _F()
    dup = df.groupBy(*keys).count().filter(F.col("count") > 1).limit(1).collect()
    if dup:
        example = ", ".join(f"{k}={dup[0][k]}" for k in keys)
        raise ScanError(
            f"the metadata export in {export_dir} lists {what} more than once ({example}, {dup[0]['count']} rows): "
            "it is not an export of one cluster's metadata; export it again"
        )


def _expired_segments(segments: Any, topics: Any, *, now_ms: int) -> Any:
    """(topic_id, segment_id) of COPY_SEGMENT_FINISHED segments that retention expires now (plan_remote_expiry)."""
    F = _F()
    from pyspark.sql import Window

    live_topics = topics.filter(~F.col("deleted")).select("topic_id", "retention_ms", "retention_bytes")
    segs = segments.filter(F.col("state") == "COPY_SEGMENT_FINISHED").join(F.broadcast(live_topics), "topic_id")
    part = Window.partitionBy("topic_id", "partition")
    ordered = part.orderBy("start_offset", "end_offset", "segment_id")
    before = F.coalesce(F.sum("size_bytes").over(ordered.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
    by_ms = (F.col("retention_ms") >= 0) & (F.col("max_timestamp_ms") < F.lit(now_ms) - F.col("retention_ms"))
    by_bytes = (F.col("retention_bytes") >= 0) & (F.sum("size_bytes").over(part) - before > F.col("retention_bytes"))
    expirable = (by_ms | by_bytes).cast("int")
    # Oldest first, stopping at the first survivor: expired iff every segment up to this one is expirable.
    expired = F.min(expirable).over(ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)) == 1
    return segs.select("topic_id", "segment_id", expired.alias("expired")).filter("expired")


# -- 4. classification --------------------------------------------------------------------------------------------


def _classify(
    objects: Any, topics: Any, segments: Any, expired: Any, s: ScanSettings, now_ms: int, *, broadcast: bool
) -> Any:
    F = _F()
    topic_columns = [
        "topic_id",
        F.col("state").alias("t_state"),
        F.col("policy").alias("t_policy"),
        F.col("deleted").alias("t_deleted"),
        F.lit(True).alias("t_known"),
    ]
    t = F.broadcast(topics.select(*topic_columns))
    segment_columns = [
        "topic_id",
        "segment_id",
        F.col("state").alias("s_state"),
        F.col("tiered_epoch").alias("segment_epoch"),
        F.col("size_bytes").alias("s_size"),
        F.col("event_timestamp_ms").alias("s_event"),
    ]
    seg = segments.select(*segment_columns).join(expired, ["topic_id", "segment_id"], "left")
    # Broadcast, the 10^7 objects are not shuffled at all; above the limit it is a shuffle join.
    seg_side = F.broadcast(seg) if broadcast else seg
    df = objects.join(t, "topic_id", "left").join(seg_side, ["topic_id", "segment_id"], "left")
    state, deleted = F.col("t_state"), F.col("t_deleted")
    s_state = F.col("s_state")
    category = (
        F.when(~F.col("under_prefix"), c.OUTSIDE_PREFIX)
        .when(~F.col("parsed"), c.UNPARSEABLE)
        .when(F.col("t_known").isNull(), c.UNKNOWN_TOPIC)
        .when(deleted, c.DELETED_TOPIC)
        .when(state.isin("DISABLING", "DISABLED") & (F.col("t_policy") == "DELETE"), c.DISABLED_DELETE)
        .when(s_state.isNull(), c.NO_RLMM_ENTRY)
        .when(s_state == "DELETE_SEGMENT_FINISHED", c.RLMM_DELETED)
        .when(s_state == "DELETE_SEGMENT_STARTED", c.PENDING_DELETE)
        .when(s_state == "COPY_SEGMENT_STARTED", c.COPY_UNFINISHED)
        .when(F.coalesce(F.col("expired"), F.lit(False)), c.PAST_RETENTION)
        .otherwise(c.LIVE)
    )
    df = df.withColumn("category", category).withColumn(
        "age_ms", F.when(F.col("last_modified_ms") >= 0, F.lit(now_ms) - F.col("last_modified_ms")).otherwise(-1)
    )
    cat = F.col("category")
    grace_passed = (F.col("age_ms") >= 0) & (F.col("age_ms") >= s.grace_ms)
    reclaimable = cat.isin(*c.RECLAIMABLE) & (cat.isin(*c.NO_GRACE) | grace_passed)
    anomaly = (
        F.when(cat == c.UNPARSEABLE, c.UNPARSEABLE_KEY)
        .when((cat == c.DISABLED_DELETE) & (state == "DISABLED"), c.DELETE_INCOMPLETE)
        .when(cat == c.RLMM_DELETED, c.DELETE_INCOMPLETE)
        .when(
            (cat == c.PENDING_DELETE) & (F.col("s_event") >= 0) & (F.lit(now_ms) - F.col("s_event") >= s.grace_ms),
            c.DELETE_INCOMPLETE,
        )
        .when(
            cat.isin(c.LIVE, c.PAST_RETENTION) & (F.col("suffix") == "log") & (F.col("size") != F.col("s_size")),
            c.SIZE_MISMATCH,
        )
    )
    return df.select(
        *[F.col(name) for name, _ in c.OBJECT_COLUMNS[:10]],
        F.when(F.col("parsed"), s_state).alias("segment_state"),
        F.when(F.col("parsed"), F.col("segment_epoch")).alias("segment_epoch"),
        cat.alias("category"),
        F.coalesce(reclaimable, F.lit(False)).alias("reclaimable"),
        anomaly.alias("anomaly"),
    )


def _segment_anomalies(objects: Any, topics: Any, segments: Any, epochs: Any) -> Any:
    """Every segment-level anomaly in one pass over the segments of known topic ids: one window (the chain of a
    partition's epoch) and one join (which suffixes the inventory holds, from per-suffix flags)."""
    F = _F()
    from pyspark.sql import Window

    flags = [F.max((F.col("suffix") == sfx).cast("int")).alias(f"has_{i}") for i, sfx in enumerate(_SUFFIXES)]
    present = objects.filter(F.col("topic_id").isNotNull()).groupBy("topic_id", "segment_id").agg(*flags)
    n = sum((F.coalesce(F.col(f"has_{i}"), F.lit(0)) for i in range(len(_SUFFIXES))), F.lit(0))
    enabled = epochs.filter(F.col("state") == "ENABLED").select("topic_id", "tiered_epoch").distinct()
    known = segments.join(F.broadcast(topics.select("topic_id", F.col("deleted").alias("t_deleted"))), "topic_id").join(
        F.broadcast(enabled.withColumn("enabled", F.lit(True))), ["topic_id", "tiered_epoch"], "left"
    )
    finished = (F.col("state") == "COPY_SEGMENT_FINISHED") & ~F.col("t_deleted")
    by_chain = Window.partitionBy("topic_id", "partition", "tiered_epoch")
    chain = by_chain.orderBy("start_offset", "end_offset", "segment_id")
    earlier = chain.rowsBetween(Window.unboundedPreceding, -1)
    # The end of the previous *finished* segment of this chain (others are skipped, not a break in it).
    prev_end = F.last(F.when(finished, F.col("end_offset")), ignorenulls=True).over(earlier)
    linked = known.select("*", prev_end.alias("prev_end")).join(present, ["topic_id", "segment_id"], "left")

    def anomaly(kind: Any, detail: Any) -> Any:
        return F.when(kind.isNotNull(), F.struct(kind.alias("type"), detail.alias("detail")))

    copied = F.col("state").isin("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED")
    stale = F.when(copied & F.col("enabled").isNull(), F.lit(c.STALE_EPOCH_COPY))
    none_present, some_missing = finished & (n == 0), finished & (n < len(_SUFFIXES))
    sets = F.when(none_present, F.lit(c.MISSING_OBJECTS)).when(some_missing, F.lit(c.INCOMPLETE_OBJECT_SET))
    start, prev = F.col("start_offset"), F.col("prev_end")
    gap, overlap = finished & (start > prev + 1), finished & (start <= prev)
    chains = F.when(gap, F.lit(c.OFFSET_GAP)).when(overlap, F.lit(c.OFFSET_OVERLAP))

    stale_text = ", not an epoch at which the topic was ENABLED"
    stale_detail = F.concat(F.lit("copied at tiered epoch "), F.col("tiered_epoch").cast("string"), F.lit(stale_text))
    sets_text = f" of {len(_SUFFIXES)} objects in the inventory; the RLMM says COPY_SEGMENT_FINISHED"
    sets_detail = F.concat(n.cast("string"), F.lit(sets_text))
    chains_text = ", the previous segment of this epoch ends at "
    chains_detail = F.concat(F.lit("starts at "), start.cast("string"), F.lit(chains_text), prev.cast("string"))
    per_kind = [anomaly(stale, stale_detail), anomaly(sets, sets_detail), anomaly(chains, chains_detail)]
    found = F.array_compact(F.array(*per_kind))

    exploded = linked.select("topic", "topic_id", "partition", "segment_id", "size_bytes", F.explode(found).alias("a"))
    anomaly_type = F.col("a.type").alias("type")
    where = ["topic", "topic_id", "partition", "segment_id"]
    no_key = F.lit(None).cast("string").alias("key")
    segment_bytes = F.col("size_bytes").alias("bytes")
    detail = F.col("a.detail").alias("detail")
    return exploded.select(anomaly_type, *where, no_key, segment_bytes, detail)


def _object_anomalies(objects: Any) -> Any:
    F = _F()
    anomaly_type = F.col("anomaly").alias("type")
    where = ["topic", "topic_id", "partition", "segment_id", "key"]
    object_bytes = F.col("size").alias("bytes")
    detail = F.concat(F.lit("object classified "), F.col("category")).alias("detail")
    return objects.filter(F.col("anomaly").isNotNull()).select(anomaly_type, *where, object_bytes, detail)


# -- the job ------------------------------------------------------------------------------------------------------


def run_scan(
    spark: Any,
    source: InventorySource,
    export_dir: Path,
    out_dir: Path,
    settings: ScanSettings,
    *,
    progress: Progress | None = None,
) -> ScanAggregates:
    """Classify every row of ``source`` against the export in ``export_dir``; write the contract's files."""
    with _task_errors_raised_here():
        return _run_scan(spark, source, export_dir, out_dir, settings, progress=progress)


def _run_scan(
    spark: Any,
    source: InventorySource,
    export_dir: Path,
    out_dir: Path,
    settings: ScanSettings,
    *,
    progress: Progress | None = None,
) -> ScanAggregates:
    F = _F()
    say = progress or (lambda _m: None)
    now_ms = source.creation_ms
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    if not source.files:
        raise ScanError(f"inventory {source.uri} lists no data files")
    topics, segments, epochs = _read_export(spark, export_dir)
    _refuse_duplicates(topics, ["topic_id"], "a topic id", export_dir)
    _refuse_duplicates(segments, ["topic_id", "segment_id"], "a segment", export_dir)

    say(f"reading {len(source.files)} inventory data file(s) ({source.file_format})")

    native = native_files(source)
    log.info("scan.reader", reader="spark parquet" if native else "python", files=len(source.files))

    def read_rows() -> Any:
        return _csv_rows(spark, source) if source.file_format == "csv" else _parquet_rows(spark, source, native)

    # Not cached: the classification reads the rows once; malformed rows are counted by a second, narrow read.
    valid = read_rows().filter(F.col("malformed").isNull()).select("key", "size", "last_modified_ms")

    say("classifying objects against the metadata export")
    expired = _expired_segments(segments, topics, now_ms=now_ms)
    broadcast = segments.count() <= settings.broadcast_segments_max
    keyed = _parse_keys(valid, settings.prefix)
    objects = _classify(keyed, topics, segments, expired, settings, now_ms, broadcast=broadcast)
    objects_path = out_dir / c.OBJECTS_DIR
    objects.write.mode("overwrite").parquet(str(objects_path))
    seconds["classify_and_write_objects"] = time.perf_counter() - started

    say("checking segments: missing objects, incomplete sets, offset gaps and overlaps, stale epochs")
    t0 = time.perf_counter()
    written = spark.read.parquet(str(objects_path))
    anomalies = _object_anomalies(written).unionByName(_segment_anomalies(written, topics, segments, epochs))
    anomalies.write.mode("overwrite").parquet(str(out_dir / c.ANOMALIES_DIR))
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
    malformed_counts = {r["malformed"]: r["count"] for r in malformed.groupBy("malformed").count().collect()}
    examples = [
        {"file": sources.file_name(native or (), r["file"]), "reason": r["malformed"], "raw": (r["raw"] or "")[:500]}
        for r in malformed.limit(settings.max_examples).collect()
    ]
    seen_ids = {r["topic_id"] for r in grouped if r["topic_id"] is not None}
    anomaly_rows = [r.asDict() for r in anomalies_by_topic.collect()]
    seen_ids |= {r["topic_id"] for r in anomaly_rows if r["topic_id"] is not None}
    topic_rows = [r.asDict() for r in topics.filter(F.col("topic_id").isin(*seen_ids)).collect()] if seen_ids else []
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
    )
