"""Run every benchmark section. ``python -m bench [section ...]``; sections: metadata, metadata-postgres, snapshots,
delete, controller, failover-postgres, copy, remote-format, scan, dataplane, replication, local-restart."""

from __future__ import annotations

import sys
import traceback

from bench import (
    controller,
    copy,
    dataplane,
    delete_end_to_end,
    delete_policy,
    failover_postgres,
    local_restart,
    metadata_log,
    metadata_postgres,
    remote_format,
    replication,
    scan,
    snapshots,
)
from bench.report import Figure


def _delete() -> list[Figure]:
    """The delete plan alone, then the disablement end to end from the CLI."""
    return [*delete_policy.run(), *delete_end_to_end.run()]


SECTIONS = {
    "metadata": metadata_log.run,
    "metadata-postgres": metadata_postgres.run,
    "snapshots": snapshots.run,
    "delete": _delete,
    "controller": controller.run,
    "failover-postgres": failover_postgres.run,
    "copy": copy.run,
    "remote-format": remote_format.run,
    "scan": scan.run,
    "dataplane": dataplane.run,
    "replication": replication.run,
    "local-restart": local_restart.run,
}


def main() -> None:
    wanted = sys.argv[1:] or list(SECTIONS)
    unknown = [w for w in wanted if w not in SECTIONS]
    if unknown:
        sys.exit(f"unknown bench section(s) {unknown}; choose from {list(SECTIONS)}")
    failed: list[str] = []
    for name in wanted:
        try:
            SECTIONS[name]()
        except Exception:  # one section's failure must not hide the others' figures: it is reported, and fails the run
            traceback.print_exc()
            print(f"bench section {name!r} failed (traceback above); going on with the others", file=sys.stderr)
            failed.append(name)
    if failed:
        sys.exit(f"bench section(s) {failed} failed; the other sections' figures are above")


if __name__ == "__main__":
    main()
