"""The scan bench's data: a generated S3 Inventory of exactly N rows and the metadata export it is scanned against.

:func:`generate` writes, under a directory, an S3 Inventory (Parquet data files of :data:`ROWS_PER_FILE` rows in the
AWS Parquet inventory schema, a manifest with MD5s and a fixed ``creationTimestamp``, :data:`NOW_MS`) and a metadata
export (topics/segments/epochs Parquet) for ~200 topics: mostly live segment triples, plus every category and
anomaly of :mod:`remote_storage.scan.contract` in realistic fractions (``rare`` scales them), and, on request, keys
at the edges of the key layout. DuckDB builds the segments and their objects in SQL (:data:`_SEGMENTS_SQL` and the
queries after it).

Invariants: the inventory holds exactly ``rows`` rows (asserted); the rows depend only on the arguments (DuckDB
hashes of row numbers, no random state); the export holds only the segments whose objects were kept, in segment
order; ``manifests.parquet`` says what the executors would read in the manifests the size rule needs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.metadata.topic_configs import default_int
from remote_storage import export_format
from remote_storage.inventory import parquet_schema
from remote_storage.scan import contract as c

PREFIX = "tiered/"
OTHER_PREFIX = "custom/"  # the prefix some generated segments record in their custom metadata
BUCKET = "bench-tiered-storage"
NOW_MS = 1_767_225_600_000  # the inventory's creationTimestamp: "now" for every age decision
GRACE_MS = c.DEFAULT_GRACE_MS
DAY_MS = 24 * 3600 * 1000
ROWS_PER_FILE = 1_000_000
DEFAULT_ROWS = 10_000_000  # the generator's default

# Topic kinds by index modulo 20 (the rest are plain ENABLED topics with 7-day retention).
DELETED, DISABLED_DELETE, DISABLING_DELETE, DISABLED_RETAIN, REENABLED, SHORT_MS, BY_BYTES, FOREVER = range(8)
SEGMENT_BYTES_MEAN = 5_500_000


@dataclass(frozen=True)
class Dataset:
    root: Path
    inventory_dir: Path
    export_dir: Path
    data_files: tuple[Path, ...]
    rows: int
    segments: int
    seconds: float
    manifests_file: Path  # what the manifests the size rule needs say, as if the executors had read them


def _uid(seed: str) -> str:
    """A canonical 22-character KIP-516 id from 16 bytes of MD5 (the same construction as the SQL ``uid`` macro)."""
    return base64.urlsafe_b64encode(hashlib.md5(seed.encode(), usedforsecurity=False).digest()).decode().rstrip("=")


def _topics(n_topics: int, n_unknown: int, partitions: int, segs_per_partition: float) -> list[dict[str, Any]]:
    """The topic side of the generated cluster: ``n_topics`` in the export, ``n_unknown`` ids it never saw."""
    out: list[dict[str, Any]] = []
    for i in range(n_topics + n_unknown):
        kind = i % 20 if i < n_topics else -1
        name_of = i + 8 if kind == DELETED else i  # a deleted id's name is re-used by a live topic (KIP-516)
        t: dict[str, Any] = {
            "ti": i,
            "topic_id": _uid(f"topic:{i}"),
            "name": f"app{name_of % 7}.events-{name_of:03d}",
            "kind": kind,
            "in_export": i < n_topics,
            "has_rlmm": i < n_topics or i % 2 == 0,  # half of the unknown ids still have RLMM segments
            "state": "ENABLED",
            "tiered_epoch": 1,
            "policy": "NONE",
            "retention_ms": default_int("retention.ms"),
            "retention_bytes": -1,
            "deleted": kind == DELETED,
            "span_ms": 6 * DAY_MS,  # from the oldest segment's max timestamp to the newest's
            "epochs": [(1, "ENABLED")],
        }
        if kind in (DISABLED_DELETE, DISABLING_DELETE, DISABLED_RETAIN):
            t["state"] = "DISABLING" if kind == DISABLING_DELETE else "DISABLED"
            t["policy"] = "RETAIN" if kind == DISABLED_RETAIN else "DELETE"
            t["tiered_epoch"] = 2
            t["epochs"] = [(1, "ENABLED"), (2, "DISABLING")] + ([] if kind == DISABLING_DELETE else [(2, "DISABLED")])
        elif kind == REENABLED:
            t["tiered_epoch"] = 3
            t["epochs"] = [(1, "ENABLED"), (2, "DISABLING"), (2, "DISABLED"), (3, "ENABLED")]
        elif kind == SHORT_MS:
            t["retention_ms"], t["span_ms"] = 3 * DAY_MS, 4 * DAY_MS
        elif kind == BY_BYTES:
            t["retention_bytes"] = int(0.85 * segs_per_partition * SEGMENT_BYTES_MEAN)
        elif kind == FOREVER:
            t["retention_ms"], t["span_ms"] = -1, 30 * DAY_MS
        out.append(t)
    return out


# Per segment: `u` (a uniform draw in [0, 1)) decides the fate of a COPY_SEGMENT_FINISHED segment; the state comes
# from the segment's position in its partition (deletes at the oldest end, unfinished copies at the newest).
_SEGMENTS_SQL = """
CREATE OR REPLACE MACRO uid(s) AS replace(replace(rtrim(to_base64(unhex(md5(s))), '='), '+', '-'), '/', '_');
CREATE OR REPLACE TEMP TABLE seg AS
WITH base AS (
    SELECT g, g % {np} AS gp, g // {np} AS j,
           (hash(g) % 1000000)::BIGINT / 1e6 AS u,
           (hash(g, 'b') % 1000000000)::BIGINT AS h,
           (hash(g % {np}, 'partition') % 1000000)::BIGINT AS hp
    FROM range({s_max}) r(g)
), placed AS (
    SELECT b.*, t.*, b.gp % {partitions} AS partition,
           {s_max} // {np} + CASE WHEN b.gp < {s_max} % {np} THEN 1 ELSE 0 END AS m
    FROM base b JOIN topic_meta t ON t.ti = b.gp // {partitions}
), stated AS (
    SELECT *,
        CASE WHEN j < hp % 4 THEN 'DELETE_SEGMENT_FINISHED'
             WHEN j < hp % 4 + (hp // 4) % 3 THEN 'DELETE_SEGMENT_STARTED'
             WHEN j >= m - (hp // 16) % 3 THEN 'COPY_SEGMENT_STARTED'
             ELSE 'COPY_SEGMENT_FINISHED' END AS state,
        CASE WHEN u < 0.002 * {rare} THEN 'missing'
             WHEN u < 0.0035 * {rare} THEN 'drop_one'
             WHEN u < 0.005 * {rare} THEN 'keep_one'
             WHEN u < 0.007 * {rare} THEN 'size_mismatch'
             WHEN u < 0.009 * {rare} THEN 'orphan_copy'
             WHEN u < 0.0095 * {rare} THEN 'not_in_rlmm'
             WHEN u < 0.0105 * {rare} AND j > 0 THEN 'gap'
             WHEN u < 0.0115 * {rare} AND j > 0 THEN 'overlap'
             WHEN u < 0.0315 * {rare} AND kind = {reenabled} THEN 'stale_epoch'
             -- Aiven's format: a compressed .log (its manifest read, or its size in custom metadata), ours from
             -- before it, an unreadable manifest, objects recorded under another prefix or key, bad custom metadata
             WHEN u >= 0.0315 * {rare} AND u < 0.034 * {rare} THEN 'compressed'
             WHEN u >= 0.0315 * {rare} AND u < 0.035 * {rare} THEN 'compressed_truncated'
             WHEN u >= 0.0315 * {rare} AND u < 0.036 * {rare} THEN 'legacy_wrong'
             WHEN u >= 0.0315 * {rare} AND u < 0.0365 * {rare} THEN 'unreadable_manifest'
             WHEN u >= 0.0315 * {rare} AND u < 0.039 * {rare} THEN 'remote_size_ok'
             WHEN u >= 0.0315 * {rare} AND u < 0.0395 * {rare} THEN 'remote_size_wrong'
             WHEN u >= 0.0315 * {rare} AND u < 0.041 * {rare} THEN 'other_prefix'
             WHEN u >= 0.0315 * {rare} AND u < 0.0415 * {rare} THEN 'explicit_key'
             WHEN u >= 0.0315 * {rare} AND u < 0.042 * {rare} THEN 'bad_custom_metadata'
             ELSE 'ok' END AS fate
    FROM placed
), timed AS (
    SELECT *,
        {now} - 60000 - (span_ms * (m - 1 - j)) // greatest(m - 1, 1) AS max_ts,
        1000000 + h % 9000000 AS size_bytes
    FROM stated
)
SELECT g, ti, kind, has_rlmm, topic_id, name AS topic, partition::INTEGER AS partition, j, m, fate, h,
    uid('segment:' || g) AS segment_id,
    uid('orphan:' || g) AS orphan_id,
    100 + j * 1000 + CASE WHEN state = 'COPY_SEGMENT_FINISHED' AND fate = 'gap' THEN 37
                          WHEN state = 'COPY_SEGMENT_FINISHED' AND fate = 'overlap' THEN -37 ELSE 0 END AS start_offset,
    100 + j * 1000 + 999 AS end_offset,
    size_bytes,
    (CASE WHEN kind = {reenabled} AND state = 'COPY_SEGMENT_FINISHED' AND fate = 'stale_epoch' THEN 2
          WHEN kind = {reenabled} AND j >= m // 2 THEN 3 ELSE 1 END)::INTEGER AS tiered_epoch,
    state,
    max_ts AS max_timestamp_ms,
    CASE WHEN state = 'DELETE_SEGMENT_STARTED' AND h % 2 = 0 THEN {now} - {grace} - 3600000
         WHEN state = 'DELETE_SEGMENT_STARTED' THEN {now} - 600000
         WHEN state = 'DELETE_SEGMENT_FINISHED' THEN {now} - 2 * {grace}
         ELSE max_ts + 30000 END AS event_timestamp_ms,
    CASE WHEN state = 'COPY_SEGMENT_STARTED' AND h % 2 = 0 THEN {now} - {grace} - 86400000  -- a stuck upload
         ELSE max_ts + h % 50000 END AS last_modified_ms,
    -- suffixes present in the bucket (0 log, 1 indexes, 2 rsm-manifest)
    CASE WHEN state = 'DELETE_SEGMENT_FINISHED' THEN CASE WHEN h % 2 = 0 THEN [0, 1, 2] ELSE [] END
         WHEN state = 'DELETE_SEGMENT_STARTED' THEN CASE WHEN h % 4 = 0 THEN [1, 2] ELSE [0, 1, 2] END
         WHEN state = 'COPY_SEGMENT_STARTED' THEN CASE WHEN h % 3 = 0 THEN [0] ELSE [0, 1, 2] END
         WHEN fate = 'missing' THEN []
         WHEN fate = 'drop_one' THEN CASE h % 3 WHEN 0 THEN [1, 2] WHEN 1 THEN [0, 2] ELSE [0, 1] END
         WHEN fate = 'keep_one' THEN [(h % 3)::INTEGER]
         ELSE [0, 1, 2] END AS present,
    CASE WHEN state = 'COPY_SEGMENT_FINISHED' AND fate = 'orphan_copy'
         THEN CASE WHEN h % 2 = 0 THEN [0, 1, 2] ELSE [0] END ELSE [] END AS orphans,
    has_rlmm AND NOT (state = 'COPY_SEGMENT_FINISHED' AND fate = 'not_in_rlmm') AS exported,
    -- the .log as stored (compressed: 60%), and the custom metadata the COPY_SEGMENT_FINISHED record carried
    CASE WHEN fate IN ('compressed', 'compressed_truncated', 'remote_size_ok', 'remote_size_wrong')
         THEN size_bytes * 6 // 10 ELSE size_bytes END AS stored_log,
    CASE WHEN fate IN ('remote_size_ok', 'remote_size_wrong')
         THEN size_bytes * 6 // 10 + 4096 + h % 20000 + 300 + h % 200 + CASE WHEN fate = 'remote_size_wrong' THEN 1
                                                                          ELSE 0 END END::BIGINT AS remote_size,
    CASE WHEN fate = 'other_prefix' THEN '{other_prefix}' END AS object_prefix,
    CASE WHEN fate = 'explicit_key' THEN 'keyed/' || uid('segment:' || g) END AS object_key,
    CASE WHEN fate = 'bad_custom_metadata' THEN 'custom metadata: truncated the field count' END
        AS custom_metadata_error
FROM timed
"""

# What the scan's executors would read in the manifests of the generated segments that need one (check only).
_MANIFESTS_SQL = """
SELECT topic_id, segment_id,
    CASE WHEN fate IN ('compressed', 'compressed_truncated') THEN 'aiven'
         WHEN fate = 'legacy_wrong' THEN 'legacy' ELSE 'unreadable' END AS m_kind,
    CASE WHEN fate = 'compressed' THEN stored_log WHEN fate = 'compressed_truncated' THEN stored_log + 7 END::BIGINT
        AS m_size,
    CASE WHEN fate = 'unreadable_manifest' THEN 'manifest is not JSON' END AS m_detail
FROM seg WHERE g < {cut} AND exported AND fate IN ('compressed', 'compressed_truncated', 'legacy_wrong',
                                                   'unreadable_manifest')
"""

# The objects of the kept segments (and their orphaned duplicate uploads), in segment order.
_SEGMENT_OBJECTS_SQL = """
WITH kept AS (SELECT * FROM seg WHERE g < {cut}),
objs AS (
    SELECT g, 0 AS dup, topic, topic_id, partition, start_offset, segment_id AS sid, unnest(present) AS sfx,
           size_bytes, stored_log, fate, h, last_modified_ms, object_prefix, object_key
    FROM kept
    UNION ALL
    SELECT g, 1, topic, topic_id, partition, start_offset, orphan_id, unnest(orphans), size_bytes, size_bytes,
           fate, h, last_modified_ms - 3600000, NULL, NULL
    FROM kept WHERE len(orphans) > 0
)
SELECT '{bucket}' AS bucket,
    coalesce(object_prefix, '{prefix}')
        || coalesce(object_key, topic || '-' || topic_id || '/' || partition || '/'
                                || lpad(start_offset::VARCHAR, 20, '0') || '-' || sid)
        || '.' || ['log', 'indexes', 'rsm-manifest'][sfx + 1] AS key,
    CASE WHEN sfx = 0 AND dup = 0 AND fate = 'size_mismatch'
             THEN CASE WHEN h % 2 = 0 THEN size_bytes + 1 + h % 1000 ELSE size_bytes // 2 END
         WHEN sfx = 0 AND dup = 0 AND fate = 'legacy_wrong' THEN size_bytes - 1
         WHEN sfx = 0 AND dup = 0 AND fate = 'unreadable_manifest' THEN size_bytes // 3
         WHEN sfx = 0 THEN stored_log
         WHEN sfx = 1 THEN 4096 + h % 20000
         ELSE 300 + h % 200 END AS size,
    epoch_ms(last_modified_ms) AS last_modified_date,
    lpad(to_hex(h), 32, '0') AS e_tag
FROM objs
"""

# Keys that are not the layout's: under the prefix (unparseable) and outside it; and malformed inventory rows.
_EXTRA_OBJECTS_SQL = """
WITH src AS (
    SELECT r, s.topic, s.topic_id, s.partition, s.start_offset, s.segment_id, s.last_modified_ms,
           '{prefix}' || s.topic || '-' || s.topic_id AS tp, lpad(s.start_offset::VARCHAR, 20, '0') AS off
    FROM range({unparseable}) x(r) JOIN seg s ON s.g = (r * 7919) % {cut}
), unparseable AS (
    SELECT r, last_modified_ms, CASE r % 12
        WHEN 0 THEN tp || '/' || partition || '/' || off || '-' || segment_id || '.tmp'
        WHEN 1 THEN tp || '/' || partition || '/' || off || '-' || segment_id || '.log.bak-' || r
        WHEN 2 THEN tp || '/0' || partition || '/' || off || '-' || segment_id || '.log'
        WHEN 3 THEN tp || '/' || partition || '/' || substr(off, 2) || '-' || segment_id || '.indexes'
        WHEN 4 THEN '{prefix}' || topic || '-' || substr(topic_id, 1, 21) || 'B/' || partition || '/' || off || '-'
                    || segment_id || '.log'
        WHEN 5 THEN '{prefix}' || topic || '/' || partition || '/' || off || '-' || segment_id || '.log'
        WHEN 6 THEN tp || '/' || partition || '/' || off || '-' || segment_id || '.log/part-' || r
        WHEN 7 THEN '{prefix}_tmp/upload-' || r
        WHEN 8 THEN tp || '/' || partition || '/' || off || '-' || substr(segment_id, 1, 21) || 'C.rsm-manifest'
        WHEN 9 THEN '{prefix}' || topic || '!-' || topic_id || '/' || partition || '/' || off || '-' || segment_id
                    || '.log'
        WHEN 10 THEN tp || '/2147483648/' || off || '-' || segment_id || '.log'
        ELSE tp || '/' || partition || '/99999999999999999999-' || segment_id || '.log' END AS key
    FROM src
), outside AS (
    SELECT r, CASE r % 4
        WHEN 0 THEN 'other-service/part-' || lpad(r::VARCHAR, 8, '0') || '.json'
        WHEN 1 THEN '{prefix_no_slash}-archive/' || r || '.tar'
        WHEN 2 THEN upper('{prefix}') || 'copy/' || r
        ELSE '_checkpoints/{prefix}' || r END AS key
    FROM range({outside}) x(r)
), malformed AS (
    SELECT r, CASE WHEN r % 3 = 0 THEN '' ELSE 'other-service/bad-' || r END AS key,
           CASE r % 3 WHEN 1 THEN NULL WHEN 2 THEN -5 ELSE 10 END AS size
    FROM range({malformed}) x(r)
)
SELECT '{bucket}' AS bucket, key, 100 + r % 5000 AS size, epoch_ms(last_modified_ms) AS last_modified_date,
       lpad(to_hex(r), 32, '0') AS e_tag FROM unparseable
UNION ALL
SELECT '{bucket}', key, 1000 + r, epoch_ms({now} - r * 1000), lpad(to_hex(r), 32, '0') FROM outside
UNION ALL
SELECT '{bucket}', key, size, epoch_ms({now} - 5 * {day}), '' FROM malformed
"""


def _edge_rows(con: Any) -> list[dict[str, Any]]:
    """Keys at the edges of the layout, each built from a real segment so a wrong parse changes its category."""
    live = con.execute(
        "SELECT topic, topic_id, partition, start_offset, segment_id, size_bytes FROM seg "
        "WHERE kind >= 8 AND state = 'COPY_SEGMENT_FINISHED' AND fate = 'ok' AND exported ORDER BY g LIMIT 40"
    ).fetchall()
    rows: list[dict[str, Any]] = []

    def add(key: str, size: int = 1234, lm: int | None = NOW_MS - 10 * DAY_MS) -> None:
        rows.append({"key": key, "size": size, "lm": lm})

    for n, (topic, tid, part, start, sid, size) in enumerate(live):
        tp, off = f"{PREFIX}{topic}-{tid}", f"{start:020d}"
        good = f"{tp}/{part}/{off}-{sid}"
        variants = [
            f"{PREFIX}{topic}\n-{tid}/{part}/{off}-{sid}.log",  # newline at the end of the topic name
            f"{tp}/{part}\n/{off}-{sid}.log",  # newline after the partition
            f"{tp}/{part} /{off}-{sid}.log",  # space after the partition
            f"{tp}/+{part}/{off}-{sid}.log",
            f"{tp}/\u0663/{off}-{sid}.log",  # an Arabic-Indic digit as the partition
            f"{tp}/{part}/{off}-{sid}.log\n",
            f"{tp}/{part}/{off}-{sid}.LOG",
            f"{PREFIX}{topic}\u00e9-{tid}/{part}/{off}-{sid}.log",
            f"{tp}/{part}/{off[:-1]}\u0663-{sid}.log",
            f"{tp}//{part}/{off}-{sid}.log",
            f"{good}.log ",
            f"{PREFIX}{PREFIX}{topic}-{tid}/{part}/{off}-{sid}.log",
        ]
        if n < len(variants):
            add(variants[n], size)
        elif n == len(variants):
            add(f"{tp}/{part}/{off}-{_uid('edge-no-lm')}.log", size, None)  # no RLMM entry, age unknown
        elif n == len(variants) + 1:
            add(f"{tp}/2147483647/{off}-{sid}.log", size)  # the largest int32 partition: parses
        elif n == len(variants) + 2:
            add(f"{tp}/{part}/09223372036854775807-{sid}.log", size)  # the largest int64 offset: parses
        elif n == len(variants) + 3:
            add(f"{tp}/{part}/09223372036854775808-{sid}.log", size)
    tid = _uid("edge-topic")
    for name in (".", "..", "...", "a" * 249, "a" * 250, "x-" + "-" * 10):
        add(f"{PREFIX}{name}-{tid}/0/{0:020d}-{_uid('edge:' + name)}.log")
    add(PREFIX)
    add(PREFIX + "/")
    add(f"{PREFIX}t-{tid}/0/{0:020d}-{_uid('edge-future')}.log", 10, NOW_MS + DAY_MS)  # clock skew: negative age
    return rows


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _DataFiles:
    """Inventory data files of :data:`ROWS_PER_FILE` rows each, in the AWS Parquet inventory schema."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.schema = parquet_schema()
        self.files: list[Path] = []
        self._writer: Any = None
        self._rows = 0

    def write(self, table: Any) -> None:
        import pyarrow.parquet as pq

        table = table.cast(self.schema)
        offset = 0
        while offset < table.num_rows:
            if self._writer is None:
                self.files.append(self.directory / f"part-{len(self.files):05d}.parquet")
                self._writer = pq.ParquetWriter(self.files[-1], self.schema)
                self._rows = 0
            take = min(ROWS_PER_FILE - self._rows, table.num_rows - offset)
            self._writer.write_table(table.slice(offset, take), row_group_size=256 * 1024)
            self._rows += take
            offset += take
            if self._rows >= ROWS_PER_FILE:
                self._writer.close()
                self._writer = None

    def close(self) -> list[Path]:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.files


def generate(
    root: Path,
    rows: int = DEFAULT_ROWS,
    *,
    topics: int = 200,
    partitions: int = 12,
    rare: float = 1.0,
    edge_cases: bool = False,
) -> Dataset:
    """Write an inventory of exactly ``rows`` rows and its metadata export under ``root``."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    t_start = time.perf_counter()
    inv_dir, export_dir = root / "inventory", root / "export"
    (inv_dir / "data").mkdir(parents=True, exist_ok=True)
    export_dir.mkdir(parents=True, exist_ok=True)
    n_unknown = max(2, topics // 40)
    np_ = (topics + n_unknown) * partitions
    n_unparseable = max(24, round(rows * 0.0005 * rare))
    n_outside = max(8, round(rows * 0.003 * rare))
    n_malformed = max(3, round(rows * 0.00001 * rare))
    extras = n_unparseable + n_outside + n_malformed
    meta: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 2}")
    topic_cols = ["ti", "topic_id", "name", "kind", "has_rlmm", "span_ms"]
    # Size the segments to the rows: a first guess, then once more with the objects-per-segment ratio it showed.
    s_max = int((rows - extras) / 2.9) + 1
    for attempt in range(2):
        meta = _topics(topics, n_unknown, partitions, s_max / np_)
        con.register("topic_meta_arrow", pa.Table.from_pylist([{k: t[k] for k in topic_cols} for t in meta]))
        con.execute("CREATE OR REPLACE TEMP TABLE topic_meta AS SELECT * FROM topic_meta_arrow")
        params = {
            "np": np_,
            "s_max": s_max,
            "partitions": partitions,
            "rare": rare,
            "reenabled": REENABLED,
            "now": NOW_MS,
            "grace": GRACE_MS,
            "other_prefix": OTHER_PREFIX,
        }
        con.execute(_SEGMENTS_SQL.format(**params))
        edges = _edge_rows(con) if edge_cases else []
        (objects,) = con.execute("SELECT sum(len(present) + len(orphans)) FROM seg").fetchall()[0]
        if attempt == 0:
            s_max = max(1, int(s_max * (rows - extras - len(edges)) / max(int(objects), 1) * 0.999))
    # Keep whole segments, in order, while their objects fit; pad the rest with keys outside the prefix.
    need = rows - extras - len(edges)
    (cut,) = con.execute(
        "SELECT coalesce(max(g) + 1, 0) FROM (SELECT g, sum(len(present) + len(orphans)) OVER (ORDER BY g) AS upto "
        f"FROM seg) WHERE upto <= {need}"
    ).fetchall()[0]
    (seg_rows,) = con.execute(f"SELECT sum(len(present) + len(orphans)) FROM seg WHERE g < {cut}").fetchall()[0]
    n_outside += need - int(seg_rows or 0)
    fmt = {
        "cut": cut,
        "bucket": BUCKET,
        "prefix": PREFIX,
        "prefix_no_slash": PREFIX.rstrip("/"),
        "unparseable": n_unparseable,
        "outside": n_outside,
        "malformed": n_malformed,
        "now": NOW_MS,
        "day": DAY_MS,
    }

    out = _DataFiles(inv_dir / "data")
    written = 0
    for sql in (_SEGMENT_OBJECTS_SQL, _EXTRA_OBJECTS_SQL):
        reader = con.sql(sql.format(**fmt)).to_arrow_reader(256 * 1024)
        for batch in reader:
            out.write(pa.Table.from_batches([batch]))
            written += batch.num_rows
    if edges:
        last_modified = pa.array([e["lm"] for e in edges], pa.int64()).cast(pa.timestamp("ms"))
        edge_columns = {
            "bucket": [BUCKET] * len(edges),
            "key": [e["key"] for e in edges],
            "size": [e["size"] for e in edges],
            "last_modified_date": last_modified,
            "e_tag": [""] * len(edges),
        }
        out.write(pa.table(edge_columns))
        written += len(edges)
    files = out.close()
    assert written == rows, (written, rows)
    manifest = {
        "sourceBucket": BUCKET,
        "destinationBucket": f"arn:aws:s3:::{BUCKET}-inventory",
        "version": "2016-11-30",
        "creationTimestamp": str(NOW_MS),
        "fileFormat": "Parquet",
        "fileSchema": (
            "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; "
            "optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); }"
        ),
        "files": [{"key": f"data/{f.name}", "size": f.stat().st_size, "MD5checksum": _md5(f)} for f in files],
    }
    data = json.dumps(manifest, indent=2).encode()
    (inv_dir / "manifest.json").write_bytes(data)
    (inv_dir / "manifest.checksum").write_text(hashlib.md5(data, usedforsecurity=False).hexdigest())

    # The export: topics and epochs from the topic list, segments from the kept segments.
    known = [t for t in meta if t["in_export"]]
    from_topic = ["topic_id", "name", "state", "tiered_epoch", "policy", "retention_ms", "retention_bytes"]
    local_retention = {"local_retention_ms": default_int("local.retention.ms")}
    topic_rows = [{**{k: t[k] for k in from_topic}, **local_retention, "deleted": t["deleted"]} for t in known]
    topics_table = pa.Table.from_pylist(topic_rows, schema=export_format.topics_schema())
    pq.write_table(topics_table, export_dir / export_format.TOPICS_FILE)
    epochs = [{"topic_id": t["topic_id"], "tiered_epoch": e, "state": s} for t in known for e, s in t["epochs"]]
    epochs_table = pa.Table.from_pylist(epochs, schema=export_format.epochs_schema())
    pq.write_table(epochs_table, export_dir / export_format.EPOCHS_FILE)
    seg_cols = ", ".join(export_format.segments_schema().names)
    segments = con.sql(f"SELECT {seg_cols} FROM seg WHERE g < {cut} AND exported ORDER BY g").to_arrow_table()
    pq.write_table(segments.cast(export_format.segments_schema()), export_dir / export_format.SEGMENTS_FILE)
    manifests_file = root / "manifests.parquet"
    pq.write_table(con.sql(_MANIFESTS_SQL.format(cut=cut)).to_arrow_table(), manifests_file)
    con.close()
    seconds = time.perf_counter() - t_start
    return Dataset(root, inv_dir, export_dir, tuple(files), rows, segments.num_rows, seconds, manifests_file)
