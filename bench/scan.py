"""Inventory scan: rows per second of the Spark job against DuckDB running the same classification on the same files.

A generator writes, under a temporary directory, an S3 Inventory (Parquet data files of ~1M rows, a manifest with
MD5s and a fixed ``creationTimestamp``) and a metadata export (topics/segments/epochs Parquet) for ~200 topics:
mostly live segment triples, plus every category and anomaly of :mod:`remote_storage.scan.contract` in realistic
fractions. Then, each side in its own child process so that the peak-memory figures are its own:

* Spark: start-up (session + a trivial first job) timed on its own; then ``run_scan`` + ``summary.json`` on the
  started session (the figure); the JVM's and the Python driver's peak RSS (``VmHWM``).
* DuckDB (``threads = 2``, as Spark's ``local[2]``): :data:`DUCKDB_SCRIPT`, the same rules in SQL, reading the same
  data files and export, writing the same per-object and anomaly Parquet and a summary with the same totals.

The two summaries' totals (objects and bytes, reclaimable objects and bytes by category, anomalies by type, rows)
must be equal, or the bench prints the differences and exits non-zero.

``python -m bench scan`` runs 1M, 3M, 10M and 30M rows and ends with a table of the time ratio and the peak
memory at each size (``TIEREDCTL_BENCH_SCAN_ROWS=1000000,3000000`` for other sizes, ``python -m bench.scan run
ROWS`` for one);
``python -m bench.scan check [ROWS]`` checks the SQL (and the Spark job) against :func:`policies.orphans.classify`
object by object on a small generated bucket with edge-case keys.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import Figure, print_figures
from orchestrator.metadata.topic_configs import default_int
from policies import orphans as o
from remote_storage import export, export_format
from remote_storage import inventory as inv
from remote_storage.inventory import parquet_schema
from remote_storage.scan import contract as c
from remote_storage.scan.job import ScanSettings, run_scan
from remote_storage.scan.manifest_reading import ManifestReading
from remote_storage.scan.session import build_session
from remote_storage.scan.sources import InventorySource
from remote_storage.scan.summary import build_summary, summarise_totals, write_summary

PREFIX = "tiered/"
OTHER_PREFIX = "custom/"  # the prefix some generated segments record in their custom metadata
BUCKET = "bench-tiered-storage"
NOW_MS = 1_767_225_600_000  # the inventory's creationTimestamp: "now" for every age decision
GRACE_MS = c.DEFAULT_GRACE_MS
DAY_MS = 24 * 3600 * 1000
ROWS_PER_FILE = 1_000_000
DEFAULT_ROWS = 10_000_000  # the generator's default
DEFAULT_SIZES = (1_000_000, 3_000_000, 10_000_000, 30_000_000)  # what `make bench` runs: time at each, RSS flat
THREADS = 2  # DuckDB's threads, the cores of Spark's local[2]
ROWS_ENV = "TIEREDCTL_BENCH_SCAN_ROWS"

# -- the generator --------------------------------------------------------------------------------------------------

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


# -- the DuckDB reference ---------------------------------------------------------------------------------------------

# The contract's rules in SQL (policies.orphans is the plain-Python statement of the same rules). Placeholders:
# {files} the inventory's Parquet data files, {topics}/{segments}/{epochs} the export; getvariable() parameters.
DUCKDB_SCRIPT = r"""
-- The export. Segments keep their file order: retention sorts by start offset only, ties in RLMM order.
CREATE TEMP VIEW topics AS SELECT * FROM read_parquet({topics});
CREATE TEMP VIEW segments AS SELECT * FROM read_parquet({segments}, file_row_number = true);
CREATE TEMP VIEW enabled_epochs AS
    SELECT DISTINCT topic_id, tiered_epoch FROM read_parquet({epochs}) WHERE state = 'ENABLED';

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
SELECT CASE WHEN start_offset > prev_end + 1 THEN 'offset_gap' ELSE 'offset_overlap' END, topic, topic_id,
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

    ``manifests``: what the manifests the size rule needs said (:data:`_MANIFESTS_SQL`'s columns), as if read; None:
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


# -- the two sides, each in its own process ------------------------------------------------------------------------


def _vm_hwm_mib(pid: int | str = "self") -> float:
    """Peak resident set size of a process, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs), from ``/proc/stat``."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def _own_cpu_s(pid: int | None = None) -> float:
    """CPU seconds of this process (and of ``pid``, the JVM, when given)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    total = r.ru_utime + r.ru_stime
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _child_duckdb(args: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    import duckdb

    duckdb.connect().execute("SELECT 1").fetchall()
    startup_s = time.perf_counter() - t0
    t0, busy0, own0 = time.perf_counter(), _busy_cpu_s(), _own_cpu_s()
    files = [str(f) for f in args["files"]]
    export_dir, out_dir = Path(args["export_dir"]), Path(args["out_dir"])
    options = {name: args[name] for name in ("prefix", "now_ms", "grace_ms", "threads")}
    summary = duckdb_scan(files, export_dir, out_dir, **options)
    seconds = time.perf_counter() - t0
    own = _own_cpu_s() - own0
    peak_rss = _vm_hwm_mib()
    others = _busy_cpu_s() - busy0 - own
    return {
        "startup_s": startup_s,
        "scan_s": seconds,
        "steps": summary["seconds"],
        "totals": summary["totals"],
        "peak_rss_mib": peak_rss,
        "cpu_s": own,
        "others_cpu_s": others,
    }


def _child_spark(args: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    spark = build_session()
    spark.range(1).count()
    startup_s = time.perf_counter() - t0
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    out_dir = Path(args["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    inventory = inv.read_inventory(args["inventory_dir"])  # verified (sizes, MD5s) outside the timed part
    source = InventorySource.from_inventory(inventory)
    settings = ScanSettings(prefix=args["prefix"], grace_ms=args["grace_ms"])
    t0, busy0, own0 = time.perf_counter(), _busy_cpu_s(), _own_cpu_s(jvm_pid)
    export_dir = Path(args["export_dir"])
    agg = run_scan(spark, source, export_dir, out_dir, settings)
    summary = build_summary(
        agg, source=source, export_dir=export_dir, settings=settings, generated_at_ms=args["now_ms"]
    )
    write_summary(summary, out_dir)
    scan_s = time.perf_counter() - t0
    own = _own_cpu_s(jvm_pid) - own0
    others = _busy_cpu_s() - busy0 - own
    jvm_peak = _vm_hwm_mib(jvm_pid)
    totals = totals_from(agg.objects, agg.anomalies_by_topic, agg.malformed_by_reason)
    spark.stop()
    return {
        "startup_s": startup_s,
        "scan_s": scan_s,
        "steps": agg.seconds,
        "totals": totals,
        "summary_totals": summary["totals"],
        "rows": agg.rows,
        "jvm_peak_rss_mib": jvm_peak,
        "driver_peak_rss_mib": _vm_hwm_mib(),
        "cpu_s": own,
        "others_cpu_s": others,
    }


_CHILDREN = {"child-duckdb": _child_duckdb, "child-spark": _child_spark}


def _run_child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one side in a fresh interpreter, which writes its JSON result to the file named in its arguments."""
    with tempfile.NamedTemporaryFile("w+", suffix=".json") as result:
        args = {**args, "result": result.name}
        command = [sys.executable, "-m", "bench.scan", kind, json.dumps(args, default=str)]
        repo_root = Path(__file__).resolve().parent.parent
        proc = subprocess.run(command, cwd=repo_root, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"the {kind} process failed with exit status {proc.returncode}")
        out: dict[str, Any] = json.loads(Path(result.name).read_text())
        return out


def compare_totals(spark: dict[str, Any], duck: dict[str, Any]) -> list[str]:
    """Differences between two totals dicts, one line each (empty when equal)."""
    diffs = []
    for key in sorted(set(spark) | set(duck)):
        a, b = spark.get(key), duck.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differing = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            diffs += [f"{key}.{k}: spark {a.get(k)} duckdb {b.get(k)}" for k in differing]
        elif a != b:
            diffs.append(f"{key}: spark {a} duckdb {b}")
    return diffs


def _sizes_from_env() -> tuple[int, ...]:
    """The row counts to run: ``TIEREDCTL_BENCH_SCAN_ROWS`` as a comma-separated list, else :data:`DEFAULT_SIZES`."""
    raw = os.environ.get(ROWS_ENV)
    if not raw:
        return DEFAULT_SIZES
    try:
        sizes = tuple(int(part.replace("_", "")) for part in raw.split(",") if part.strip())
    except ValueError:
        raise SystemExit(
            f"{ROWS_ENV} must be row counts separated by commas, e.g. 1000000,3000000; got {raw!r}"
        ) from None
    if not sizes or min(sizes) <= 0:
        raise SystemExit(f"{ROWS_ENV} must name at least one positive row count; got {raw!r}")
    return sizes


def run(rows: int | None = None) -> list[Figure]:
    """Each size in turn (one size when ``rows`` is given), then, for several, the ratio at each size and the peak
    memory at each size beside the smallest size's (flat memory shows as ~1.00x)."""
    sizes = (rows,) if rows else _sizes_from_env()
    results = [(n, run_size(n)) for n in sizes]
    figures = [f for _, (figs, _, _) in results for f in figs]
    if len(results) > 1:
        first_n, (_, first_spark, first_duck) = results[0]
        same = f"the same at {first_n:,} rows"
        time_rows, spark_rows, duck_rows = [], [], []
        for n, (_, spark, duck) in results:
            ratio = f"scan time, Spark excl. start-up ({n:,} rows; goal within 3x)"
            time_rows.append(Figure(ratio, spark["scan_s"], "s", f"DuckDB ({n:,} rows)", duck["scan_s"], False))
            mib = spark["jvm_peak_rss_mib"] + spark["driver_peak_rss_mib"]
            first_mib = first_spark["jvm_peak_rss_mib"] + first_spark["driver_peak_rss_mib"]
            spark_rows.append(Figure(f"peak RSS, Spark JVM + driver ({n:,} rows)", mib, "MiB", same, first_mib, False))
            duck_mib, first_duck_mib = duck["peak_rss_mib"], first_duck["peak_rss_mib"]
            duck_rows.append(Figure(f"peak RSS, DuckDB ({n:,} rows)", duck_mib, "MiB", same, first_duck_mib, False))
        by_size = time_rows + spark_rows + duck_rows
        print_figures("Inventory scan at every size", by_size)
        figures += by_size
    return figures


def run_size(n: int) -> tuple[list[Figure], dict[str, Any], dict[str, Any]]:
    """Generate ``n`` rows, scan them with each side in its own process, print the figures; exit non-zero when the
    two sides' totals differ."""
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        root = Path(tmp)
        data = generate(root / "data", n)
        rows_and_files = f"{n:,} inventory rows in {len(data.data_files)} files"
        print(f"generated {rows_and_files} and {data.segments:,} RLMM segments in {data.seconds:.1f} s")
        common = {"export_dir": str(data.export_dir), "prefix": PREFIX, "now_ms": NOW_MS, "grace_ms": GRACE_MS}
        files = [str(f) for f in data.data_files]
        duck_args = {**common, "files": files, "out_dir": str(root / "duckdb"), "threads": THREADS}
        duck = _run_child("child-duckdb", duck_args)
        spark_args = {**common, "inventory_dir": str(data.inventory_dir), "out_dir": str(root / "spark")}
        spark = _run_child("child-spark", spark_args)
    diffs = compare_totals(spark["totals"], duck["totals"])
    if spark["rows"] != n:
        diffs.append(f"rows: spark {spark['rows']} generated {n}")
    spark_rate, duck_rate = n / spark["scan_s"], n / duck["scan_s"]
    spark_total_s, duck_total_s = spark["scan_s"] + spark["startup_s"], duck["scan_s"] + duck["startup_s"]
    jvm_mib, driver_mib, duck_mib = spark["jvm_peak_rss_mib"], spark["driver_peak_rss_mib"], duck["peak_rss_mib"]
    spark_mib = jvm_mib + driver_mib
    duck_label = f"DuckDB, {THREADS} threads, same SQL rules"
    startup_label, duck_startup_label = "Spark start-up (session + first job)", "DuckDB connect + first query"
    duck_process = "DuckDB process"
    figures = [
        Figure(f"scan, Spark local[2], excl. start-up ({n:,} rows)", spark_rate, "rows/s", duck_label, duck_rate),
        Figure("scan, Spark incl. start-up", n / spark_total_s, "rows/s", "DuckDB incl. start-up", n / duck_total_s),
        Figure(startup_label, spark["startup_s"], "s", duck_startup_label, duck["startup_s"], higher_is_better=False),
        Figure("Spark scan time", spark["scan_s"], "s", "DuckDB scan time", duck["scan_s"], higher_is_better=False),
        Figure("peak RSS, Spark JVM", jvm_mib, "MiB", duck_process, duck_mib, higher_is_better=False),
        Figure("peak RSS, Spark's Python driver", driver_mib, "MiB", duck_process, duck_mib, higher_is_better=False),
        Figure("peak RSS, Spark JVM + driver", spark_mib, "MiB", duck_process, duck_mib, higher_is_better=False),
    ]
    ratio = spark["scan_s"] / duck["scan_s"]
    print_figures(f"Inventory scan ({n:,} rows; Spark is {ratio:.2f}x DuckDB's time, target within 3x)", figures)
    for name, side in (("Spark", spark), ("DuckDB", duck)):
        cores, others = side["cpu_s"] / side["scan_s"], side["others_cpu_s"] / side["scan_s"]
        busy = " (the machine was busy: the figures are skewed)" if others > 0.1 else ""
        print(
            f"{name}: {side['cpu_s']:.1f} CPU s in {side['scan_s']:.1f} s ({cores:.2f} cores); other processes used "
            f"{others:.2f} cores meanwhile{busy}"
        )
    print("Spark steps (s): " + ", ".join(f"{k} {v:.1f}" for k, v in spark["steps"].items()))
    print("DuckDB steps (s): " + ", ".join(f"{k} {v:.1f}" for k, v in duck["steps"].items()))
    if diffs:
        print("MISMATCH between the Spark scan and the DuckDB reference:\n  " + "\n  ".join(diffs), file=sys.stderr)
        raise SystemExit(1)
    t = duck["totals"]
    reclaimable = f"{sum(t['reclaimable_objects'].values()):,} objects / {sum(t['reclaimable_bytes'].values()):,} bytes"
    anomalies = f"{t['anomalies_total']:,} anomalies"
    print(f"Spark and DuckDB agree: {t['objects']:,} objects, reclaimable {reclaimable}, {anomalies}")
    return figures, spark, duck


# -- the agreement check against policies.orphans -----------------------------------------------------------------


def manifest_readings(data: Dataset) -> dict[tuple[str, str], ManifestReading]:
    """What the generated segments' manifests say (as if the scan's executors had read them)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(data.manifests_file).to_pylist()
    return {(r["topic_id"], r["segment_id"]): ManifestReading(r["m_kind"], r["m_size"], r["m_detail"]) for r in rows}


def _reference(
    data: Dataset, *, manifests_read: bool = False
) -> tuple[dict[str, tuple[str, bool, str | None]], Counter[tuple[Any, ...]], int]:
    """policies.orphans.classify on the generated bucket: per-key verdicts, anomalies, malformed row count; with
    ``manifests_read``, the size rule reads :func:`manifest_readings`."""
    topics, segments, epochs = export.load_export(data.export_dir)
    meta = o.Metadata.build(topics, segments, epochs, now_ms=NOW_MS)
    inventory = inv.read_inventory(str(data.inventory_dir))
    objs = [o.BucketObject(r.key, r.size, r.last_modified_ms) for r in inventory.rows()]
    readings = manifest_readings(data) if manifests_read else None
    result = o.classify(objs, meta, prefix=PREFIX, now_ms=NOW_MS, grace_ms=GRACE_MS, manifests=readings)
    verdicts = {v.key: (v.category, v.reclaimable, v.anomaly) for v in result.objects}
    assert len(verdicts) == len(objs), "generated keys are not unique"
    anomalies = Counter((a.type, a.topic_id, a.segment_id, a.key) for a in result.anomalies)
    return verdicts, anomalies, inventory.malformed.total


def _read_outputs(out_dir: Path) -> tuple[dict[str, tuple[str, bool, str | None]], Counter[tuple[Any, ...]]]:
    import pyarrow.dataset as ds

    objects = ds.dataset(out_dir / c.OBJECTS_DIR, format="parquet").to_table().to_pylist()
    anomalies = ds.dataset(out_dir / c.ANOMALIES_DIR, format="parquet").to_table().to_pylist()
    verdicts = {r["key"]: (r["category"], r["reclaimable"], r["anomaly"]) for r in objects}
    found = Counter((a["type"], a["topic_id"], a["segment_id"], a["key"]) for a in anomalies)
    return verdicts, found


def _diff(name: str, expected: dict[str, Any], got: dict[str, Any], exp_a: Counter[Any], got_a: Counter[Any]) -> int:
    bad = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    for k in bad[:40]:
        print(f"  {name} object {k!r}: expected {expected.get(k)} got {got.get(k)}")
    missing, extra = exp_a - got_a, got_a - exp_a
    for a in list(missing)[:20]:
        print(f"  {name} anomaly missing: {a}")
    for a in list(extra)[:20]:
        print(f"  {name} anomaly extra: {a}")
    anomaly_counts = f"{sum(exp_a.values()):,} anomalies, {sum(missing.values())} missing, {sum(extra.values())} extra"
    by_type = dict(sorted(Counter(a[0] for a in exp_a.elements()).items()))
    print(f"{name}: {len(expected):,} objects, {len(bad)} verdict mismatches; {anomaly_counts} (by type: {by_type})")
    return len(bad) + sum(missing.values()) + sum(extra.values())


def check(rows: int = 20_000, *, spark: bool = True) -> int:
    """DuckDB SQL (and the Spark job) against policies.orphans.classify, object by object; the mismatch count."""
    with tempfile.TemporaryDirectory(prefix="bench-scan-check-") as tmp:
        root = Path(tmp)
        data = generate(root / "data", rows, topics=20, partitions=3, rare=5.0, edge_cases=True)
        expected, expected_anomalies, malformed = _reference(data, manifests_read=True)
        cats = Counter(v[0] for v in expected.values())
        by_category = dict(sorted(cats.items()))
        print(f"generated {rows:,} rows ({malformed} malformed), {data.segments:,} segments; categories {by_category}")
        files = [str(f) for f in data.data_files]
        duck_dir = root / "duckdb"
        options: dict[str, Any] = {"prefix": PREFIX, "now_ms": NOW_MS, "grace_ms": GRACE_MS, "threads": THREADS}
        duck = duckdb_scan(files, data.export_dir, duck_dir, **options, manifests=data.manifests_file)
        got, got_anomalies = _read_outputs(duck_dir)
        bad = _diff("duckdb", expected, got, expected_anomalies, got_anomalies)
        if duck["totals"]["anomalies"][c.MALFORMED_INVENTORY_ROW] != malformed:
            print(f"  duckdb malformed rows {duck['totals']['anomalies'][c.MALFORMED_INVENTORY_ROW]}, want {malformed}")
            bad += 1
        if spark:  # no bucket to read manifests from: both sides judge sizes without them
            unread, unread_anomalies, _ = _reference(data)
            unread_duck = duckdb_scan(files, data.export_dir, root / "duckdb-unread", **options)
            common = {"export_dir": str(data.export_dir), "prefix": PREFIX, "now_ms": NOW_MS, "grace_ms": GRACE_MS}
            spark_args = {"out_dir": str(root / "spark"), "inventory_dir": str(data.inventory_dir), **common}
            result = _child_spark(spark_args)
            got, got_anomalies = _read_outputs(root / "spark")
            bad += _diff("spark", unread, got, unread_anomalies, got_anomalies)
            for line in compare_totals(result["totals"], unread_duck["totals"]):
                print(f"  totals {line}")
                bad += 1
    return bad


def main(argv: list[str]) -> None:
    if argv and argv[0] in _CHILDREN:
        args = json.loads(argv[1])
        result = _CHILDREN[argv[0]](args)
        Path(args["result"]).write_text(json.dumps(result, default=str))
        return
    if argv and argv[0] == "check":
        bad = check(int(argv[1]) if len(argv) > 1 else 20_000, spark="--no-spark" not in argv)
        sys.exit(1 if bad else 0)
    if argv and argv[0] == "run":
        run(int(argv[1]) if len(argv) > 1 else None)
        return
    if argv:
        sys.exit("usage: python -m bench.scan [run [ROWS] | check [ROWS] [--no-spark]]")
    run()


if __name__ == "__main__":
    main(sys.argv[1:])
