"""``tieredctl cluster``: a local cluster (embedded S3, the SQLite store or ``--store postgresql://...``,
controllers and brokers as separate processes) started, inspected and stopped from one directory. ``up`` reports
its steps on stderr (text only)."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli import options
from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.views import ClusterStarted, ClusterStatus, ClusterStopped
from orchestrator.local.state import DEFAULT_BUCKET

# orchestrator.local.cluster (process control, certificates, the S3 client) is imported by the commands that use it:
# every other command of tieredctl starts without it.

cluster_dir_option = options.local_cluster_dir("--dir")


@click.group(cls=NounGroup)
def cluster() -> None:
    """A local cluster: embedded S3, the SQLite store, controllers and brokers as separate processes."""


@cluster.command("up")
@click.option("--brokers", default=None, type=click.IntRange(1, 64), help="brokers of a new cluster  [default: 3]")
@click.option(
    "--controllers", default=None, type=click.IntRange(1, 9), help="controllers of a new cluster  [default: 2]"
)
@cluster_dir_option
@options.s3_endpoint(help="use this S3 endpoint (MinIO, AWS) instead of the embedded one", envvar=None)
@options.bucket(help=f"bucket of a new cluster  [default: {DEFAULT_BUCKET}]", default=None)
@click.option(
    "--store",
    default=None,
    metavar="postgresql://USER@HOST/DB",
    help="keep the metadata in this (empty) PostgreSQL database instead of DIR/metadata.db; the password comes "
    "from TIEREDCTL_STORE_PASSWORD or PGPASSWORD (or the URL: then it is kept in DIR/config/store-password, 0600)",
)
@click.option(
    "--tls",
    is_flag=True,
    help="a new cluster speaks TLS on every port: a local CA and one certificate per process and for the admin "
    "(DIR/security/tls/); a verified client certificate's CN is its principal",
)
@click.option(
    "--sasl",
    is_flag=True,
    help="a new cluster asks every connection without a certificate for a SCRAM-SHA-256/512 login; the user "
    "'admin' gets a random password (DIR/security/passwords/admin)",
)
@click.option(
    "--acls", is_flag=True, help="a new cluster checks Kafka ACLs on every request; User:admin is the super user"
)
@click.pass_obj
def cluster_up(
    obj: Ctx,
    brokers: int | None,
    controllers: int | None,
    cluster_dir: str,
    s3_endpoint: str | None,
    bucket: str | None,
    store: str | None,
    tls: bool,
    sasl: bool,
    acls: bool,
) -> None:
    """Start a local cluster in the background and wait until it is healthy.

    On a directory that holds a stopped cluster, resume it: same topics, every record readable, tiered data
    served from S3, and the security it was started with. On a cluster of which some processes died, start just
    those again, on their addresses (not the embedded S3: its objects died with it).

    With --tls, --sasl or --acls, DIR/client.properties says how the admin connects (Kafka's client properties);
    tieredctl uses it by itself when it talks to the local cluster, and Kafka clients take it as it is."""
    from orchestrator.local import cluster as local_cluster
    from orchestrator.local.security import LocalSecurity

    state = local_cluster.up(
        Path(cluster_dir),
        brokers=brokers,
        controllers=controllers,
        s3_endpoint=s3_endpoint,
        bucket=bucket,
        store=store,
        security=LocalSecurity(tls=tls, sasl=sasl, acls=acls),
        progress=obj.output.progress,
    )
    obj.output.show(ClusterStarted(state))


@cluster.command("down")
@cluster_dir_option
@click.option(
    "--purge",
    is_flag=True,
    help="also delete every file of the cluster: its records, its store and the embedded S3's objects",
)
@click.pass_obj
def cluster_down(obj: Ctx, cluster_dir: str, purge: bool) -> None:
    """Stop exactly the processes of the local cluster in DIR; its data stays, and 'cluster up' resumes it.

    With --purge, delete the cluster as well: cluster.json, config/, run/, data/ (every broker's records), logs/,
    the metadata store and s3/ (the embedded S3's objects). Objects in an external bucket are not deleted, nor is
    the metadata in an external PostgreSQL store (--store)."""
    from orchestrator.local import cluster as local_cluster

    obj.output.show(ClusterStopped(local_cluster.down(Path(cluster_dir), purge=purge)))


@cluster.command("status")
@cluster_dir_option
@click.pass_obj
def cluster_status(obj: Ctx, cluster_dir: str) -> None:
    """Every process of the local cluster: role, id, pid, alive, which controller is active, and the URL of each
    controller's and broker's Prometheus metrics."""
    from orchestrator.local import cluster as local_cluster

    obj.output.show(ClusterStatus(local_cluster.status(Path(cluster_dir))))
