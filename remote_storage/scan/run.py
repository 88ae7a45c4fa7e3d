"""One scan, end to end: open and verify the inventory, export the metadata if asked, run the Spark job, write
``summary.json`` and the HTML report. Shared by ``tieredctl scan run`` and ``python -m remote_storage.scan``
(the entry point ``spark-submit`` runs).

Invariants: the inventory is verified (every listed data file present, with its size; a local one's MD5s too) before
Spark reads a byte of it, and an ``s3://`` data file's MD5 is checked by the executor that reads it, before any of its
rows is used (:mod:`.sources`); nothing of an ``s3://`` inventory is copied to the driver's disk (executors on other
hosts could not read it there); the output directory holds a complete scan only when ``summary.json`` exists (it is
written after the Parquet outputs, atomically); the SparkSession is stopped only when this module started it.

Manifests: with a client for the bucket (``s3_client``, or ``manifest_access``), the executors read the segment
manifests the size rule needs from the inventory's source bucket, through the same endpoint and credentials as an
``s3://`` inventory's files; without, none is read (the contract's size rule says what that means).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from orchestrator.clock import wall_ms
from orchestrator.errors import RemoteStorageError
from remote_storage import inventory as inv
from remote_storage.export import export_store_file, read_export_source
from remote_storage.export_format import SEGMENTS_FILE
from remote_storage.s3 import S3RemoteStorage
from remote_storage.scan import class_archive
from remote_storage.scan import contract as c
from remote_storage.scan.job import ManifestSource, ScanSettings, run_scan
from remote_storage.scan.report import write_html_report
from remote_storage.scan.session import DEFAULT_DRIVER_MEMORY, build_session, small_inventory
from remote_storage.scan.sources import InventorySource, ObjectStoreAccess
from remote_storage.scan.summary import build_summary, write_summary
from remote_storage.scan.uploads import list_uploads, write_uploads

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ScanOutcome:
    summary: dict[str, Any]
    out_dir: Path
    report: Path | None

    @property
    def exit_status(self) -> int:
        return c.EXIT_ANOMALIES if self.summary["alert"]["exceeded"] else 0


def export_store(metadata_store: str | Path, out_dir: Path, *, password_file: Path | None = None) -> Path:
    """Export the metadata of the store ``metadata_store`` names (a SQLite file, or a ``postgresql://`` URL; read
    only) into ``out_dir/export``."""
    exported = export_store_file(metadata_store, out_dir / c.EXPORT_DIR, password_file=password_file)
    return exported.topics_path.parent


def recorded_prefixes(export_dir: Path, prefix: str) -> tuple[str, ...]:
    """The prefixes the export's segments record in their custom metadata, besides ``prefix``: an inventory must
    cover them for the scan to find those segments' objects."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    path = export_dir / SEGMENTS_FILE
    if "object_prefix" not in pq.read_schema(path).names:  # an export from before custom metadata
        return ()
    column = pq.read_table(path, columns=["object_prefix"]).column("object_prefix").unique().to_pylist()
    return tuple(sorted(p for p in column if p is not None and p != prefix))


def scan(
    *,
    inventory_uri: str,
    export_dir: Path,
    out_dir: Path,
    settings: ScanSettings,
    s3_client: S3Client | None = None,
    object_store: ObjectStoreAccess | None = None,
    manifest_access: ObjectStoreAccess | None = None,
    spark: Any = None,
    spark_master: str | None = None,
    driver_memory: str | None = None,
    progress: Callable[[str], None] | None = None,
    now_ms: Callable[[], int] = wall_ms,
) -> ScanOutcome:
    """Run one scan into ``out_dir``; ``spark`` is an existing session (tests, benches) or None to start one.

    ``object_store``: how the executors reach an ``s3://`` inventory's bucket (default: ``s3_client``'s endpoint and
    region with the driver's static credentials, :meth:`ObjectStoreAccess.of_client`). ``manifest_access``: how they
    reach the scanned bucket to read segment manifests (default: the same as ``s3_client``; none without either).
    """
    say = progress or (lambda _m: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    is_s3 = inventory_uri.startswith("s3://")
    say(f"verifying the inventory {inventory_uri} (manifest, sizes{'' if is_s3 else ', MD5s'})")
    # An s3:// inventory's MD5s are checked by the executors as they read its files: each is downloaded once.
    inventory = inv.read_inventory(
        inventory_uri, s3_client=s3_client, verify_checksums=not is_s3, max_examples=settings.max_examples
    )
    if is_s3 and object_store is None and s3_client is not None:
        object_store = ObjectStoreAccess.of_client(s3_client)
    source = InventorySource.from_inventory(inventory, access=object_store)
    if manifest_access is None and s3_client is not None:
        manifest_access = object_store or ObjectStoreAccess.of_client(s3_client)
    manifests = None if manifest_access is None else ManifestSource(source.source_bucket, manifest_access)
    own_session = False
    if spark is None:
        from pyspark.sql import SparkSession

        # getOrCreate hands back a session that is already running; only one we started is ours to stop.
        own_session = SparkSession.getActiveSession() is None
        say("starting Spark" if own_session else "using the running Spark session")
        spark = build_session(
            master=spark_master,
            driver_memory=driver_memory or DEFAULT_DRIVER_MEMORY,
            quick_jit=small_inventory(sum(f.size for f in inventory.manifest.files)),
            class_archive=class_archive.installed(),
        )
    try:
        agg = run_scan(spark, source, export_dir, out_dir, settings, progress=say, manifests=manifests)
    finally:
        if own_session:
            spark.stop()
    uploads = None
    if s3_client is not None:  # what no inventory lists: multipart uploads never completed nor aborted
        prefixes = (settings.prefix, *agg.object_prefixes)
        say(f"listing incomplete multipart uploads under {', '.join(prefixes)}")
        rsm = S3RemoteStorage(client=s3_client, bucket=source.source_bucket)
        try:
            uploads = list_uploads(rsm, prefixes, now_ms=now_ms())
            write_uploads(out_dir, uploads)
        except RemoteStorageError as exc:  # e.g. no s3:ListBucketMultipartUploads: the scan stands without them
            say(f"incomplete multipart uploads not listed: {exc.message}")
            log.warning("scan.uploads_not_listed", error=exc.message)
    metadata_source = read_export_source(export_dir)
    summary = build_summary(
        agg,
        source=source,
        export_dir=export_dir,
        settings=settings,
        generated_at_ms=now_ms(),
        metadata_source=metadata_source,
        uploads=uploads,
    )
    write_summary(summary, out_dir)
    report = write_html_report(out_dir)
    log.info(
        "scan.finished",
        out=str(out_dir),
        rows=summary["inventory"]["rows"],
        reclaimable_bytes=sum(summary["totals"]["reclaimable_bytes"].values()),
        anomalies=summary["totals"]["anomalies_total"],
        alert=summary["alert"]["exceeded"],
    )
    return ScanOutcome(summary, out_dir, report)
