"""``tieredctl scan``: the Spark scan of a bucket's inventory against the metadata (``run``), and its report
(``report``).

Exit status 3 when ``scan run`` found more anomalies than ``--max-anomalies`` (so a scheduler alerts); its steps
are reported on stderr (text only). Both print the scan's summary: the per-topic table and the report's path, or
with ``--output json`` the summary document itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli import options
from orchestrator.cli.bucket import BucketTarget, list_into_inventory
from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.kafka_source import export_from_kafka
from orchestrator.cli.views import ScanOverThreshold, ScanSummary
from orchestrator.metadata.open import parse_store_spec
from remote_storage.export_format import SOURCE_KAFKA, SOURCE_STORE, SOURCES
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from remote_storage.scan import contract as c

# The scan itself (Spark's driver, the S3 client, the report's templates) is imported by the commands that run it:
# tieredctl's other commands start without it.

SCAN_INVENTORY_ROWS_PER_FILE = 1_000_000


@click.group(cls=NounGroup)
def scan() -> None:
    """The Spark scan: reclaimable bytes and anomalies, per object and per topic."""


@scan.command("run")
@options.bucket_location
@click.option(
    "--inventory",
    "inventory_uri",
    default=None,
    help="manifest.json (or its directory), local or s3://; default: build one by listing the bucket",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--export",
    "export_dir",
    default=None,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="a metadata export directory; default: export --metadata-store now",
)
@options.metadata_store(help="the metadata store: a SQLite file or a postgresql:// URL (default: the local cluster's)")
@click.option(
    "--source",
    type=click.Choice(SOURCES),
    default=None,
    help="where the metadata comes from: the metadata store, or any Kafka cluster's Metadata, DescribeConfigs and "
    "remote log metadata topic (--bootstrap-server) [default: kafka with --bootstrap-server, else store]",
)
@click.option(
    "--rlmm-topic",
    default=TOPIC_NAME,
    show_default=True,
    help="--source kafka: the remote log metadata topic to read (every record of every partition)",
)
@click.option(
    "--grace",
    "grace_ms",
    default="3d",
    show_default=True,
    callback=options.parse_duration_ms,
    help="objects younger than this are never reclaimable (longer than an upload plus the inventory lag)",
)
@click.option(
    "--max-anomalies",
    default=0,
    show_default=True,
    type=click.IntRange(0, None),
    help="exit 3 when the anomalies exceed this",
)
@click.option(
    "--max-manifest-reads",
    default=c.DEFAULT_MAX_MANIFEST_READS,
    show_default=True,
    type=click.IntRange(0, None),
    help="segment manifests the size check may read (one GET each); more stops the scan; 0: judge sizes by the RLMM",
)
@click.option("--spark-master", default=None, help="default: local[2]")
@click.option("--driver-memory", default=None, help="default: 4g (local mode)")
@click.pass_obj
def scan_run(
    obj: Ctx,
    bucket: str | None,
    prefix: str | None,
    s3_endpoint: str | None,
    cluster_dir: str,
    inventory_uri: str | None,
    out_dir: Path,
    export_dir: Path | None,
    metadata_store: str | None,
    source: str | None,
    rlmm_topic: str,
    grace_ms: int,
    max_anomalies: int,
    max_manifest_reads: int,
    spark_master: str | None,
    driver_memory: str | None,
) -> None:
    """Classify every object of the bucket's inventory: reclaimable bytes and anomalies, per object and per topic.

    Writes OUT/objects.parquet, OUT/anomalies.parquet, OUT/summary.json and OUT/report.html. Exit status 3 when the
    anomalies exceed --max-anomalies (so a scheduler alerts).

    With --source kafka the metadata is read from the cluster (--bootstrap-server, --command-config): topics and
    configs, and every record of its remote log metadata topic, which must keep them all (retention.ms and
    retention.bytes -1, every partition from offset 0): otherwise the scan refuses, exit 1, nothing written.
    """
    from remote_storage.scan.job import ScanSettings
    from remote_storage.scan.report import render_text
    from remote_storage.scan.run import export_store, recorded_prefixes
    from remote_storage.scan.run import scan as run_scan

    out = obj.output

    def step(message: str) -> None:
        out.progress(message, level=1)

    target = BucketTarget(cluster_dir, s3_endpoint, bucket, prefix)
    source = source or metadata_source(obj, export_dir=export_dir, metadata_store=metadata_store)
    if source == SOURCE_KAFKA:
        if export_dir is not None or metadata_store is not None:
            raise click.UsageError(
                "--source kafka reads the cluster's metadata: it takes no --export or --metadata-store"
            )
        step(f"reading the metadata of the Kafka cluster at {obj.bootstrap()} (topic {rlmm_topic})")
        export_dir = out_dir / c.EXPORT_DIR
        export_from_kafka(obj, export_dir, rlmm_topic=rlmm_topic, progress=step)
    if export_dir is None:
        store = metadata_store or target.metadata_store
        if store is None:
            raise click.UsageError(
                f"pass --export DIR or --metadata-store PATH (no local cluster in {target.cluster_dir} holds the "
                "metadata of this bucket)"
            )
        step(f"exporting the metadata of {parse_store_spec(store).location}")
        password_file = target.store_password_file if metadata_store is None else None
        export_dir = export_store(store, out_dir, password_file=password_file)
    if inventory_uri is None:
        # Segments may record other prefixes (Aiven's custom metadata): the inventory lists those too.
        also = recorded_prefixes(export_dir, target.prefix)
        listed = ", ".join(f"s3://{target.bucket}/{p}" for p in (target.prefix, *also))
        step(f"building an inventory of {listed}")
        dest = str(out_dir / "inventory")
        inventory_uri = list_into_inventory(
            out, target, dest=dest, fmt="parquet", rows_per_file=SCAN_INVENTORY_ROWS_PER_FILE, also_prefixes=also
        )
    # The bucket's client: for an s3:// inventory's files and for the segment manifests the size check reads.
    client = target.client()
    access = target.executor_access(client)
    settings = ScanSettings(
        prefix=target.prefix,
        grace_ms=grace_ms,
        max_anomalies=max_anomalies,
        max_manifest_reads=max_manifest_reads,
    )
    outcome = run_scan(
        inventory_uri=inventory_uri,
        export_dir=export_dir,
        out_dir=out_dir,
        settings=settings,
        s3_client=client,
        object_store=access,
        manifest_access=access,
        spark_master=spark_master,
        driver_memory=driver_memory,
        progress=step,
    )
    out.show(ScanSummary(outcome.summary, outcome.report, render_text))
    if outcome.exit_status:
        out.show(ScanOverThreshold(outcome.summary, threshold=max_anomalies, exit_status=outcome.exit_status))
    sys.exit(outcome.exit_status)


def metadata_source(obj: Ctx, *, export_dir: Path | None, metadata_store: str | None) -> str:
    """The default --source: kafka when a cluster is named (--bootstrap-server) and no store or export is."""
    named_cluster = obj.bootstrap_server is not None
    return SOURCE_KAFKA if named_cluster and export_dir is None and metadata_store is None else SOURCE_STORE


@scan.command("report")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--max-anomaly-rows",
    default=200,
    show_default=True,
    type=click.IntRange(0, None),
    help="anomaly rows shown in the page (all are in anomalies.parquet)",
)
@click.pass_obj
def scan_report(obj: Ctx, directory: Path, max_anomaly_rows: int) -> None:
    """Re-render DIRECTORY/report.html from a scan's summary.json; print the per-topic totals."""
    from remote_storage.scan.report import render_text, write_html_report
    from remote_storage.scan.summary import load_summary

    summary = load_summary(directory)
    path = write_html_report(directory, max_anomaly_rows=max_anomaly_rows)
    obj.output.show(ScanSummary(summary, path, render_text))
