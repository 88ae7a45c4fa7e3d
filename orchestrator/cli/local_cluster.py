"""``tieredctl cluster``: a local cluster (embedded S3, the SQLite store, controllers and brokers as separate
processes) started, inspected and stopped from one directory. ``up`` reports its steps on stderr (text only)."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli import options
from orchestrator.cli.context import Ctx
from orchestrator.local import cluster as local_cluster
from orchestrator.local.state import DEFAULT_BUCKET

cluster_dir_option = options.local_cluster_dir("--dir")


@click.group()
def cluster() -> None:
    """A local cluster: embedded S3, the SQLite store, controllers and brokers as separate processes."""


@cluster.command("up")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--controllers", default=2, show_default=True, type=click.IntRange(1, 9))
@cluster_dir_option
@options.s3_endpoint(help="use this S3 endpoint (MinIO, AWS) instead of the embedded one", envvar=None)
@options.bucket(help=None, default=DEFAULT_BUCKET)
@click.pass_obj
def cluster_up(
    obj: Ctx, brokers: int, controllers: int, cluster_dir: str, s3_endpoint: str | None, bucket: str
) -> None:
    """Start a local cluster in the background and wait until it is healthy."""
    state = local_cluster.up(
        Path(cluster_dir),
        brokers=brokers,
        controllers=controllers,
        s3_endpoint=s3_endpoint,
        bucket=bucket,
        progress=obj.output.progress,
    )
    obj.output.cluster_started(state)


@cluster.command("down")
@cluster_dir_option
@click.pass_obj
def cluster_down(obj: Ctx, cluster_dir: str) -> None:
    """Stop exactly the processes of the local cluster in DIR."""
    obj.output.cluster_stopped(local_cluster.down(Path(cluster_dir)))


@cluster.command("status")
@cluster_dir_option
@click.pass_obj
def cluster_status(obj: Ctx, cluster_dir: str) -> None:
    """Every process of the local cluster: role, id, pid, alive, and which controller is active."""
    obj.output.cluster_status(local_cluster.status(Path(cluster_dir)))
