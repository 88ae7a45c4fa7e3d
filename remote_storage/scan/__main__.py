"""``python -m remote_storage.scan``: the scan as a plain program, the application ``spark-submit`` runs.

Exit status: 0 the scan is complete and its anomalies are within the threshold; 3 (``contract.EXIT_ANOMALIES``)
complete but over the threshold, so a scheduler alerts; 1 the scan could not run (the message names the cause);
2 usage error. It takes no click dependency so that a cluster's driver needs only the project's packages.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from orchestrator.durations import parse_duration
from orchestrator.errors import TieredError
from orchestrator.logging import configure_logging
from remote_storage.s3 import make_s3_client
from remote_storage.scan import contract as c
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.run import export_store, scan


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except TieredError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m remote_storage.scan", description=__doc__.splitlines()[0])
    p.add_argument("--inventory", required=True, help="manifest.json (or its directory), local or s3://")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--export", type=Path, help="a metadata export directory (topics/segments/epochs.parquet)")
    src.add_argument("--metadata-store", type=Path, help="the SQLite metadata store to export before scanning")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--prefix", default="tiered/", help="the key prefix of tiered storage (default: tiered/)")
    p.add_argument("--grace", type=_duration, default=c.DEFAULT_GRACE_MS, help="e.g. 72h (default: 3d)")
    p.add_argument("--max-anomalies", type=int, default=0, help="alert (exit 3) above this many (default: 0)")
    p.add_argument("--spark-master", default=None, help="default: spark-submit's master, else local[2]")
    p.add_argument("--driver-memory", default=None, help="local mode only (default: 4g)")
    p.add_argument("--s3-endpoint", default=None, help="the object store's endpoint: MinIO, Ceph, moto (default: AWS)")
    p.add_argument(
        "--max-manifest-reads",
        type=int,
        default=c.DEFAULT_MAX_MANIFEST_READS,
        help="segment manifests the size check may read from the bucket, one GET each; more stops the scan; "
        f"0: none, sizes judged by the RLMM alone (default: {c.DEFAULT_MAX_MANIFEST_READS:,})",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging("cli", level=logging.INFO)
    try:
        # The inventory's files (s3://) and the segment manifests the size check reads are in the object store.
        client = make_s3_client(endpoint_url=args.s3_endpoint)
        export_dir = args.export or export_store(args.metadata_store, args.out)
        outcome = scan(
            inventory_uri=args.inventory,
            export_dir=export_dir,
            out_dir=args.out,
            settings=ScanSettings(
                prefix=args.prefix,
                grace_ms=args.grace,
                max_anomalies=args.max_anomalies,
                max_manifest_reads=args.max_manifest_reads,
            ),
            s3_client=client,
            spark_master=args.spark_master,
            driver_memory=args.driver_memory,
        )
    except TieredError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    alert = outcome.summary["alert"]
    print(
        f"scan complete: {outcome.summary['inventory']['rows']:,} rows, "
        f"{sum(outcome.summary['totals']['reclaimable_bytes'].values()):,} reclaimable bytes, "
        f"{alert['anomalies_total']:,} anomalies (threshold {alert['threshold']}); summary in {args.out}"
    )
    return outcome.exit_status


if __name__ == "__main__":
    sys.exit(main())
