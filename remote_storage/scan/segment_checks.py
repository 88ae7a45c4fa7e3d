"""The Spark scan's segment-level anomalies, the size rule among them, and the manifest reads it needs.

Everything here is per RLMM segment of a known topic id, in one pass: the objects the job wrote are grouped once by
(topic id, segment id) into what the inventory holds of each segment (which suffixes, the bytes of all of them, the
``.log`` and the ``.rsm-manifest`` with the smallest key); the segments are joined to it, to their topic and to the
epochs at which it was ENABLED, and one window gives each segment the end of the previous finished segment of its
chain. The anomalies and the size rule are the contract's (:mod:`remote_storage.scan.contract`), as
:func:`policies.orphans.segment_anomalies` states them in plain Python.

Manifests: the size rule's third step needs a segment's manifest. When the job has access to the bucket
(:class:`ManifestSource`), the segments at that step are counted first: more than ``max_manifest_reads`` stops the
scan (:class:`~remote_storage.scan.errors.ScanError`, before any GET); otherwise the executors GET them
(:mod:`.manifest_fetch`), and the readings are written once to ``manifests.parquet`` in the output directory and
read back, so no manifest is fetched twice whatever Spark recomputes. Without access, or with a cap of 0, nothing
is read and a ``.log`` that is not the RLMM's size is a ``size_mismatch``, as when only the RLMM was known.

Invariant: GETs made = segments at step 3 = ``manifests.needed`` in the summary, at most one per
COPY_SEGMENT_FINISHED segment, and never more than the cap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from remote_storage.keys import SEGMENT_SUFFIXES
from remote_storage.scan import contract as c
from remote_storage.scan import manifest_reading as mr
from remote_storage.scan.errors import ScanError
from remote_storage.scan.manifest_fetch import READING_SCHEMA, fetch_manifests
from remote_storage.scan.sources import ObjectStoreAccess

log = structlog.get_logger(__name__)

_SUFFIXES = tuple(s.value for s in SEGMENT_SUFFIXES)
_NEEDS_MANIFEST = "needs_manifest"
SEGMENT_FIRST = ("segment_id", "topic_id")  # a segment's key, in the order that sorts it fastest (found_objects)
_GETS_PER_TASK = 2000  # manifests one task reads (a few seconds of small GETs): spreads the reads over executors


def _F() -> Any:
    from pyspark.sql import functions

    return functions


@dataclass(frozen=True, slots=True)
class ManifestSource:
    """Where the executors read manifests: the scanned bucket, through this access."""

    bucket: str
    access: ObjectStoreAccess


@dataclass(frozen=True, slots=True)
class ManifestReads:
    """What the summary says of the manifests: whether they could be read, the cap, how many were needed (= GETs
    made when read) and the readings by kind."""

    read: bool
    cap: int
    needed: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    file: str | None = None  # manifests.parquet, when any was read

    def as_json(self) -> dict[str, Any]:
        by_kind = {kind: self.by_kind.get(kind, 0) for kind in mr.KINDS}
        return {"read": self.read, "cap": self.cap, "needed": self.needed, "by_kind": by_kind, "file": self.file}


def found_objects(objects: Any) -> Any:
    """Per (topic id, segment id) of parsed objects: ``has_<i>`` per suffix, ``total_size``, and ``log`` and
    ``manifest`` as struct(key, size) of the smallest key."""
    F = _F()
    suffix = F.col("suffix")
    flags = [F.max((suffix == sfx).cast("int")).alias(f"has_{i}") for i, sfx in enumerate(_SUFFIXES)]

    def smallest(sfx: str) -> Any:
        return F.min(F.when(suffix == sfx, F.struct(F.col("key").alias("key"), F.col("size").alias("size"))))

    aggregates = [
        *flags,
        F.sum("size").alias("total_size"),
        smallest("log").alias("log"),
        smallest("rsm-manifest").alias("manifest"),
    ]
    # Grouped (so sorted) by segment id first: its random first bytes tell nearly every pair of rows apart in the
    # sort's 8-byte prefix, where a topic id, shared by thousands of rows, makes each comparison read both ids.
    return objects.filter(F.col("topic_id").isNotNull()).groupBy(*SEGMENT_FIRST).agg(*aggregates)


def linked_segments(objects: Any, topics: Any, segments: Any, epochs: Any) -> Any:
    """Segments of known topic ids with their topic, ENABLED epochs, chain predecessor, found objects and the size
    rule's first steps (``size_step``: null, size_mismatch or needs_manifest)."""
    F = _F()
    from pyspark.sql import Window

    enabled = epochs.filter(F.col("state") == "ENABLED").select("topic_id", "tiered_epoch").distinct()
    # A topic without a tiered-state history (a Kafka cluster's export) gets no stale-epoch verdict.
    with_history = epochs.select("topic_id").distinct().withColumn("has_history", F.lit(True))
    topic_columns = [
        "topic_id",
        F.col("deleted").alias("t_deleted"),
        F.col("state").alias("t_state"),
        F.col("policy").alias("t_policy"),
    ]
    known = (
        segments.join(F.broadcast(topics.select(*topic_columns)), "topic_id")
        .join(F.broadcast(enabled.withColumn("enabled", F.lit(True))), ["topic_id", "tiered_epoch"], "left")
        .join(F.broadcast(with_history), "topic_id", "left")
    )
    finished = (F.col("state") == "COPY_SEGMENT_FINISHED") & ~F.col("t_deleted")
    chain = Window.partitionBy("topic_id", "partition", "tiered_epoch").orderBy(
        "start_offset", "end_offset", "segment_id"
    )
    earlier = chain.rowsBetween(Window.unboundedPreceding, -1)
    # The end of the previous *finished* segment of this chain (others are skipped, not a break in it).
    prev_end = F.last(F.when(finished, F.col("end_offset")), ignorenulls=True).over(earlier)
    linked = known.select("*", prev_end.alias("prev_end")).join(found_objects(objects), list(SEGMENT_FIRST), "left")

    n = sum((F.coalesce(F.col(f"has_{i}"), F.lit(0)) for i in range(len(_SUFFIXES))), F.lit(0))
    deletes_all = F.col("t_state").isin("DISABLING", "DISABLED") & (F.col("t_policy") == "DELETE")
    judged = finished & ~deletes_all & F.col("log").isNotNull()
    remote_size = F.col("remote_size")
    step = (
        F.when(~judged, F.lit(None).cast("string"))
        .when(
            remote_size.isNotNull(),
            F.when((n == len(_SUFFIXES)) & (F.col("total_size") != remote_size), F.lit(c.SIZE_MISMATCH)),
        )
        .when(F.col("log.size") == F.col("size_bytes"), F.lit(None).cast("string"))
        .when(F.col("manifest").isNotNull(), F.lit(_NEEDS_MANIFEST))
    )
    return linked.select("*", n.alias("n"), finished.alias("finished"), step.alias("size_step"))


def read_manifests(
    spark: Any, linked: Any, *, source: ManifestSource | None, cap: int, out_dir: Path
) -> tuple[Any | None, ManifestReads]:
    """The readings of the manifests the size rule needs (None when manifests are not read), and their counts."""
    F = _F()
    if source is None or cap <= 0:
        return None, ManifestReads(read=False, cap=cap)
    needs = linked.filter(F.col("size_step") == _NEEDS_MANIFEST).select(
        "topic_id", "segment_id", F.col("manifest.key").alias("manifest_key")
    )
    needed = needs.count()
    if needed > cap:
        raise ScanError(
            f"{needed:,} segments need their .rsm-manifest read to judge the size of their .log (it is not the "
            f"RLMM's size, and no custom metadata REMOTE_SIZE says what it must be), more than the cap of {cap:,} "
            "manifest reads (one small GET each): raise it (--max-manifest-reads), or pass 0 to judge sizes by the "
            "RLMM alone (a compressed or encrypted .log is then a size_mismatch)"
        )
    if needed == 0:
        return None, ManifestReads(read=True, cap=cap)
    log.info("scan.manifest_reads", segments=needed, bucket=source.bucket, cap=cap)
    tasks = max(1, min(-(-needed // _GETS_PER_TASK), 4 * spark.sparkContext.defaultParallelism))
    fetch = functools.partial(fetch_manifests, bucket=source.bucket, access=source.access)
    readings = spark.createDataFrame(needs.repartition(tasks).rdd.mapPartitions(fetch), READING_SCHEMA)
    path = out_dir / c.MANIFESTS_DIR
    readings.write.mode("overwrite").parquet(str(path))
    written = spark.read.parquet(str(path))
    by_kind = {r["m_kind"]: r["count"] for r in written.groupBy("m_kind").count().collect()}
    return written, ManifestReads(read=True, cap=cap, needed=needed, by_kind=by_kind, file=c.MANIFESTS_DIR)


def segment_anomalies(linked: Any, readings: Any | None, *, manifests_read: bool) -> Any:
    """Every segment-level anomaly of :func:`linked_segments`' rows, with the manifests' ``readings`` (None: not read,
    or none needed)."""
    F = _F()
    if readings is not None:
        linked = linked.join(readings, ["topic_id", "segment_id"], "left")
    else:
        no_reading = [F.lit(None).cast(t).alias(n) for n, t in (("m_kind", "string"), ("m_size", "bigint"))]
        linked = linked.select("*", *no_reading, F.lit(None).cast("string").alias("m_detail"))
    finished, n = F.col("finished"), F.col("n")
    no_key = F.lit(None).cast("string")

    def anomaly(kind: Any, detail: Any, key: Any = no_key, size: Any = None) -> Any:
        size = F.col("size_bytes") if size is None else size
        fields = (kind.alias("type"), key.alias("key"), size.alias("bytes"), detail.alias("detail"))
        return F.when(kind.isNotNull(), F.struct(*fields))

    copied = F.col("state").isin("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED")
    stale = F.when(copied & F.col("has_history").isNotNull() & F.col("enabled").isNull(), F.lit(c.STALE_EPOCH_COPY))
    stale_text = ", not an epoch at which the topic was ENABLED"
    stale_detail = F.concat(F.lit("copied at tiered epoch "), F.col("tiered_epoch").cast("string"), F.lit(stale_text))

    unreadable_metadata = F.when(F.col("custom_metadata_error").isNotNull(), F.lit(c.CUSTOM_METADATA_UNREADABLE))

    has_log, has_manifest = F.col("log").isNotNull(), F.col("manifest").isNotNull()
    sets = (
        F.when(finished & (n == 0), F.lit(c.MISSING_OBJECTS))
        .when(finished & has_log & ~has_manifest, F.lit(c.MANIFEST_MISSING))
        .when(finished & (n < len(_SUFFIXES)), F.lit(c.INCOMPLETE_OBJECT_SET))
    )
    sets_text = f" of {len(_SUFFIXES)} objects in the inventory; the RLMM says COPY_SEGMENT_FINISHED"
    sets_detail = F.concat(n.cast("string"), F.lit(sets_text))

    start, prev = F.col("start_offset"), F.col("prev_end")
    # Without a tiered-state history (a Kafka cluster's export) an overlap is information: KAFKA-15168.
    overlap = F.when(F.col("has_history").isNotNull(), F.lit(c.OFFSET_OVERLAP)).otherwise(
        F.lit(c.OVERLAP_AFTER_LEADER_CHANGE)
    )
    chains = F.when(finished & (start > prev + 1), F.lit(c.OFFSET_GAP)).when(finished & (start <= prev), overlap)
    chains_text = ", the previous segment of this epoch ends at "
    chains_detail = F.concat(F.lit("starts at "), start.cast("string"), F.lit(chains_text), prev.cast("string"))

    per_kind = [
        anomaly(stale, stale_detail),
        anomaly(unreadable_metadata, F.col("custom_metadata_error")),
        anomaly(sets, sets_detail),
        anomaly(chains, chains_detail),
        _size_anomaly(anomaly, manifests_read=manifests_read),
    ]
    exploded = linked.select(
        "topic", "topic_id", "partition", "segment_id", F.explode(F.array_compact(F.array(*per_kind))).alias("a")
    )
    where = ["topic", "topic_id", "partition", "segment_id"]
    return exploded.select(
        F.col("a.type").alias("type"), *where, *[F.col(f"a.{k}").alias(k) for k in ("key", "bytes", "detail")]
    )


def _size_anomaly(anomaly: Any, *, manifests_read: bool) -> Any:
    """The size rule's anomaly (size_mismatch on the .log, or manifest_unreadable on the manifest) as a struct."""
    F = _F()
    step, kind = F.col("size_step"), F.col("m_kind")
    log_size, m_size = F.col("log.size"), F.col("m_size")
    needs = step == _NEEDS_MANIFEST
    says_other = (kind == mr.LEGACY) | ((kind == mr.AIVEN) & (m_size != log_size))
    found = (
        F.when(step == c.SIZE_MISMATCH, F.lit(c.SIZE_MISMATCH))
        .when(needs & F.lit(not manifests_read), F.lit(c.SIZE_MISMATCH))
        .when(needs & (kind == mr.UNREADABLE), F.lit(c.MANIFEST_UNREADABLE))
        .when(needs & says_other, F.lit(c.SIZE_MISMATCH))
    )
    log_is = F.concat(F.lit(".log is "), log_size.cast("string"), F.lit(" bytes; "))
    detail = (
        F.when(
            step == c.SIZE_MISMATCH,
            F.concat(
                F.lit("the segment's objects add up to "),
                F.col("total_size").cast("string"),
                F.lit(" bytes; its custom metadata's REMOTE_SIZE says "),
                F.col("remote_size").cast("string"),
            ),
        )
        .when(kind == mr.UNREADABLE, F.col("m_detail"))
        .when(kind == mr.AIVEN, F.concat(log_is, F.lit("its manifest's chunk index says "), m_size.cast("string")))
        .when(
            kind == mr.LEGACY,
            F.concat(
                log_is,
                F.lit("its manifest is a legacy one (a raw .log): the RLMM says "),
                F.col("size_bytes").cast("string"),
            ),
        )
        .otherwise(
            F.concat(
                log_is, F.lit("the RLMM says "), F.col("size_bytes").cast("string"), F.lit(" (manifests not read)")
            )
        )
    )
    unreadable = found == c.MANIFEST_UNREADABLE
    key = F.when(unreadable, F.col("manifest.key")).otherwise(F.col("log.key"))
    size = F.when(unreadable, F.col("manifest.size")).otherwise(log_size)
    return anomaly(found, detail, key, size)
