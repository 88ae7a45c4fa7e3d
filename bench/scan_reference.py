"""The scan bench's reference: the contract's classification in DuckDB SQL, on the same files the Spark job reads.

:data:`DUCKDB_SCRIPT` states the rules of :mod:`remote_storage.scan.contract` in SQL (:mod:`policies.orphans` is their
plain-Python statement, the Spark job their production one): retention, the keys segments record, every inventory
row malformed or parsed and classified, then the objects' and the segments' anomalies. :func:`duckdb_scan` runs it
and writes what the Spark job writes: ``objects.parquet``, ``anomalies.parquet`` and a ``summary.json`` whose totals
(:func:`totals_from`) are the Spark job's, plus objects and bytes of every category and the row count.

Invariants: the SQL reads only the inventory's data files, the export and (when given) what the manifests said; it
never reads the bucket; the totals are built by the same :func:`~remote_storage.scan.summary.summarise_totals` the
Spark job's summary uses, so the two are compared field by field.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from remote_storage import export_format
from remote_storage.scan import contract as c
from remote_storage.scan.summary import summarise_totals

# The contract's rules in SQL (policies.orphans is the plain-Python statement of the same rules). Placeholders:
# {files} the inventory's Parquet data files, {topics}/{segments}/{epochs} the export; getvariable() parameters.
DUCKDB_SCRIPT = r"""
-- The export. Segments keep their file order: retention sorts by start offset only, ties in RLMM order.
CREATE TEMP VIEW topics AS SELECT * FROM read_parquet({topics});
CREATE TEMP VIEW segments AS SELECT * FROM read_parquet({segments}, file_row_number = true);
CREATE TEMP VIEW enabled_epochs AS
    SELECT DISTINCT topic_id, tiered_epoch FROM read_parquet({epochs}) WHERE state = 'ENABLED';
-- Topic ids with a tiered-state history: only they get a stale-epoch verdict (a Kafka cluster's export has none).
CREATE TEMP VIEW epoch_history AS SELECT DISTINCT topic_id FROM read_parquet({epochs});

-- Retention (policies.retention.plan_remote_expiry per topic id and partition of a live topic): oldest first, a
-- COPY_SEGMENT_FINISHED segment expires while it is past retention.ms or the partition's remaining bytes exceed
-- retention.bytes; the first survivor keeps every later segment.
CREATE TEMP TABLE expired AS
WITH finished AS (
    SELECT s.topic_id, s.partition, s.segment_id, s.start_offset, s.file_row_number, s.size_bytes,
           s.max_timestamp_ms, t.retention_ms, t.retention_bytes
    FROM segments s JOIN topics t USING (topic_id)
    WHERE NOT t.deleted AND s.state = 'COPY_SEGMENT_FINISHED'
), expirable AS (
    SELECT *,
        (retention_ms >= 0 AND max_timestamp_ms < getvariable('now_ms') - retention_ms)
        OR (retention_bytes >= 0
            AND sum(size_bytes) OVER whole
                - coalesce(sum(size_bytes) OVER (oldest_first ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                > retention_bytes) AS may_expire
    FROM finished
    WINDOW whole AS (PARTITION BY topic_id, partition),
           oldest_first AS (PARTITION BY topic_id, partition ORDER BY start_offset, file_row_number)
), run AS (
    SELECT segment_id, bool_and(may_expire) OVER (PARTITION BY topic_id, partition
        ORDER BY start_offset, file_row_number ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS expired
    FROM expirable
)
SELECT DISTINCT segment_id FROM run WHERE expired;

-- The keys segments record in their custom metadata (a prefix, a key, or both): one owner per key, the smallest
-- (topic id, segment id).
CREATE TEMP TABLE recorded AS
WITH located AS (
    SELECT topic_id, segment_id, topic, partition, start_offset,
        coalesce(object_prefix, getvariable('prefix')) AS found_under,
        coalesce(object_prefix, getvariable('prefix'))
            || coalesce(object_key, topic || '-' || topic_id || '/' || partition || '/'
                        || CASE WHEN start_offset >= 0 THEN lpad(start_offset::VARCHAR, 20, '0')
                                ELSE '-' || lpad((-start_offset)::VARCHAR, 19, '0') END
                        || '-' || segment_id) AS base
    FROM segments WHERE object_prefix IS NOT NULL OR object_key IS NOT NULL
), per_suffix AS (
    SELECT *, unnest(['log', 'indexes', 'rsm-manifest']) AS suffix FROM located
)
SELECT base || '.' || suffix AS key, topic_id, segment_id, topic, partition, start_offset, suffix, found_under
FROM per_suffix
QUALIFY row_number() OVER (PARTITION BY base || '.' || suffix ORDER BY topic_id, segment_id) = 1;

-- What the manifests the size rule needs said when read (empty when they were not read).
CREATE TEMP TABLE manifest_readings AS SELECT * FROM {manifests};

-- Every inventory row: malformed (as the inventory reader decides), or parsed and classified.
CREATE TEMP TABLE classified AS
WITH inventory AS (
    SELECT key, size, coalesce(epoch_ms(last_modified_date), -1) AS last_modified_ms,
        CASE WHEN key IS NULL OR key = '' THEN 'missing key'
             WHEN size IS NULL OR size < 0 THEN 'bad size' END AS malformed
    FROM read_parquet({files})
), matched AS (
    -- <prefix><topic>-<topicId>/<partition>/<startOffset:20>-<segmentId>.<suffix>, ids canonical (the last
    -- character's 4 spare bits are zero), ASCII digits, partition an int32 and offset an int64.
    SELECT *, starts_with(key, getvariable('prefix')) AS under_prefix,
        CASE WHEN malformed IS NULL AND starts_with(key, getvariable('prefix')) THEN regexp_extract(
            substr(key, length(getvariable('prefix')) + 1),
            '^([a-zA-Z0-9._-]+)-([A-Za-z0-9_-]{{21}}[AQgw])/(0|[1-9][0-9]*)/([0-9]{{20}})-([A-Za-z0-9_-]{{21}}[AQgw])'
            || '\.(log|indexes|rsm-manifest)$',
            ['topic', 'topic_id', 'partition', 'offset', 'segment_id', 'suffix']) END AS m
    FROM inventory
), parsed AS (
    SELECT key, size, last_modified_ms, malformed, under_prefix,
        coalesce(under_prefix AND m.topic <> '' AND length(m.topic) <= 249 AND m.topic NOT IN ('.', '..')
                 AND try_cast(m.partition AS INTEGER) IS NOT NULL AND try_cast(m.offset AS BIGINT) IS NOT NULL,
                 false) AS parsed,
        m
    FROM matched
), laid_out AS (
    SELECT key, size, last_modified_ms, malformed, under_prefix, parsed,
        CASE WHEN parsed THEN m.topic END AS topic,
        CASE WHEN parsed THEN m.topic_id END AS topic_id,
        CASE WHEN parsed THEN try_cast(m.partition AS INTEGER) END AS partition,
        CASE WHEN parsed THEN try_cast(m.offset AS BIGINT) END AS start_offset,
        CASE WHEN parsed THEN m.segment_id END AS segment_id,
        CASE WHEN parsed THEN m.suffix END AS suffix
    FROM parsed
), keyed AS (
    -- a key a segment records is that segment's object, whatever prefix it is under
    SELECT l.key, l.size, l.last_modified_ms, l.malformed,
        l.under_prefix OR (l.malformed IS NULL AND r.key IS NOT NULL) AS under_prefix,
        l.parsed OR (l.malformed IS NULL AND r.key IS NOT NULL) AS parsed,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.topic ELSE l.topic END AS topic,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.topic_id ELSE l.topic_id END AS topic_id,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.partition ELSE l.partition END AS partition,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.start_offset ELSE l.start_offset END
            AS start_offset,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.segment_id ELSE l.segment_id END AS segment_id,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.suffix ELSE l.suffix END AS suffix,
        CASE WHEN l.malformed IS NULL AND r.key IS NOT NULL THEN r.found_under
             WHEN l.parsed THEN getvariable('prefix') END AS object_prefix
    FROM laid_out l LEFT JOIN recorded r ON r.key = l.key
), joined AS (
    SELECT k.*, t.topic_id IS NOT NULL AS known, t.deleted AS t_deleted, t.state AS t_state, t.policy AS t_policy,
        s.state AS segment_state, s.tiered_epoch AS segment_epoch, s.size_bytes AS s_size,
        s.event_timestamp_ms AS s_event, e.segment_id IS NOT NULL AS expired
    FROM keyed k
    LEFT JOIN topics t ON t.topic_id = k.topic_id
    LEFT JOIN segments s ON s.topic_id = k.topic_id AND s.segment_id = k.segment_id
    LEFT JOIN expired e ON e.segment_id = k.segment_id  -- by segment id alone, as policies.orphans looks it up
), categorised AS (
    SELECT *,
        CASE WHEN malformed IS NOT NULL THEN NULL
             WHEN NOT under_prefix THEN 'outside_prefix'
             WHEN NOT parsed THEN 'unparseable'
             WHEN NOT known THEN 'unknown_topic'
             WHEN t_deleted THEN 'deleted_topic'
             WHEN t_state IN ('DISABLING', 'DISABLED') AND t_policy = 'DELETE' THEN 'disabled_delete'
             WHEN segment_state IS NULL THEN 'no_rlmm_entry'
             WHEN segment_state = 'DELETE_SEGMENT_FINISHED' THEN 'rlmm_deleted'
             WHEN segment_state = 'DELETE_SEGMENT_STARTED' THEN 'pending_delete'
             WHEN segment_state = 'COPY_SEGMENT_STARTED' THEN 'copy_unfinished'
             WHEN expired THEN 'past_retention'
             ELSE 'live' END AS category,
        CASE WHEN last_modified_ms >= 0 THEN getvariable('now_ms') - last_modified_ms ELSE -1 END AS age_ms
    FROM joined
)
SELECT key, size, last_modified_ms, age_ms, topic, topic_id, partition, start_offset, segment_id, suffix,
    segment_state, segment_epoch, category,
    coalesce(category IN ({reclaimable}) AND (category IN ({no_grace}) OR age_ms >= getvariable('grace_ms')),
             false) AS reclaimable,
    CASE WHEN category = 'unparseable' THEN 'unparseable_key'
         WHEN category = 'disabled_delete' AND t_state = 'DISABLED' THEN 'delete_incomplete'
         WHEN category = 'rlmm_deleted' THEN 'delete_incomplete'
         WHEN category = 'pending_delete' AND s_event >= 0
              AND getvariable('now_ms') - s_event >= getvariable('grace_ms') THEN 'delete_incomplete'
         END AS anomaly,
    object_prefix,
    malformed
FROM categorised;

-- Anomalies: the objects' own, then the segments' (missing or incomplete object sets, offset gaps and overlaps
-- within a (topic id, partition, tiered epoch) chain, copies at an epoch the topic was not ENABLED at).
CREATE TEMP TABLE anomalies AS
WITH known_segments AS (
    SELECT s.*, t.deleted AS t_deleted,
           t.state IN ('DISABLING', 'DISABLED') AND t.policy = 'DELETE' AS t_deletes_all
    FROM segments s JOIN topics t USING (topic_id)
), stale AS (
    SELECT k.* FROM known_segments k
    WHERE k.state IN ('COPY_SEGMENT_STARTED', 'COPY_SEGMENT_FINISHED')
      AND EXISTS (SELECT 1 FROM epoch_history h WHERE h.topic_id = k.topic_id)
      AND NOT EXISTS (SELECT 1 FROM enabled_epochs e WHERE e.topic_id = k.topic_id AND e.tiered_epoch = k.tiered_epoch)
), finished AS (
    SELECT * FROM known_segments WHERE NOT t_deleted AND state = 'COPY_SEGMENT_FINISHED'
), present AS (
    -- what the inventory holds of each segment: its suffixes, all its bytes, its .log and manifest (smallest key)
    SELECT topic_id, segment_id, count(DISTINCT suffix) AS n, sum(size) AS total_size,
           min(key) FILTER (WHERE suffix = 'log') AS log_key,
           arg_min(size, key) FILTER (WHERE suffix = 'log') AS log_size,
           min(key) FILTER (WHERE suffix = 'rsm-manifest') AS manifest_key,
           arg_min(size, key) FILTER (WHERE suffix = 'rsm-manifest') AS manifest_size
    FROM classified WHERE topic_id IS NOT NULL GROUP BY topic_id, segment_id
), object_sets AS (
    SELECT f.*, coalesce(p.n, 0) AS n, p.log_key, p.manifest_key
    FROM finished f LEFT JOIN present p USING (topic_id, segment_id)
    WHERE coalesce(p.n, 0) < 3
), chained AS (
    SELECT *, lag(end_offset) OVER (PARTITION BY topic_id, partition, tiered_epoch
                                    ORDER BY start_offset, end_offset, segment_id) AS prev_end
    FROM finished
), sized AS (
    -- the size rule (remote_storage.scan.contract): REMOTE_SIZE, else the RLMM's size, else the manifest
    SELECT f.*, p.n, p.total_size, p.log_key, p.log_size, p.manifest_key, p.manifest_size, r.m_kind, r.m_size,
        r.m_detail,
        CASE WHEN f.remote_size IS NOT NULL
                  THEN CASE WHEN p.n = 3 AND p.total_size <> f.remote_size THEN 'size_mismatch' END
             WHEN p.log_size = f.size_bytes THEN NULL
             WHEN p.manifest_key IS NOT NULL THEN 'needs_manifest' END AS step
    FROM finished f JOIN present p USING (topic_id, segment_id)
    LEFT JOIN manifest_readings r USING (topic_id, segment_id)
    WHERE NOT f.t_deletes_all AND p.log_key IS NOT NULL
), judged AS (
    SELECT *,
        CASE WHEN step = 'size_mismatch' THEN 'size_mismatch'
             WHEN step = 'needs_manifest' AND NOT getvariable('manifests_read') THEN 'size_mismatch'
             WHEN step = 'needs_manifest' AND m_kind = 'unreadable' THEN 'manifest_unreadable'
             WHEN step = 'needs_manifest' AND (m_kind = 'legacy' OR (m_kind = 'aiven' AND m_size <> log_size))
                  THEN 'size_mismatch' END AS found
    FROM sized
)
SELECT anomaly AS type, topic, topic_id, partition, segment_id, key, size AS bytes,
       'object classified ' || category AS detail
FROM classified WHERE anomaly IS NOT NULL
UNION ALL
SELECT 'stale_epoch_copy', topic, topic_id, partition, segment_id, NULL, size_bytes,
       'copied at tiered epoch ' || tiered_epoch || ', not an epoch at which the topic was ENABLED'
FROM stale
UNION ALL
SELECT 'custom_metadata_unreadable', topic, topic_id, partition, segment_id, NULL, size_bytes, custom_metadata_error
FROM known_segments WHERE custom_metadata_error IS NOT NULL
UNION ALL
SELECT CASE WHEN n = 0 THEN 'missing_objects'
            WHEN log_key IS NOT NULL AND manifest_key IS NULL THEN 'manifest_missing'
            ELSE 'incomplete_object_set' END, topic, topic_id, partition,
       segment_id, NULL, size_bytes, n || ' of 3 objects in the inventory; the RLMM says COPY_SEGMENT_FINISHED'
FROM object_sets
UNION ALL
SELECT CASE WHEN start_offset > prev_end + 1 THEN 'offset_gap'
            WHEN EXISTS (SELECT 1 FROM epoch_history h WHERE h.topic_id = chained.topic_id) THEN 'offset_overlap'
            ELSE 'overlap_after_leader_change' END, topic, topic_id,
       partition, segment_id, NULL, size_bytes,
       'starts at ' || start_offset || ', the previous segment of this epoch ends at ' || prev_end
FROM chained WHERE start_offset > prev_end + 1 OR start_offset <= prev_end
UNION ALL
SELECT found, topic, topic_id, partition, segment_id,
       CASE WHEN found = 'manifest_unreadable' THEN manifest_key ELSE log_key END,
       CASE WHEN found = 'manifest_unreadable' THEN manifest_size ELSE log_size END,
       coalesce(m_detail, '.log is ' || log_size || ' bytes')
FROM judged WHERE found IS NOT NULL;

COPY (SELECT * EXCLUDE (malformed) FROM classified WHERE malformed IS NULL) TO {objects_out} (FORMAT PARQUET);
COPY anomalies TO {anomalies_out} (FORMAT PARQUET);
"""

# The aggregates the summary is made of (as the Spark job collects them).
_AGGREGATE_SQL = {
    "by_category": """
        SELECT category, reclaimable, count(*) AS objects, coalesce(sum(size), 0)::BIGINT AS bytes
        FROM classified WHERE malformed IS NULL GROUP BY ALL""",
    "by_topic": """
        SELECT topic_id, any_value(topic) AS topic, category, reclaimable, count(*) AS objects,
               coalesce(sum(size), 0)::BIGINT AS bytes
        FROM classified WHERE malformed IS NULL AND topic_id IS NOT NULL GROUP BY topic_id, category, reclaimable""",
    "anomalies_by_topic": "SELECT topic_id, type, count(*) AS count FROM anomalies GROUP BY ALL",
    "malformed": "SELECT malformed, count(*) AS count FROM classified WHERE malformed IS NOT NULL GROUP BY ALL",
}


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_list(values: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    return ", ".join(_sql_str(v) for v in sorted(values))


def totals_from(
    by_category: list[dict[str, Any]], anomalies_by_topic: list[dict[str, Any]], malformed: dict[str, int]
) -> dict[str, Any]:
    """The summary's ``totals`` (:func:`remote_storage.scan.summary.summarise_totals`), plus objects and bytes of
    every category and the row count, which the bench compares too."""
    totals = summarise_totals(by_category, anomalies_by_topic, malformed)
    totals["objects_by_category"] = {n: 0 for n in c.CATEGORIES}
    totals["bytes_by_category"] = {n: 0 for n in c.CATEGORIES}
    for r in by_category:
        totals["objects_by_category"][r["category"]] += r["objects"]
        totals["bytes_by_category"][r["category"]] += r["bytes"]
    totals["rows"] = totals["objects"] + sum(malformed.values())
    return totals


_NO_READINGS = (
    "(SELECT NULL::VARCHAR AS topic_id, NULL::VARCHAR AS segment_id, NULL::VARCHAR AS m_kind, "
    "NULL::BIGINT AS m_size, NULL::VARCHAR AS m_detail WHERE false)"
)


def duckdb_scan(
    files: list[str],
    export_dir: Path,
    out_dir: Path,
    *,
    prefix: str,
    now_ms: int,
    grace_ms: int,
    threads: int,
    manifests: Path | None = None,
) -> dict[str, Any]:
    """Run :data:`DUCKDB_SCRIPT` and write ``objects.parquet``, ``anomalies.parquet`` and ``summary.json``.

    ``manifests``: what the manifests the size rule needs said (``Dataset.manifests_file``), as if read; None:
    manifests are not read (the Spark job without access to a bucket)."""
    import duckdb

    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute("SET VARIABLE prefix = ?", [prefix])
    con.execute("SET VARIABLE now_ms = ?::BIGINT", [now_ms])
    con.execute("SET VARIABLE grace_ms = ?::BIGINT", [grace_ms])
    con.execute("SET VARIABLE manifests_read = ?::BOOLEAN", [manifests is not None])
    script = DUCKDB_SCRIPT.format(
        manifests=_NO_READINGS if manifests is None else f"read_parquet({_sql_str(str(manifests))})",
        files="[" + _sql_list(files) + "]",
        topics=_sql_str(str(export_dir / export_format.TOPICS_FILE)),
        segments=_sql_str(str(export_dir / export_format.SEGMENTS_FILE)),
        epochs=_sql_str(str(export_dir / export_format.EPOCHS_FILE)),
        reclaimable=_sql_list(c.RECLAIMABLE),
        no_grace=_sql_list(c.NO_GRACE),
        objects_out=_sql_str(str(out_dir / c.OBJECTS_DIR)),
        anomalies_out=_sql_str(str(out_dir / c.ANOMALIES_DIR)),
    )
    seconds: dict[str, float] = {}
    for statement in (s.strip() for s in script.split(";\n")):
        if statement:
            t0 = time.perf_counter()
            con.execute(statement)
            first = next(line for line in statement.splitlines() if not line.lstrip().startswith("--"))
            label = " ".join(w for w in first.split()[:4] if "'" not in w)
            seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t0
    t0 = time.perf_counter()

    def rows(sql: str) -> list[dict[str, Any]]:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    agg = {name: rows(sql) for name, sql in _AGGREGATE_SQL.items()}
    malformed = {r["malformed"]: r["count"] for r in agg["malformed"]}
    inventory_rows = sum(r["objects"] for r in agg["by_category"]) + sum(malformed.values())
    malformed_rows = {"total": sum(malformed.values()), "by_reason": malformed}
    summary = {
        "inventory": {"rows": inventory_rows, "malformed_rows": malformed_rows},
        "parameters": {"prefix": prefix, "grace_ms": grace_ms, "now_ms": now_ms},
        "totals": totals_from(agg["by_category"], agg["anomalies_by_topic"], malformed),
        "topics": agg["by_topic"],
        "anomalies_by_topic": agg["anomalies_by_topic"],
    }
    (out_dir / c.SUMMARY_FILE).write_text(json.dumps(summary, indent=1, default=str) + "\n")
    seconds["aggregates and summary.json"] = time.perf_counter() - t0
    con.close()
    summary["seconds"] = seconds
    return summary
