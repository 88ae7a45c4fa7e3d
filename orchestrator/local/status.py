"""What ``cluster status`` reports: every process of a local cluster, whether it runs, which controller is active,
where the cluster answers, and the partitions with fewer in-sync replicas than replicas (under-replicated, with
their eligible leader replicas). Reads
the record, /proc and the store (its lease and metadata log): it connects to no process.

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
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.open import parse_store_spec


def status(directory: Path) -> dict[str, Any]:
    """The contract of ``cluster status --output json``."""
    state = LocalClusterState.load(directory.resolve())
    active, store_error, under = None, None, None
    try:
        active, under = _from_store(state)
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
        # None: unknown (no store yet, or it cannot be read)
        "under_replicated_partitions": under,
    }


def _from_store(state: LocalClusterState) -> tuple[int | None, list[dict[str, Any]] | None]:
    """The node id of the controller holding an unexpired lease (None: none), and the under-replicated partitions
    (None: no store yet)."""
    if state.store is None and not state.metadata_store.exists():
        return None, None
    with open_cluster_store(state) as s:
        lease = s.current_lease()
        image = MetadataFollower(s).refresh()
    under = [
        {
            "topic": t.name,
            "partition": p.partition_id,
            "leader": p.leader,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
            "eligible": list(p.elr),  # KIP-966's eligible leader replicas: out of the ISR, holding every commit
        }
        for t in sorted(image.topics.values(), key=lambda t: t.name)
        for p in sorted(t.partitions.values(), key=lambda p: p.partition_id)
        if len(p.isr) < len(p.replicas)
    ]
    if lease is None or lease.expired(wall_ms()):
        return None, under
    return (int(lease.holder.split("@", 1)[0]) if "@" in lease.holder else None), under


def _process_entry(p: ProcessInfo, active: int | None, state: LocalClusterState, *, known: bool) -> dict[str, Any]:
    """``known``: whether ``active`` could be read (not: a live controller's ``active`` is null, unknown)."""
    alive = is_ours(p)
    entry: dict[str, Any] = {"role": p.role, "id": p.id, "pid": p.pid, "port": p.port, "alive": alive, "log": p.log}
    scheme = "https" if state.metrics_tls else "http"  # https: a client certificate of the cluster's CA is required
    entry["metrics_url"] = f"{scheme}://127.0.0.1:{p.metrics_port}/metrics" if p.metrics_port else None
    if p.role == "controller":
        entry["active"] = None if alive and not known else alive and p.id == active
    return entry
