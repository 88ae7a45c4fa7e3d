"""Starting one stopped (or killed) process of a running local cluster again, on the address it had.

Invariants:
* A process is restarted from the settings file it was started with, so it comes back with the same node id,
  data directory and ports; ``cluster.json`` is updated with its new pid before it is waited on.
* A port bound with port 0 is ephemeral: while its process is down, an outgoing connection of the machine may be
  given it. A broker whose port was taken comes back on a new one (it registers its new address, and clients follow
  Metadata); a controller whose metrics port was taken comes back on a new metrics port (only scrapers dial it); a
  controller whose own port was taken (its address is in every bootstrap list) or the embedded S3 whose port was
  taken is a :class:`LocalClusterError` that says so, not a process that dies at bind.
* A port can also be taken between the check and the bind (the new process needs a second to get there): a broker
  that exits with "address already in use" is started again on new ports, and a controller whose own port is still
  free (so its metrics port was the one lost) on a new metrics port, at most ``BIND_ATTEMPTS`` times in all.
* The embedded S3 comes back with the objects of its last clean stop, and refuses to start if it was killed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.local.nodes import StartingNode
from orchestrator.local.processes import (
    broker_command,
    controller_command,
    embedded_s3_command,
    port_free,
    process_env,
    reap_if_dead,
    spawn,
    wait_for,
)
from orchestrator.local.s3_snapshot import SNAPSHOT_DIR
from orchestrator.local.settings_files import Tables, read_toml, with_overrides, write_toml
from orchestrator.local.state import LocalClusterState, ProcessInfo, is_ours

BIND_ATTEMPTS = 3
ADDRESS_IN_USE = "[Errno 98]"  # what a Python process prints when its bind finds the port taken (EADDRINUSE)


def restart(
    directory: Path, role: str, ident: int, *, timeout_s: float = 30.0, env: Mapping[str, str] | None = None
) -> ProcessInfo:
    """Start a stopped (or killed) process of a running cluster again, on the address it had; updates cluster.json.
    A broker whose port was taken while it was down comes back on a new one (it registers its new address, and
    clients follow Metadata); a controller or the embedded S3 whose port was taken is a :class:`LocalClusterError`.
    ``env`` is added to the environment it starts with (e.g. a crash point armed, :mod:`orchestrator.crash_points`);
    a process that exits before it is ready makes this raise :class:`LocalClusterError` with the end of its log.

    The embedded S3 comes back with the objects of its last clean stop, and refuses to start (so this raises) if it
    was killed: its objects died with it."""
    state = LocalClusterState.load(directory.resolve())
    p = state.find(role, ident)
    if is_ours(p):
        raise LocalClusterError(f"{role} {ident} is still running (pid {p.pid})")
    if p.config is None:
        raise LocalClusterError(f"{role} {ident} cannot be restarted")
    reap_if_dead(p)  # our child that died by itself (a crash, a crash point): reaped, not left a zombie
    moved = _move_if_port_taken(state, p)
    for attempt in range(1, BIND_ATTEMPTS + 1):
        log_size = _size(Path(p.log))
        try:
            _start(state, p, moved, timeout_s, env)
            return p
        except LocalClusterError:
            lost_race = lost_bind_race(Path(p.log), log_size)
            metrics_lost = p.role == "controller" and port_free(p.port)  # its own port is free: metrics was taken
            if not lost_race or attempt == BIND_ATTEMPTS or (p.role != "broker" and not metrics_lost):
                raise
            reap_if_dead(p)
            # taken between our check and its bind: a new port, as a moved broker (a controller: metrics only)
            moved = _move_to_new_ports(p) if p.role == "broker" else _move_metrics_port(p)
    raise AssertionError("unreachable")


def _start(
    state: LocalClusterState, p: ProcessInfo, moved: Tables | None, timeout_s: float, env: Mapping[str, str] | None
) -> None:
    ready, command = _ready_file_and_command(state, p)
    ready.unlink(missing_ok=True)
    proc = spawn(command, Path(p.log), process_env(state) | dict(env or {}))
    p.pid = proc.pid
    state.save()
    if moved is not None:
        StartingNode(p, proc, ready, moved).wait(timeout_s)  # learns the new ports and writes them into the settings
        state.save()
    else:
        wait_for(f"{p.role} {p.id} to restart", ready.exists, timeout_s, Path(p.log), proc)


def lost_bind_race(log: Path, offset: int) -> bool:
    """Whether the attempt whose output starts at ``offset`` of ``log`` exited because its port was taken."""
    return ADDRESS_IN_USE in _read_from(log, offset)


def _size(log: Path) -> int:
    return log.stat().st_size if log.exists() else 0


def _read_from(log: Path, offset: int) -> str:
    """What was appended to ``log`` after ``offset`` (the output of the attempt that just ended)."""
    if not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def _move_if_port_taken(state: LocalClusterState, p: ProcessInfo) -> Tables | None:
    """When a port of ``p`` was taken while it was down: a broker's settings, rewritten to bind new ports (returned,
    to learn them once it is ready); anything else is refused. None when its ports are free."""
    taken = [port for port in (p.port, p.metrics_port) if port and not port_free(port)]
    if not taken:
        return None
    if p.role == "controller" and taken == [p.metrics_port]:
        return _move_metrics_port(p)
    if p.role != "broker":
        raise LocalClusterError(
            f"{p.role} {p.id} cannot restart: its port(s) {taken} on 127.0.0.1 were taken by another process while "
            "it was down; a controller's address is in every bootstrap list, so it cannot move. Free the port, or "
            f"'tieredctl cluster down --dir {state.dir}' then 'cluster up' to start it anew"
        )
    return _move_to_new_ports(p)


def _move_to_new_ports(p: ProcessInfo) -> Tables:
    """Rewrite a broker's settings to bind new ports; the settings it had are returned, to write the new ports into
    once it is ready."""
    assert p.config is not None
    settings = read_toml(Path(p.config))
    write_toml(Path(p.config), with_overrides(settings, {p.role: {"port": 0}, "metrics": {"port": 0}}))
    return settings


def _move_metrics_port(p: ProcessInfo) -> Tables:
    """Rewrite a controller's settings to bind a new metrics port (its own port stays); the settings it had are
    returned, to write the new port into once it is ready."""
    assert p.config is not None
    settings = read_toml(Path(p.config))
    write_toml(Path(p.config), with_overrides(settings, {"metrics": {"port": 0}}))
    return settings


def _ready_file_and_command(state: LocalClusterState, p: ProcessInfo) -> tuple[Path, list[str]]:
    assert p.config is not None
    if p.role == "s3":  # its ready file is the file that identifies it
        ready = Path(p.config)
        snapshot_dir = Path(state.dir) / SNAPSHOT_DIR
        command = embedded_s3_command(
            ready, port=p.port, snapshot_dir=snapshot_dir, credentials_file=state.s3_credentials_file
        )
        return ready, command
    ready = Path(state.dir) / "run" / f"{p.role}-{p.id}.ready"
    config = Path(p.config)
    return ready, controller_command(config) if p.role == "controller" else broker_command(config)
