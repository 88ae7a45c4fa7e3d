"""Stopping a local cluster (``cluster down``), and deleting its files when asked in so many words (``--purge``).

Invariants:
* ``down`` stops exactly the processes recorded in ``cluster.json`` (brokers, then controllers, then the embedded
  S3, which writes its objects to disk as it stops) and keeps every file, so ``up`` on the directory resumes it.
* Only a purge deletes, and exactly the files of :data:`~orchestrator.local.state.CLUSTER_FILES`: objects in an
  external bucket and the metadata in an external PostgreSQL store are never deleted (a warning says so).
* A purge kills the embedded S3 rather than stopping it: its objects are about to be deleted, no snapshot is due.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.local import s3_snapshot
from orchestrator.local.processes import S3_STOP_TIMEOUT_S, kill_process, stop_process
from orchestrator.local.state import CLUSTER_FILES, LocalClusterState, ProcessInfo, Stopped, is_ours
from orchestrator.metadata.open import parse_store_spec

STOP_ORDER = {"broker": 0, "controller": 1, "s3": 2}


def down(directory: Path, *, purge: bool = False, timeout_s: float = 20.0) -> Stopped:
    """Stop every process of the cluster (brokers, then controllers, then S3). Nothing is deleted unless ``purge``:
    the data directories, the store and, on the embedded S3, its objects (written to disk as it stops) stay, and
    ``up`` on the same directory resumes the cluster. With ``purge`` every file of the cluster is deleted too
    (objects in an external bucket are not)."""
    directory = directory.resolve()
    try:
        state = LocalClusterState.load_if_present(directory)
    except LocalClusterError:
        if not purge:
            raise
        state = None  # an unreadable record names no process to stop: purge deletes the files
    if state is None:
        if purge:
            return Stopped([], str(directory), purged=True, deleted=purge_files(directory), resumable=False)
        LocalClusterState.load(directory)  # raises: no cluster here
        raise AssertionError("unreachable")
    stopped = _stop_all(state, purge=purge, timeout_s=timeout_s)
    warnings = _external_data_warnings(state, purge=purge)
    if purge:
        deleted = purge_files(directory)
        return Stopped(stopped, str(directory), purged=True, deleted=deleted, resumable=False, warnings=warnings)
    state.save()
    s3_objects = None
    if state.embedded_s3:
        found = s3_snapshot.status(directory / s3_snapshot.SNAPSHOT_DIR)
        if found.status is s3_snapshot.SnapshotStatus.STOPPED:
            s3_objects = found.objects
        else:
            warnings.append(
                "the embedded S3 did not write its objects to disk (it was not running, or failed: see "
                f"{directory / 'logs' / 's3-0.log'}); its objects are gone and 'cluster up' will not resume this "
                f"cluster; 'tieredctl cluster down --purge --dir {directory}' deletes it"
            )
    resumable = not state.embedded_s3 or s3_objects is not None
    return Stopped(stopped, str(directory), s3_objects=s3_objects, resumable=resumable, warnings=warnings)


def _stop_all(state: LocalClusterState, *, purge: bool, timeout_s: float) -> list[ProcessInfo]:
    """Stop the cluster's processes in :data:`STOP_ORDER`; returns those that were running."""
    stopped = []
    for p in sorted(state.processes, key=lambda p: STOP_ORDER[p.role]):
        was = is_ours(p)
        if p.role == "s3" and purge:
            kill_process(p)  # its objects are about to be deleted: no snapshot
        else:
            stop_process(p, timeout_s=S3_STOP_TIMEOUT_S if p.role == "s3" else timeout_s)
        if was:
            stopped.append(p)
    return stopped


def _external_data_warnings(state: LocalClusterState, *, purge: bool) -> list[str]:
    """What ``down`` leaves where it cannot delete: the external bucket's objects and the external store."""
    warnings = []
    if not state.embedded_s3:
        where = f"s3://{state.bucket}/{state.prefix} at {state.s3_endpoint}"
        warnings.append(f"objects in {where} are not deleted" if purge else f"objects stay in {where}")
    if state.store is not None and purge:
        location = parse_store_spec(state.store).location
        warnings.append(f"the metadata in the external store {location} is not deleted (drop it yourself)")
    return warnings


def purge_files(directory: Path) -> list[str]:
    """Delete every file of a cluster in ``directory`` (:data:`CLUSTER_FILES`); returns the paths deleted."""
    deleted = []
    for name in CLUSTER_FILES:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        deleted.append(str(path))
    return deleted
