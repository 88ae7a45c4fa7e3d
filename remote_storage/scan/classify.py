"""The Spark scan's per-object verdicts: retention expiry, then one category, reclaimability and object anomaly each.

The rules are the contract's (:mod:`remote_storage.scan.contract`), in its order, as :func:`policies.orphans.
classify_object` states them in plain Python. Topics are small and broadcast; segments join on (topic id, segment
id), broadcast below the job's limit (then the objects are not shuffled at all). Retention expiry is computed on the
segments with window functions, as a column of theirs, following :func:`policies.retention.plan_remote_expiry`.
"""

from __future__ import annotations

from typing import Any

from remote_storage.scan import contract as c


def _F() -> Any:
    from pyspark.sql import functions

    return functions


def with_expiry(segments: Any, topics: Any, *, now_ms: int) -> Any:
    """``segments`` with ``expired``: whether retention expires the segment now (:func:`policies.retention.
    plan_remote_expiry`). Only COPY_SEGMENT_FINISHED segments of live topics take part; the others are never expired
    and are skipped by the windows (their conditional sizes and verdicts are null, which sums and minimums ignore),
    so one window pass over all segments gives each its verdict without a join back."""
    F = _F()
    from pyspark.sql import Window

    live_topics = topics.filter(~F.col("deleted")).select(
        "topic_id",
        F.lit(True).alias("x_live"),
        F.col("retention_ms").alias("x_retention_ms"),
        F.col("retention_bytes").alias("x_retention_bytes"),
    )
    segs = segments.join(F.broadcast(live_topics), "topic_id", "left")
    taking_part = (F.col("state") == "COPY_SEGMENT_FINISHED") & F.col("x_live").isNotNull()
    size = F.when(taking_part, F.col("size_bytes"))
    part = Window.partitionBy("topic_id", "partition")
    ordered = part.orderBy("start_offset", "end_offset", "segment_id")
    before = F.coalesce(F.sum(size).over(ordered.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
    retention_ms, retention_bytes = F.col("x_retention_ms"), F.col("x_retention_bytes")
    by_ms = (retention_ms >= 0) & (F.col("max_timestamp_ms") < F.lit(now_ms) - retention_ms)
    by_bytes = (retention_bytes >= 0) & (F.sum(size).over(part) - before > retention_bytes)
    expirable = F.when(taking_part, (by_ms | by_bytes).cast("int"))
    # Oldest first, stopping at the first survivor: expired iff every segment up to this one is expirable.
    up_to_here = F.min(expirable).over(ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    expired = F.coalesce(taking_part & (up_to_here == 1), F.lit(False))
    return segs.select(*[F.col(n) for n in segments.columns], expired.alias("expired"))


def classify_objects(objects: Any, topics: Any, segments: Any, *, grace_ms: int, now_ms: int, broadcast: bool) -> Any:
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
        "expired",
    ]
    seg = with_expiry(segments, topics, now_ms=now_ms).select(*segment_columns)
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
    grace_passed = (F.col("age_ms") >= 0) & (F.col("age_ms") >= grace_ms)
    reclaimable = cat.isin(*c.RECLAIMABLE) & (cat.isin(*c.NO_GRACE) | grace_passed)
    anomaly = (
        F.when(cat == c.UNPARSEABLE, c.UNPARSEABLE_KEY)
        .when((cat == c.DISABLED_DELETE) & (state == "DISABLED"), c.DELETE_INCOMPLETE)
        .when(cat == c.RLMM_DELETED, c.DELETE_INCOMPLETE)
        .when(
            (cat == c.PENDING_DELETE) & (F.col("s_event") >= 0) & (F.lit(now_ms) - F.col("s_event") >= grace_ms),
            c.DELETE_INCOMPLETE,
        )
    )
    return df.select(
        *[F.col(name) for name, _ in c.OBJECT_COLUMNS[:10]],
        F.when(F.col("parsed"), s_state).alias("segment_state"),
        F.when(F.col("parsed"), F.col("segment_epoch")).alias("segment_epoch"),
        cat.alias("category"),
        F.coalesce(reclaimable, F.lit(False)).alias("reclaimable"),
        anomaly.alias("anomaly"),
        F.col("object_prefix"),
    )


def object_anomalies(objects: Any) -> Any:
    F = _F()
    anomaly_type = F.col("anomaly").alias("type")
    where = ["topic", "topic_id", "partition", "segment_id", "key"]
    object_bytes = F.col("size").alias("bytes")
    detail = F.concat(F.lit("object classified "), F.col("category")).alias("detail")
    return objects.filter(F.col("anomaly").isNotNull()).select(anomaly_type, *where, object_bytes, detail)
