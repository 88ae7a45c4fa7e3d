"""What ``cluster status`` reports: every process of a local cluster, whether it runs, which controller is active,
and where the cluster answers. Reads the record, /proc and the store's lease: it connects to no process.

A store that cannot be read (a PostgreSQL server down or unreachable) does not hide the processes: they are listed,
alive or not, with ``store_error`` saying why the store could not be read and every controller's ``active`` null
(unknown), not an error instead of the whole answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.clock import wall_ms
from orchestrator.errors import KafkaStorageError
from orchestrator.local.cluster_store import open_cluster_store
from orchestrator.local.state import CLIENT_PROPERTIES, LocalClusterState, ProcessInfo, is_ours
from orchestrator.metadata.open import parse_store_spec


def status(directory: Path) -> dict[str, Any]:
    """The contract of ``cluster status --output json``."""
    state = LocalClusterState.load(directory.resolve())
    active, store_error = None, None
    try:
        active = _active_controller(state)
    except KafkaStorageError as exc:
        store_error = str(exc)
    return {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap_server,
        "s3_endpoint": state.s3_endpoint,
        "bucket": state.bucket,
        "prefix": state.prefix,
        "store": parse_store_spec(state.store_spec).location,  # never a password
        "security": {"tls": state.tls, "sasl": state.sasl, "acls": state.acls},
        "client_properties": str(Path(state.dir) / CLIENT_PROPERTIES) if state.tls or state.sasl else None,
        # The file holding the key pair the embedded S3 requires (its path only, never the key); None: none.
        "s3_credentials_file": str(state.s3_credentials_file) if state.s3_credentials_file else None,
        "store_error": store_error,
        "processes": [_process_entry(p, active, state, known=store_error is None) for p in state.processes],
    }


def _active_controller(state: LocalClusterState) -> int | None:
    """The node id of the controller holding an unexpired lease, from the store (None: none, or no store yet)."""
    if state.store is None and not state.metadata_store.exists():
        return None
    with open_cluster_store(state) as s:
        lease = s.current_lease()
    if lease is None or lease.expired(wall_ms()):
        return None
    return int(lease.holder.split("@", 1)[0]) if "@" in lease.holder else None


def _process_entry(p: ProcessInfo, active: int | None, state: LocalClusterState, *, known: bool) -> dict[str, Any]:
    """``known``: whether ``active`` could be read (not: a live controller's ``active`` is null, unknown)."""
    alive = is_ours(p)
    entry: dict[str, Any] = {"role": p.role, "id": p.id, "pid": p.pid, "port": p.port, "alive": alive, "log": p.log}
    scheme = "https" if state.metrics_tls else "http"  # https: a client certificate of the cluster's CA is required
    entry["metrics_url"] = f"{scheme}://127.0.0.1:{p.metrics_port}/metrics" if p.metrics_port else None
    if p.role == "controller":
        entry["active"] = None if alive and not known else alive and p.id == active
    return entry
