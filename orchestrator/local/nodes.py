"""Starting one controller or broker of the local cluster: the settings file it is started with, and learning the
ports it bound.

Invariants:
* A node is started on port 0 (its listener and its Prometheus endpoint): it binds a port itself and publishes it
  in its ready file (``run/<role>-<id>.ready``), so no port chosen in advance can be taken before it is bound.
* Once it is ready, the ports it bound are written into its settings file, so a process restarted from that file
  (after a crash, or by a test) comes back on the same address.
* On a resume, the settings file is written over the one the node had: what the caller does not set again is kept.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.local.processes import broker_command, controller_command, spawn, wait_for
from orchestrator.local.settings_files import Tables, read_toml, with_overrides, write_toml
from orchestrator.local.state import LocalClusterState, ProcessInfo


def controller_settings(state: LocalClusterState, node: int, shared: Tables) -> Tables:
    """What controller ``node`` is told: its id and the store, then ``shared`` (store password, security)."""
    return {"controller": {"node_id": node, "metadata_store": state.store_spec}, **shared}


def broker_settings(state: LocalClusterState, broker: int, shared: Tables) -> Tables:
    """What broker ``broker`` is told: its id, data directory, the store, the controllers and the bucket, then
    ``shared`` (store password, security)."""
    directory = Path(state.dir)
    return {
        "broker": {
            "broker_id": broker,
            "data_dir": str(directory / "data" / f"broker-{broker}"),
            "metadata_store": state.store_spec,
            "controllers": state.bootstrap_server,
        },
        "s3": {"endpoint_url": state.s3_endpoint, "bucket": state.bucket, "prefix": state.prefix},
        **shared,
    }


class StartingNode:
    """A controller or broker process started on port 0: :meth:`wait` learns the port it bound from its ready file
    and writes it into its settings file, so a restart from that file comes back on the same address."""

    def __init__(self, process: ProcessInfo, proc: subprocess.Popen[bytes], ready: Path, tables: Tables) -> None:
        self.process, self._proc, self._ready, self._tables = process, proc, ready, tables

    def wait(self, timeout_s: float) -> int:
        p = self.process
        wait_for(f"{p.role} {p.id}", self._ready.exists, timeout_s, Path(p.log), self._proc)
        ready = json.loads(self._ready.read_text())
        p.port, p.metrics_port = int(ready["port"]), int(ready.get("metrics_port") or 0)
        assert p.config is not None
        ports: dict[str, dict[str, Any]] = {p.role: {"port": p.port}}
        if p.metrics_port:
            ports["metrics"] = {"port": p.metrics_port}
        write_toml(Path(p.config), with_overrides(self._tables, ports))
        return p.port


def start_node(
    directory: Path,
    role: str,
    node: int,
    base: Tables,
    overrides: Tables | None,
    *,
    fresh: bool,
    env: Mapping[str, str],
    port: int = 0,
) -> StartingNode:
    """Write the settings file of one process (on a resume: over the one it had, keeping its other settings) with
    ``port`` (0: the process binds one itself; a controller is given one, :mod:`.ports`) and metrics port 0, and
    start it."""
    cfg = directory / "config" / f"{role}-{node}.toml"
    ready = directory / "run" / f"{role}-{node}.ready"
    ready.unlink(missing_ok=True)
    existing: Tables = {} if fresh or not cfg.exists() else read_toml(cfg)
    tables = with_overrides(with_overrides(existing, base), overrides)
    tables = with_overrides(tables, {role: {"ready_file": str(ready)}})
    write_toml(cfg, with_overrides(tables, {role: {"port": port}, "metrics": {"port": 0}}))
    log = directory / "logs" / f"{role}-{node}.log"
    command = controller_command(cfg) if role == "controller" else broker_command(cfg)
    proc = spawn(command, log, dict(env))
    return StartingNode(ProcessInfo(role, node, proc.pid, 0, str(cfg), str(log)), proc, ready, tables)
