"""``tieredctl inventory build``: list a bucket into an inventory in the AWS S3 Inventory format (CSV or Parquet),
for stores with no inventory service. The listing's object count is a transient bar on stderr (text only)."""

from __future__ import annotations

import click

from orchestrator.cli import options
from orchestrator.cli.bucket import BucketTarget, InventoryFormat, list_into_inventory
from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.views import Message


@click.group(cls=NounGroup)
def inventory() -> None:
    """Bucket inventories in the AWS S3 Inventory format."""


@inventory.command("build")
@options.bucket_location
@click.option("--dest", required=True, help="a local directory or s3://bucket/path/ for manifest.json and data/")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("--rows-per-file", default=1_000_000, show_default=True, type=click.IntRange(1, None))
@click.pass_obj
def inventory_build(
    obj: Ctx,
    bucket: str | None,
    prefix: str | None,
    s3_endpoint: str | None,
    cluster_dir: str,
    dest: str,
    fmt: InventoryFormat,
    rows_per_file: int,
) -> None:
    """List a bucket and write an inventory in the AWS S3 Inventory format (for stores with no inventory service)."""
    target = BucketTarget(cluster_dir, s3_endpoint, bucket, prefix)
    manifest = list_into_inventory(obj.output, target, dest=dest, fmt=fmt, rows_per_file=rows_per_file)
    data = {"manifest": manifest, "bucket": target.bucket, "prefix": target.prefix, "format": fmt}
    obj.output.show(Message(data, f"inventory of s3://{target.bucket}/{target.prefix} written: {manifest}"))
