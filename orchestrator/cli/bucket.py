"""Where the bucket of tiered storage is, and listing it into an inventory (``inventory build`` and ``scan run``).

Explicit options win; otherwise the local cluster in ``--cluster-dir`` (when one was started there) supplies the S3
endpoint, bucket, prefix and metadata store, and for its embedded S3 the key pair that server takes. No bucket from
either is a usage error (exit status 2), raised only by what lists or reads the bucket itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click
from rich.progress import TextColumn, TimeElapsedColumn

from orchestrator.cli.output import Output
from orchestrator.cli.progress import progress_bar
from orchestrator.local.state import DEFAULT_PREFIX, LocalClusterState
from remote_storage.inventory import build_inventory
from remote_storage.s3 import make_s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

InventoryFormat = Literal["csv", "parquet"]


class BucketTarget:
    """Where the bucket is: explicit options, else the local cluster in --cluster-dir (when one was started)."""

    def __init__(self, cluster_dir: str, s3_endpoint: str | None, bucket: str | None, prefix: str | None) -> None:
        state = LocalClusterState.load_if_present(Path(cluster_dir))
        self.cluster_dir = cluster_dir
        self.s3_endpoint = s3_endpoint or (state.s3_endpoint if state else None)
        self.prefix = prefix if prefix is not None else (state.prefix if state else DEFAULT_PREFIX)
        self.metadata_store = state.metadata_store if state else None
        self._bucket = bucket or (state.bucket if state else None)
        # The local cluster's embedded S3 takes its own key pair, so it works with nothing set in the environment.
        on_cluster_s3 = state is not None and self.s3_endpoint == state.s3_endpoint
        self._credentials = state.s3_credentials if state is not None and on_cluster_s3 else None

    @property
    def bucket(self) -> str:
        """Asked for only by what lists or reads the bucket itself."""
        if not self._bucket:
            raise click.UsageError(
                f"which bucket? pass --bucket (no local cluster in {self.cluster_dir} to take it from)"
            )
        return self._bucket

    def client(self) -> S3Client:
        access_key_id, secret_access_key = self._credentials or (None, None)
        return make_s3_client(
            endpoint_url=self.s3_endpoint, access_key_id=access_key_id, secret_access_key=secret_access_key
        )


def list_into_inventory(
    output: Output, target: BucketTarget, *, dest: str, fmt: InventoryFormat, rows_per_file: int
) -> str:
    """List the bucket under the prefix into an inventory at ``dest``, counting objects on a transient bar;
    return the manifest's location."""
    client = target.client()
    listing = TextColumn(f"listing s3://{target.bucket}/{target.prefix}")
    columns = (listing, TextColumn("{task.completed:,} objects"), TimeElapsedColumn())
    with progress_bar(output, *columns, transient=True) as bar:
        task = bar.add_task("list", total=None)

        def progress(n: int) -> None:
            bar.update(task, completed=n)

        now_ms = int(time.time() * 1000)
        return build_inventory(
            client,
            bucket=target.bucket,
            prefix=target.prefix,
            dest=dest,
            fmt=fmt,
            now_ms=now_ms,
            rows_per_file=rows_per_file,
            progress=progress,
        )
