"""The scan bench's runs: each side on the same generated rows in a process of its own, timed and measured.

:func:`run_size` generates N rows (:mod:`bench.scan_data`), then runs DuckDB (:mod:`bench.scan_reference`,
``threads = 2`` as Spark's ``local[2]``) and Spark (start-up, a session and a trivial first job, timed on its own;
then ``run_scan`` + ``summary.json`` on the started session, the figure) each in a fresh interpreter
(``python -m bench.scan child-duckdb|child-spark ARGS``), and prints rows per second, start-up, scan time, the peak
RSS (``VmHWM``) of the JVM, of Spark's Python driver and of DuckDB, and the CPU other processes used meanwhile.
:func:`run` does that at each size and, for several, prints the time ratio and the peak memory at every size.

Invariants: each side's peak-memory figure is its own process's (hence the child processes); the inventory is read
and verified (sizes, MD5s) outside the timed part; the two sides' totals (:func:`compare_totals`) must be equal, or
the bench prints the differences and exits non-zero.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Figure, print_figures
from bench.scan_data import GRACE_MS, NOW_MS, PREFIX, generate
from bench.scan_reference import duckdb_scan, totals_from
from remote_storage import inventory as inv
from remote_storage.scan.job import ScanSettings, run_scan
from remote_storage.scan.session import build_session
from remote_storage.scan.sources import InventorySource
from remote_storage.scan.summary import build_summary, write_summary

DEFAULT_SIZES = (1_000_000, 3_000_000, 10_000_000, 30_000_000)  # what `make bench` runs: time at each, RSS flat
THREADS = 2  # DuckDB's threads, the cores of Spark's local[2]
ROWS_ENV = "TIEREDCTL_BENCH_SCAN_ROWS"


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


def child_duckdb(args: dict[str, Any]) -> dict[str, Any]:
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


def child_spark(args: dict[str, Any]) -> dict[str, Any]:
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


CHILDREN = {"child-duckdb": child_duckdb, "child-spark": child_spark}


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
