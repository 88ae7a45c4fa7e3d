"""The reclaim executor: read a scan's output, re-check every candidate, plan with :mod:`policies.reclaim`, delete.

The I/O around the pure planner, in this order:

1. ``summary.json`` and ``objects.parquet`` (a Spark Parquet directory) are read from the scan's output directory,
   the Parquet batch by batch: memory holds the candidates and per-topic-id counts, never the whole scan.
2. Current metadata: the metadata store is exported to a temporary directory and read back; without a store the
   scan's own export is used, and the result carries a warning that the re-check used scan-time metadata.
3. Every candidate not already journaled as deleted is looked up with HEAD (a bounded thread pool) and classified
   again at the current wall-clock time (the injected ``now_ms``) with ``older_than`` as the grace period.
4. The plan is made. A dry run stops here and deletes nothing.
5. ``execute``: per batch, an ``intent`` line listing its keys is appended to ``reclaim-journal.jsonl`` in the scan's
   output directory and fsynced, the keys are deleted with ``S3RemoteStorage.delete_keys`` confined to the batch's
   topic prefix (under the scanned prefix, or under the prefix a segment's custom metadata records, where the scan
   found its objects), and a ``result`` line with the deleted and failed keys is appended and fsynced.

Invariants:
* Nothing is deleted that the planner did not plan, and only under the batch's own topic prefix (the storage layer
  refuses anything else before any request is made).
* A key is journaled as deleted only when S3 said so; failed keys are reported (``reclaim.failed``), make the run
  fail, and are never counted as deleted. A crash between ``intent`` and ``result`` loses nothing: the next run
  HEADs those keys again (gone ones are skipped, present ones planned again).
* A journal line cut short by a crash is ignored when the journal is read; only ``result`` lines for the same
  bucket count as deleted.
* One executing run per scan directory: ``--execute`` holds ``reclaim.lock`` there (``flock``) from the re-check to
  the last journal line, so two concurrent runs never delete and count the same objects twice; the second is refused
  (RECLAIM_IN_PROGRESS) with the first one's pid. A dry run takes no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from orchestrator.errors import InvalidArgument, ReclaimInProgress, RemoteStorageError
from policies.orphans import Metadata
from policies.reclaim import (
    Candidate,
    CurrentObject,
    ReclaimPlan,
    ScanCounts,
    ScanRow,
    Totals,
    current_verdict,
    is_candidate,
    live_topic_ids,
    plan_reclaim,
)
from policies.reclaim_uploads import UploadsOutcome, reclaim_uploads
from remote_storage.export import export_store_file, load_export
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan import contract as c
from remote_storage.scan.summary import ScanOutputError, load_summary

log = structlog.get_logger(__name__)

JOURNAL_FILE = "reclaim-journal.jsonl"
DEFAULT_HEAD_WORKERS = 16
_HEAD_CHUNK = 2000  # candidates in flight at once: bounds the futures held, whatever the candidate count
_READ_BATCH = 65_536
_SCAN_COLUMNS = ("key", "size", "last_modified_ms", "topic", "topic_id", "category", "reclaimable")
_OPTIONAL_SCAN_COLUMNS = ("object_prefix",)  # absent from scans made before it: then the scanned prefix

ProgressCallback = Callable[[str, int, int], None]  # (phase "recheck" | "delete", done, total)


def _scan_hint(out_dir: Path) -> str:
    return f"run 'tieredctl scan run --out {out_dir}' first"


@dataclass(frozen=True, slots=True)
class ScanOutput:
    """What reclaim needs from ``summary.json``."""

    out_dir: Path
    bucket: str
    prefix: str
    grace_ms: int
    export_dir: Path | None  # the metadata export the scan joined against

    @property
    def objects_dir(self) -> Path:
        return self.out_dir / c.OBJECTS_DIR

    @property
    def journal_path(self) -> Path:
        return self.out_dir / JOURNAL_FILE

    @classmethod
    def load(cls, out_dir: str | os.PathLike[str]) -> ScanOutput:
        out = Path(out_dir)
        summary_path = out / c.SUMMARY_FILE
        summary = load_summary(out)
        try:
            params = summary["parameters"]
            bucket = str(summary["inventory"]["source_bucket"])
            prefix = str(params["prefix"])
            grace_ms = int(params["grace_ms"])
            export = (summary.get("export") or {}).get("dir")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ScanOutputError(f"cannot read the scan summary {summary_path}: {exc!r}; {_scan_hint(out)}") from exc
        if not (out / c.OBJECTS_DIR).is_dir():
            raise ScanOutputError(f"the scan output {out / c.OBJECTS_DIR} is missing; {_scan_hint(out)}")
        export_dir: Path | None = None
        if export:
            export_dir = Path(export)
            if not export_dir.is_absolute() and not export_dir.exists() and (out / export_dir).exists():
                export_dir = out / export_dir
        return cls(out, bucket, prefix, grace_ms, export_dir)


def _scan_row(r: Mapping[str, Any]) -> ScanRow:
    """One ``objects.parquet`` row, as pyarrow reads it, as the reclaim planner's row."""
    return ScanRow(
        key=r["key"],
        size=r["size"],
        last_modified_ms=r["last_modified_ms"],
        topic=r["topic"],
        topic_id=r["topic_id"],
        category=r["category"],
        reclaimable=bool(r["reclaimable"]),
        object_prefix=r.get("object_prefix"),
    )


def read_scan(objects_dir: Path, categories: frozenset[str]) -> tuple[list[ScanRow], ScanCounts]:
    """The candidate rows of ``objects.parquet`` and counts over every row, reading it batch by batch."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.dataset as ds  # type: ignore[import-untyped]

    rows: list[ScanRow] = []
    by_topic_id: Counter[str] = Counter()
    parsed = 0
    wanted = pa.array(sorted(categories), type=pa.string())
    try:
        dataset = ds.dataset(str(objects_dir), format="parquet")
        missing = [col for col in _SCAN_COLUMNS if col not in dataset.schema.names]
        if missing and dataset.files:
            raise ScanOutputError(
                f"{objects_dir} has no column(s) {', '.join(missing)}: not a scan's objects.parquet; "
                f"{_scan_hint(objects_dir.parent)}"
            )
        columns = [*_SCAN_COLUMNS, *(col for col in _OPTIONAL_SCAN_COLUMNS if col in dataset.schema.names)]
        batches: Iterator[Any] = (
            dataset.to_batches(columns=columns, batch_size=_READ_BATCH) if dataset.files else iter(())
        )
        for batch in batches:
            tids = batch.column("topic_id")
            for item in pc.value_counts(tids.drop_null()).to_pylist():
                by_topic_id[item["values"]] += item["counts"]
            parsed += len(tids) - tids.null_count
            mask = pc.and_(pc.fill_null(batch.column("reclaimable"), False), pc.is_in(batch.column("category"), wanted))
            for r in batch.filter(mask).to_pylist():
                row = _scan_row(r)
                if is_candidate(row, categories):
                    rows.append(row)
    except (OSError, pa.ArrowException) as exc:
        raise ScanOutputError(
            f"cannot read the scan output {objects_dir}: {exc}; {_scan_hint(objects_dir.parent)}"
        ) from exc
    return rows, ScanCounts(dict(by_topic_id), parsed)


# -- the journal -------------------------------------------------------------------------------------------------


class Journal:
    """``reclaim-journal.jsonl``: one JSON object per line, each fsynced before the next step."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def deleted_keys(self, bucket: str) -> frozenset[str]:
        """Keys a ``result`` line for ``bucket`` records as deleted (a torn last line is ignored)."""
        if not self.path.exists():
            return frozenset()
        out: set[str] = set()
        try:
            with self.path.open(encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    try:
                        doc = json.loads(line)
                    except ValueError:
                        log.warning("reclaim.journal_bad_line", path=str(self.path), line=number)
                        continue
                    if isinstance(doc, dict) and doc.get("type") == "result" and doc.get("bucket") == bucket:
                        out.update(str(k) for k in doc.get("deleted", []))
        except OSError as exc:
            raise ScanOutputError(f"cannot read the reclaim journal {self.path}: {exc}") from exc
        return frozenset(out)

    def append(self, doc: Mapping[str, Any]) -> None:
        line = json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


# -- current metadata ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CurrentMetadata:
    meta: Metadata
    source: str  # "store <path>" or "scan export <dir>"
    scan_time: bool  # True when the scan's own export was used (no store given)


def load_current_metadata(
    *,
    store_path: str | Path | None,
    scan_export_dir: Path | None,
    now_ms: int,
    password_file: Path | None = None,
) -> CurrentMetadata:
    """Export the store now (a SQLite file or a ``postgresql://`` URL) and read it back; without a store, read the
    scan's export (scan-time metadata)."""
    if store_path is not None:
        with tempfile.TemporaryDirectory(prefix="tieredctl-reclaim-") as tmp:
            export_store_file(store_path, tmp, password_file=password_file)
            topics, segments, epochs = load_export(tmp)
        return CurrentMetadata(Metadata.build(topics, segments, epochs, now_ms=now_ms), f"store {store_path}", False)
    if scan_export_dir is None:
        raise InvalidArgument(
            "the scan summary records no metadata export, so nothing can be re-checked: pass --metadata-store PATH"
        )
    topics, segments, epochs = load_export(scan_export_dir)
    meta = Metadata.build(topics, segments, epochs, now_ms=now_ms)
    return CurrentMetadata(meta, f"scan export {scan_export_dir}", True)


def current_metadata_of_export(export_dir: Path, *, source: str, now_ms: int) -> CurrentMetadata:
    """An export of the current metadata made just now (from a Kafka cluster), read back; ``source`` names it."""
    topics, segments, epochs = load_export(export_dir)
    return CurrentMetadata(Metadata.build(topics, segments, epochs, now_ms=now_ms), source, False)


# -- the run -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReclaimOptions:
    execute: bool = False  # dry run unless asked
    older_than_ms: int | None = None  # None: the scan's grace period
    categories: frozenset[str] = c.RECLAIM_CAN_DELETE
    max_orphan_ratio: float = 0.5
    force: bool = False
    head_workers: int = DEFAULT_HEAD_WORKERS


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    executed: bool
    bucket: str
    older_than_ms: int
    metadata_source: str
    planned_objects: int
    planned_bytes: int
    planned_by_category: Mapping[str, Totals]
    planned_by_topic: Mapping[str, Totals]
    deleted_objects: int = 0
    deleted_bytes: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> keys
    failed_keys: Mapping[str, str] = field(default_factory=dict)  # key -> error
    refusals: tuple[str, ...] = ()
    run_refused: bool = False
    warnings: tuple[str, ...] = ()
    uploads: UploadsOutcome = field(default_factory=UploadsOutcome)  # incomplete multipart uploads

    @property
    def ok(self) -> bool:
        return not self.failed_keys and not self.run_refused and not self.uploads.failed

    def as_json(self) -> dict[str, Any]:
        def totals(m: Mapping[str, Totals]) -> dict[str, dict[str, int]]:
            return {k: {"objects": t.objects, "bytes": t.bytes} for k, t in m.items()}

        return {
            "executed": self.executed,
            "bucket": self.bucket,
            "older_than_ms": self.older_than_ms,
            "metadata_source": self.metadata_source,
            "planned_objects": self.planned_objects,
            "planned_bytes": self.planned_bytes,
            "planned_by_category": totals(self.planned_by_category),
            "planned_by_topic": totals(self.planned_by_topic),
            "deleted_objects": self.deleted_objects,
            "deleted_bytes": self.deleted_bytes,
            "skipped": dict(self.skipped),
            "failed_keys": dict(self.failed_keys),
            "refusals": list(self.refusals),
            "run_refused": self.run_refused,
            "warnings": list(self.warnings),
            "multipart_uploads": self.uploads.as_json(),
        }


def _head_all(
    rsm: S3RemoteStorage,
    keys: Sequence[str],
    *,
    workers: int,
    on_progress: ProgressCallback | None,
) -> tuple[dict[str, CurrentObject | None], dict[str, str]]:
    """HEAD every key with at most ``workers`` requests in flight; (found or None per key, failures)."""
    found: dict[str, CurrentObject | None] = {}
    failed: dict[str, str] = {}

    def head(key: str) -> tuple[str, CurrentObject | None, str | None]:
        try:
            info = rsm.head(key)
        except RemoteStorageError as exc:
            return key, None, f"HEAD failed: {exc}"
        return key, None if info is None else CurrentObject(info.size, info.last_modified_ms), None

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="reclaim-head") as pool:
        for i in range(0, len(keys), _HEAD_CHUNK):
            for key, current, error in pool.map(head, keys[i : i + _HEAD_CHUNK]):
                if error is None:
                    found[key] = current
                else:
                    failed[key] = error
            done = min(len(keys), i + _HEAD_CHUNK)
            if on_progress is not None:
                on_progress("recheck", done, len(keys))
    return found, failed


LOCK_FILE = "reclaim.lock"


@contextlib.contextmanager
def _only_executor(scan: ScanOutput) -> Iterator[None]:
    """Hold the scan directory's ``reclaim.lock`` (an exclusive ``flock``, let go by the kernel however this process
    ends) for one ``--execute`` run; another one running raises :class:`ReclaimInProgress` naming it."""
    path = scan.out_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise ReclaimInProgress(
                f"another 'reclaim --execute' (pid {holder}) is running on the scan in {scan.out_dir}; let it end, "
                "then run again if it left anything: a run re-checks every object and skips what its journal says "
                "is deleted"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def reclaim(
    scan: ScanOutput,
    *,
    rsm: S3RemoteStorage,
    metadata: CurrentMetadata,
    options: ReclaimOptions,
    now_ms: Callable[[], int],
    on_progress: ProgressCallback | None = None,
    run_id: str | None = None,
) -> ReclaimResult:
    """Re-check, plan and (with ``options.execute``) delete; see the module docstring for the steps. An executing
    run holds the scan directory's lock from its re-check to its last journal line: a second one is refused."""
    with _only_executor(scan) if options.execute else contextlib.nullcontext():
        return _reclaim(
            scan, rsm=rsm, metadata=metadata, options=options, now_ms=now_ms, on_progress=on_progress, run_id=run_id
        )


def _reclaim(
    scan: ScanOutput,
    *,
    rsm: S3RemoteStorage,
    metadata: CurrentMetadata,
    options: ReclaimOptions,
    now_ms: Callable[[], int],
    on_progress: ProgressCallback | None,
    run_id: str | None,
) -> ReclaimResult:
    if rsm.bucket != scan.bucket:
        # The scan's keys, counts and ratio guards describe its own bucket; in another one they mean nothing.
        raise InvalidArgument(
            f"the scan in {scan.out_dir} is of bucket {scan.bucket!r}, not {rsm.bucket!r}: reclaim acts only on "
            "the bucket it scanned; run 'tieredctl scan run' on that bucket first"
        )
    if rsm.prefix != scan.prefix:
        raise InvalidArgument(f"the storage prefix {rsm.prefix!r} is not the scan's {scan.prefix!r}")
    older_than = scan.grace_ms if options.older_than_ms is None else options.older_than_ms
    if older_than < 0:
        raise InvalidArgument(f"older-than must not be negative, got {older_than} ms")
    warnings: list[str] = []
    if metadata.scan_time:
        warnings.append(
            f"no --metadata-store given: the re-check uses the scan-time metadata ({metadata.source}), so objects "
            "that became live since the scan are not recognised; pass --metadata-store PATH to re-check against "
            "current metadata"
        )
        log.warning("reclaim.scan_time_metadata", source=metadata.source)

    rows, counts = read_scan(scan.objects_dir, options.categories)
    journal = Journal(scan.journal_path)
    already = journal.deleted_keys(rsm.bucket)
    to_check = list(dict.fromkeys(r.key for r in rows if r.key not in already))
    found, head_failed = _head_all(rsm, to_check, workers=options.head_workers, on_progress=on_progress)
    now = now_ms()
    candidates: list[Candidate] = []
    for row in rows:
        if row.key in head_failed:
            continue  # reported as failed: never planned on a guess
        current = found.get(row.key)
        verdict = None
        if current is not None:
            verdict = current_verdict(row, current, metadata.meta, prefix=scan.prefix, now_ms=now, grace_ms=older_than)
        candidates.append(Candidate(row, current, verdict))
    plan = plan_reclaim(
        candidates,
        counts=counts,
        live_topics=live_topic_ids(metadata.meta),
        prefix=scan.prefix,
        now_ms=now,
        older_than_ms=older_than,
        categories=options.categories,
        already_deleted=already,
        max_orphan_ratio=options.max_orphan_ratio,
        force=options.force,
    )
    skipped = plan.skipped_by_reason()
    planned = {"objects": plan.object_count, "bytes": plan.byte_count, "batches": len(plan.batches)}
    inputs = {"candidates": len(rows), "now_ms": now, "older_than_ms": older_than}
    log.info("reclaim.planned", bucket=rsm.bucket, **planned, execute=options.execute, **inputs)
    if skipped:
        log.info("reclaim.skipped", bucket=rsm.bucket, **skipped)
    for msg in plan.refusals:
        log.warning("reclaim.refused", message=msg)
    warnings.extend(plan.forced)
    base = ReclaimResult(
        executed=options.execute,
        bucket=rsm.bucket,
        older_than_ms=older_than,
        metadata_source=metadata.source,
        planned_objects=plan.object_count,
        planned_bytes=plan.byte_count,
        planned_by_category=plan.totals_by_category(),
        planned_by_topic=plan.totals_by_topic(),
        skipped=skipped,
        failed_keys=dict(head_failed),
        refusals=plan.refusals,
        run_refused=plan.run_refused,
        warnings=tuple(warnings),
    )
    if options.categories == c.RECLAIM_CAN_DELETE:  # every category: incomplete uploads too
        aborting = options.execute and not plan.run_refused
        uploads = reclaim_uploads(scan.out_dir, rsm=rsm, older_than_ms=older_than, execute=aborting, now_ms=now_ms)
        base = replace(base, uploads=uploads)
    if head_failed:
        log.error("reclaim.failed", phase="recheck", failed=len(head_failed), example=next(iter(head_failed.items())))
    if not options.execute or plan.run_refused:
        return base
    this_run_id = run_id or uuid.uuid4().hex
    return _execute(plan, base, rsm=rsm, journal=journal, now_ms=now_ms, on_progress=on_progress, run_id=this_run_id)


def _execute(
    plan: ReclaimPlan,
    base: ReclaimResult,
    *,
    rsm: S3RemoteStorage,
    journal: Journal,
    now_ms: Callable[[], int],
    on_progress: ProgressCallback | None,
    run_id: str,
) -> ReclaimResult:
    deleted_objects = deleted_bytes = 0
    failed = dict(base.failed_keys)
    total, done = plan.object_count, 0
    for number, batch in enumerate(plan.batches):
        keys = batch.keys
        intent = {
            "type": "intent",
            "run": run_id,
            "batch": number,
            "at_ms": now_ms(),
            "bucket": rsm.bucket,
            "prefix": batch.prefix,
            "topic_id": batch.topic_id,
            "keys": list(keys),
        }
        journal.append(intent)
        outcome = rsm.delete_keys(keys, within_prefix=batch.prefix)
        result = {
            "type": "result",
            "run": run_id,
            "batch": number,
            "at_ms": now_ms(),
            "bucket": rsm.bucket,
            "prefix": batch.prefix,
            "deleted": list(outcome.deleted),
            "failed": dict(outcome.failed),
        }
        journal.append(result)
        sizes = {o.key: o.size for o in batch.objects}
        batch_bytes = sum(sizes.get(k, 0) for k in outcome.deleted)
        deleted_objects += len(outcome.deleted)
        deleted_bytes += batch_bytes
        failed.update(outcome.failed)
        done += len(keys)
        counts = {"deleted": len(outcome.deleted), "bytes": batch_bytes, "failed": len(outcome.failed)}
        log.info("reclaim.batch_deleted", bucket=rsm.bucket, prefix=batch.prefix, topic_id=batch.topic_id, **counts)
        if outcome.failed:
            example = next(iter(outcome.failed.items()))
            log.error(
                "reclaim.failed", phase="delete", prefix=batch.prefix, failed=len(outcome.failed), example=example
            )
        if on_progress is not None:
            on_progress("delete", done, total)
    return replace(base, deleted_objects=deleted_objects, deleted_bytes=deleted_bytes, failed_keys=failed)
