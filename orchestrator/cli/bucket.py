"""Where the bucket of tiered storage is, and listing it into an inventory (``inventory build``, ``scan run`` and
``reclaim``, all three through :class:`BucketTarget`).

Explicit options win; ``reclaim`` then takes the bucket and prefix its scan was of; otherwise the local cluster in
``--cluster-dir`` (when one was started there) supplies the S3 endpoint, bucket and prefix. For its embedded S3 it
also supplies the key pair that server takes, so these commands need nothing in the environment; any other endpoint
gets credentials the usual AWS way (environment, profile, instance role), and none at all is MISSING_CREDENTIALS.
The cluster's metadata store is the default store only for the cluster's own bucket and prefix on its own endpoint:
re-checking another bucket's objects against it would call that bucket's live segments orphans. No bucket from
anywhere is a usage error (exit status 2), raised only by what lists or reads the bucket itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click
from rich.progress import TextColumn, TimeElapsedColumn

from orchestrator.cli.output import Output
from orchestrator.cli.progress import progress_bar
from orchestrator.clock import wall_ms
from orchestrator.local.state import DEFAULT_PREFIX, LocalClusterState

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from remote_storage.scan.sources import ObjectStoreAccess

# The S3 client (botocore) and the inventory builder are imported by what lists or reads the bucket: tieredctl's
# other commands start without them.

InventoryFormat = Literal["csv", "parquet"]


class BucketTarget:
    """Where the bucket is: explicit options, else the scan's (``scanned``), else the local cluster in --cluster-dir
    (when one was started there)."""

    def __init__(
        self,
        cluster_dir: str,
        s3_endpoint: str | None,
        bucket: str | None,
        prefix: str | None,
        *,
        scanned: tuple[str, str] | None = None,
    ) -> None:
        """``scanned``: the (bucket, prefix) a scan's output is of, for a command acting on it (``reclaim``)."""
        state = LocalClusterState.load_if_present(Path(cluster_dir))
        if scanned is not None:
            bucket = bucket or scanned[0]
            prefix = prefix if prefix is not None else scanned[1]
        self.cluster_dir = cluster_dir
        self.s3_endpoint = s3_endpoint or (state.s3_endpoint if state else None)
        self.prefix = prefix if prefix is not None else (state.prefix if state else DEFAULT_PREFIX)
        self._bucket = bucket or (state.bucket if state else None)
        # The local cluster counts only on its own S3 endpoint: there its embedded S3 takes the cluster's key pair
        # (nothing needed in the environment), and for its own bucket and prefix its store holds the metadata.
        local = state if state is not None and self.s3_endpoint == state.s3_endpoint else None
        self._credentials = local.s3_credentials if local is not None else None
        own_bucket = local is not None and (local.bucket, local.prefix) == self.location
        mine = local if local is not None and own_bucket else None
        self.metadata_store: str | None = mine.store_spec if mine is not None else None  # a file or a URL
        password_file = mine.store_password_file if mine is not None and mine.store else None
        self.store_password_file: Path | None = password_file if password_file and password_file.is_file() else None

    @property
    def location(self) -> tuple[str | None, str]:
        """(bucket or None, prefix), without raising."""
        return self._bucket, self.prefix

    @property
    def bucket(self) -> str:
        """Asked for only by what lists or reads the bucket itself."""
        if not self._bucket:
            raise click.UsageError(
                f"which bucket? pass --bucket (no local cluster in {self.cluster_dir} to take it from)"
            )
        return self._bucket

    def client(self) -> S3Client:
        from remote_storage.s3 import make_s3_client

        access_key_id, secret_access_key = self._credentials or (None, None)
        return make_s3_client(
            endpoint_url=self.s3_endpoint, access_key_id=access_key_id, secret_access_key=secret_access_key
        )

    def executor_access(self, client: S3Client) -> ObjectStoreAccess:
        """How the scan's executors reach the bucket: the local cluster's key pair for its embedded S3, else the
        driver's credentials when they are static (:meth:`ObjectStoreAccess.of_client`)."""
        from remote_storage.scan.sources import ObjectStoreAccess

        if self._credentials is None:
            return ObjectStoreAccess.of_client(client)
        access_key_id, secret_access_key = self._credentials
        region = client.meta.region_name or "us-east-1"
        return ObjectStoreAccess(self.s3_endpoint, region, access_key_id, secret_access_key)


def list_into_inventory(
    output: Output,
    target: BucketTarget,
    *,
    dest: str,
    fmt: InventoryFormat,
    rows_per_file: int,
    also_prefixes: tuple[str, ...] = (),
) -> str:
    """List the bucket under the prefix (and ``also_prefixes``) into an inventory at ``dest``, counting objects on a
    transient bar; return the manifest's location."""
    from remote_storage.inventory import build_inventory

    client = target.client()
    listing = TextColumn(f"listing s3://{target.bucket}/{target.prefix}")
    columns = (listing, TextColumn("{task.completed:,} objects"), TimeElapsedColumn())
    with progress_bar(output, *columns, transient=True) as bar:
        task = bar.add_task("list", total=None)

        def progress(n: int) -> None:
            bar.update(task, completed=n)

        now_ms = wall_ms()
        return build_inventory(
            client,
            bucket=target.bucket,
            prefix=target.prefix,
            dest=dest,
            fmt=fmt,
            now_ms=now_ms,
            rows_per_file=rows_per_file,
            progress=progress,
            also_prefixes=also_prefixes,
        )
