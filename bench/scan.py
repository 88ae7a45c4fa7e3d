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

This module is the command line (and the names other code reads of the bench); the work is in modules of one job
each: :mod:`bench.scan_data` (the generated inventory and export), :mod:`bench.scan_reference` (the rules in DuckDB
SQL), :mod:`bench.scan_runs` (the two sides in their processes, the figures) and :mod:`bench.scan_check` (the
agreement check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.scan_check import check
from bench.scan_check import read_outputs as _read_outputs
from bench.scan_check import reference as _reference
from bench.scan_data import GRACE_MS, NOW_MS, PREFIX, Dataset, generate
from bench.scan_reference import DUCKDB_SCRIPT, duckdb_scan, totals_from
from bench.scan_runs import CHILDREN, compare_totals, run, run_size

# What `python -m bench` (run) and tests/remote_storage/scan/test_sql_reference.py (the rest, the last two under the
# names they had when all of the bench was this module) read from here.
__all__ = [
    "DUCKDB_SCRIPT",
    "GRACE_MS",
    "NOW_MS",
    "PREFIX",
    "Dataset",
    "_read_outputs",
    "_reference",
    "check",
    "compare_totals",
    "duckdb_scan",
    "generate",
    "run",
    "run_size",
    "totals_from",
]


def main(argv: list[str]) -> None:
    if argv and argv[0] in CHILDREN:
        args = json.loads(argv[1])
        result = CHILDREN[argv[0]](args)
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
