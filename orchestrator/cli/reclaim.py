"""``tieredctl reclaim DIR``: delete what a scan found reclaimable, after re-checking every object now.

A dry run unless ``--execute``. The bucket and prefix are the scan's; the S3 endpoint, its credentials and the
metadata store to re-check against come from the local cluster in ``--cluster-dir`` as for ``inventory`` and
``scan`` (:class:`~orchestrator.cli.bucket.BucketTarget`), explicit options overriding.

A scan whose metadata was read from a Kafka cluster (``scan run --source kafka``) is re-checked against that
cluster: its remote log metadata topic is read again (``--bootstrap-server``, else the address the scan
recorded), with the scan's refusal when the topic may have lost records.

Re-check and delete progress is a transient bar on stderr (text only); warnings (e.g. no current metadata) come
before the result and refusals and failures after it, on stderr. Exit status 1 when an object could not be
re-checked or deleted, or a guard refused the whole run.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.cli import options
from orchestrator.cli.bucket import BucketTarget
from orchestrator.cli.command import LeafCommand
from orchestrator.cli.context import Ctx
from orchestrator.cli.kafka_source import export_from_kafka
from orchestrator.cli.progress import progress_bar
from orchestrator.cli.views import ReclaimOutcome
from orchestrator.clock import wall_ms
from orchestrator.errors import TieredError
from remote_storage.export_format import SOURCE_KAFKA, ExportSource

if TYPE_CHECKING:
    from policies import reclaim_executor as rx

# The executor (the classifier, S3 and the segment formats) is imported when reclaim runs: tieredctl's other
# commands start without it.

PHASE_LABELS = {"recheck": "re-checking objects", "delete": "deleting"}


@click.command("reclaim", cls=LeafCommand)
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--execute", is_flag=True, help="delete; without it this is a dry run that deletes nothing")
@click.option(
    "--older-than",
    callback=options.parse_duration_ms,
    metavar="DURATION",
    help="only objects last modified at least this long ago: 72h, 30m, 3d, 0s [default: the scan's grace]",
)
@click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="C",
    help="reclaim only this category, repeatable [default: every category reclaim may delete]",
)
@options.scanned_bucket_location
@options.metadata_store(
    help="the cluster's metadata store (a SQLite file or a postgresql:// URL), to re-check against current metadata "
    "[default: the local cluster's, for its own bucket; else the scan's export, with a warning]"
)
@click.option(
    "--max-orphan-ratio",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="refuse a live topic (or the whole run, for unknown topic ids) above this share of orphans",
)
@click.option("--force", is_flag=True, help="delete even when an orphan-ratio guard refuses")
@click.pass_obj
def reclaim(
    obj: Ctx,
    directory: str,
    execute: bool,
    older_than: int | None,
    categories: tuple[str, ...],
    bucket: str | None,
    prefix: str | None,
    s3_endpoint: str | None,
    cluster_dir: str,
    metadata_store: str | None,
    max_orphan_ratio: float,
    force: bool,
) -> None:
    """Delete what the scan in DIR found reclaimable, after re-checking each object now (a dry run unless --execute).

    Each object is looked up again (HEAD) and re-classified against current metadata; objects that changed, became
    live, are younger than --older-than or lie outside their topic's prefix are skipped with a reason. Deletes
    are batched per topic prefix and journaled in DIR/reclaim-journal.jsonl; a second run deletes nothing more.
    Exit status 1 when an object could not be re-checked or deleted, or a guard refused the whole run.
    """
    from policies import reclaim_executor as rx
    from policies.reclaim import reclaim_categories
    from remote_storage.export import read_export_source
    from remote_storage.s3 import S3RemoteStorage

    out = obj.output
    try:
        wanted = reclaim_categories(categories)
    except TieredError as exc:
        raise click.BadParameter(exc.message, param_hint="--category") from exc

    scan_out = rx.ScanOutput.load(directory)
    scanned = (scan_out.bucket, scan_out.prefix)
    target = BucketTarget(cluster_dir, s3_endpoint, bucket, prefix, scanned=scanned)
    scanned_source = ExportSource()
    if scan_out.export_dir is not None and scan_out.export_dir.is_dir():
        scanned_source = read_export_source(scan_out.export_dir)
    if scanned_source.source == SOURCE_KAFKA:
        if metadata_store is not None:
            raise click.UsageError(
                "the scan read its metadata from a Kafka cluster: reclaim re-checks against that cluster "
                "(--bootstrap-server), not a --metadata-store"
            )
        metadata = kafka_metadata(obj, scanned_source)
    else:
        store = metadata_store or target.metadata_store
        password_file = target.store_password_file if metadata_store is None else None
        metadata = rx.load_current_metadata(
            store_path=store, scan_export_dir=scan_out.export_dir, now_ms=wall_ms(), password_file=password_file
        )
    rsm = S3RemoteStorage(client=target.client(), bucket=target.bucket, prefix=target.prefix)
    reclaim_options = rx.ReclaimOptions(
        execute=execute, older_than_ms=older_than, categories=wanted, max_orphan_ratio=max_orphan_ratio, force=force
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress_bar(out, *columns, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(PHASE_LABELS.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = rx.reclaim(
            scan_out, rsm=rsm, metadata=metadata, options=reclaim_options, now_ms=wall_ms, on_progress=progress
        )
    for warning in result.warnings:
        out.warning(warning)
    out.show(ReclaimOutcome(result))
    for refusal in result.refusals:
        out.error(refusal)
    if result.failed_keys:
        key, why = next(iter(result.failed_keys.items()))
        failure = f"{len(result.failed_keys)} object(s) could not be re-checked or deleted, e.g. {key}: {why}"
        out.error(f"{failure}; they were not deleted: run the same command again to retry them")
    if not result.ok:
        sys.exit(1)


def kafka_metadata(obj: Ctx, scanned: ExportSource) -> rx.CurrentMetadata:
    """The current metadata of the Kafka cluster a scan read (``--bootstrap-server``, else the one it recorded),
    read again from its remote log metadata topic, with the same refusal when that topic may have lost records."""
    from policies import reclaim_executor as rx

    recorded = obj.bootstrap_server is None
    cluster = obj.with_global_options(bootstrap_server=scanned.bootstrap_servers) if recorded else obj
    rlmm_topic = scanned.rlmm_topic or ""
    try:
        with tempfile.TemporaryDirectory(prefix="tieredctl-reclaim-") as tmp:
            obj.output.progress(f"re-reading {rlmm_topic} of the Kafka cluster at {cluster.bootstrap()}")
            step = functools.partial(obj.output.progress, level=1)
            export_from_kafka(cluster, Path(tmp), rlmm_topic=rlmm_topic, progress=step)
            source = f"kafka {cluster.bootstrap()} {rlmm_topic}"
            return rx.current_metadata_of_export(Path(tmp), source=source, now_ms=wall_ms())
    finally:
        if recorded:  # a session of its own: the command closes only its context's
            cluster.session.close()
