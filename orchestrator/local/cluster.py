"""Start, inspect and stop a local cluster: embedded S3 (moto's server) unless an endpoint is given, the SQLite
store, N controllers (one active, the rest standby) and M brokers, each a separate OS process.

Everything lives under ``--dir``: ``cluster.json`` (the processes with role, id, pid, port and the command line
that identifies them), ``logs/<role>-<id>.log``, ``config/<role>-<id>.toml``, ``metadata.db``, broker data dirs.

Invariants:
* ``down`` stops exactly the processes recorded in ``cluster.json`` and nothing else: a pid is only signalled
  while ``/proc/<pid>/cmdline`` still names that process's own config file (so a recycled pid is never hit).
* Processes bind 127.0.0.1 only. Ports are chosen free at ``up`` and kept in the configs, so a process restarted
  from its config (after a crash, or by a test) comes back on the same address.
* On the embedded S3 the cluster is ephemeral (moto keeps objects in memory): ``down`` removes the store with it,
  so metadata and objects never disagree. With ``s3_endpoint`` the store is kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bce

from orchestrator.errors import LocalClusterError, TieredError
from orchestrator.local.state import (
    DEFAULT_BUCKET,
    DEFAULT_PREFIX,
    STATE_FILE,
    STORE_FILE,
    LocalClusterState,
    ProcessInfo,
)
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.admin import AdminClient
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from remote_storage.s3 import make_s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CONTROLLER_ID_BASE = 3000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_ours(p: ProcessInfo) -> bool:
    """The pid is alive and still the process we started (its command line names its own marker)."""
    marker = p.config or f"-p {p.port}"
    line = _cmdline(p.pid)
    return bool(line) and marker in line and not _is_zombie(p.pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _wait(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    log: Path | None = None,
    proc: subprocess.Popen[bytes] | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() > deadline:
            tail = ""
            if log is not None and log.exists():
                tail = "\n--- last lines of " + str(log) + " ---\n" + "\n".join(log.read_text().splitlines()[-15:])
            why = f"it exited with status {proc.returncode}" if exited and proc else f"timed out after {timeout_s:.0f}s"
            raise LocalClusterError(f"{why} waiting for {what}{tail}")
        time.sleep(0.1)


# Children started by this process, kept so they are reaped through their Popen (no zombies, no warnings).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(args: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    _CHILDREN[proc.pid] = proc
    return proc


def process_env(state: LocalClusterState | None = None) -> dict[str, str]:
    """The environment a process of the cluster starts with: this one's, plus, on the embedded S3, the key pair
    that server takes (unless the environment names one). Another endpoint gets credentials the usual AWS way."""
    env = dict(os.environ)
    credentials = state.s3_credentials if state is not None else None
    if credentials is not None:
        env.setdefault("AWS_ACCESS_KEY_ID", credentials[0])
        env.setdefault("AWS_SECRET_ACCESS_KEY", credentials[1])
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return env


def s3_client(state: LocalClusterState) -> S3Client:
    """A client of the cluster's S3 (with the embedded server's key pair when it is the embedded one)."""
    access_key_id, secret_access_key = state.s3_credentials or (None, None)
    return make_s3_client(
        endpoint_url=state.s3_endpoint, access_key_id=access_key_id, secret_access_key=secret_access_key
    )


def controller_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "controller", "start", "--config", str(config)]


def broker_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "broker", "start", "--config", str(config)]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))


Tables = Mapping[str, Mapping[str, Any]]  # a settings file: table -> key -> value


def _with_overrides(tables: Tables, overrides: Tables | None) -> dict[str, dict[str, Any]]:
    out = {name: dict(values) for name, values in tables.items()}
    for name, values in (overrides or {}).items():
        out.setdefault(name, {}).update(values)
    return out


def _write_toml(path: Path, tables: Tables) -> None:
    lines: list[str] = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def up(
    directory: Path,
    *,
    brokers: int = 3,
    controllers: int = 2,
    s3_endpoint: str | None = None,
    bucket: str = DEFAULT_BUCKET,
    prefix: str = DEFAULT_PREFIX,
    broker_overrides: Tables | None = None,
    controller_overrides: Tables | None = None,
    timeout_s: float = 60.0,
    progress: Callable[[str], None] = lambda _m: None,
) -> LocalClusterState:
    """Start a cluster and wait until it is healthy: a controller is active and every broker is registered.

    ``broker_overrides`` and ``controller_overrides`` add to the settings files the processes are started with, table
    by table (``{"controller": {"lease_ttl_ms": 1500}, "membership": {"session_timeout_ms": 2500}}``)."""
    if brokers < 1 or controllers < 1:
        raise LocalClusterError("a cluster needs at least one broker and one controller")
    directory = directory.resolve()
    if (directory / STATE_FILE).exists():
        state = LocalClusterState.load(directory)
        if any(is_ours(p) for p in state.processes):
            raise LocalClusterError(
                f"a cluster is already running in {directory}; 'tieredctl cluster down --dir {directory}'"
            )
        _remove_cluster_files(directory, keep_store=not state.embedded_s3)
    (directory / "run").mkdir(parents=True, exist_ok=True)
    state = LocalClusterState(str(directory), "", s3_endpoint or "", bucket, prefix, embedded_s3=s3_endpoint is None)
    env = process_env(state)
    started: list[ProcessInfo] = []
    try:
        if s3_endpoint is None:
            s3 = start_embedded_s3(directory / "logs" / "s3-0.log", timeout_s=timeout_s)
            started.append(s3)
            state.s3_endpoint = f"http://127.0.0.1:{s3.port}"
            progress(f"embedded S3 (moto's server) started at {state.s3_endpoint}")
        _ensure_bucket(state)
        ctrl_ports = [free_port() for _ in range(controllers)]
        state.bootstrap_server = ",".join(f"127.0.0.1:{p}" for p in ctrl_ports)
        store = directory / STORE_FILE
        for i, port in enumerate(ctrl_ports):
            node = CONTROLLER_ID_BASE + i
            cfg = directory / "config" / f"controller-{node}.toml"
            ready = directory / "run" / f"controller-{node}.ready"
            ready.unlink(missing_ok=True)
            controller_settings = {
                "node_id": node,
                "metadata_store": str(store),
                "port": port,
                "ready_file": str(ready),
            }
            _write_toml(cfg, _with_overrides({"controller": controller_settings}, controller_overrides))
            log = directory / "logs" / f"controller-{node}.log"
            proc = _spawn(controller_command(cfg), log, env)
            started.append(ProcessInfo("controller", node, proc.pid, port, str(cfg), str(log)))
            progress(f"controller {node} starting on 127.0.0.1:{port}")
            _wait(f"controller {node}", ready.exists, timeout_s, log, proc)
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for b in range(1, brokers + 1):
            port = free_port()
            cfg = directory / "config" / f"broker-{b}.toml"
            ready = directory / "run" / f"broker-{b}.ready"
            ready.unlink(missing_ok=True)
            broker_settings = {
                "broker_id": b,
                "data_dir": str(directory / "data" / f"broker-{b}"),
                "metadata_store": str(store),
                "controllers": state.bootstrap_server,
                "port": port,
                "ready_file": str(ready),
            }
            s3_settings = {"endpoint_url": state.s3_endpoint, "bucket": bucket, "prefix": prefix}
            _write_toml(cfg, _with_overrides({"broker": broker_settings, "s3": s3_settings}, broker_overrides))
            log = directory / "logs" / f"broker-{b}.log"
            proc = _spawn(broker_command(cfg), log, env)
            procs[b] = proc
            started.append(ProcessInfo("broker", b, proc.pid, port, str(cfg), str(log)))
            progress(f"broker {b} starting on 127.0.0.1:{port}")
        state.processes = started
        state.save()
        for p in started:
            if p.role == "broker":
                ready = directory / "run" / f"broker-{p.id}.ready"
                _wait(f"broker {p.id}", ready.exists, timeout_s, Path(p.log), procs[p.id])
        controller_log = directory / "logs" / f"controller-{CONTROLLER_ID_BASE}.log"
        _wait("every broker to register and be unfenced", lambda: _healthy(state, brokers), timeout_s, controller_log)
        progress("cluster is healthy")
        return state
    except BaseException:
        for p in reversed(started):
            stop_process(p, timeout_s=5)
        (directory / STATE_FILE).unlink(missing_ok=True)
        raise


def start_embedded_s3(log: Path, *, timeout_s: float = 30.0) -> ProcessInfo:
    """moto's S3 server as its own process on a free loopback port; returns once it answers HTTP.
    Stop it with :func:`stop_process`."""
    port = free_port()
    proc = _spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log, process_env())
    info = ProcessInfo("s3", 0, proc.pid, port, None, str(log))
    try:
        _wait("the embedded S3 endpoint", lambda: _http_up(f"http://127.0.0.1:{port}"), timeout_s, log, proc)
    except BaseException:
        stop_process(info, timeout_s=5)
        raise
    return info


def _http_up(endpoint: str) -> bool:
    try:
        urllib.request.urlopen(endpoint, timeout=1).close()
        return True
    except OSError:
        return False


def _ensure_bucket(state: LocalClusterState) -> None:
    client = s3_client(state)
    try:
        client.head_bucket(Bucket=state.bucket)
    except bce.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise LocalClusterError(f"cannot use bucket {state.bucket!r} at {state.s3_endpoint}: {exc}") from exc
        client.create_bucket(Bucket=state.bucket)


def _healthy(state: LocalClusterState, brokers: int) -> bool:
    async def check() -> bool:
        client = AdminClient(state.bootstrap_server, timeout_s=2, max_attempts=1)
        try:
            await client.refresh_metadata()
            body = await client.call(ApiKey.METADATA, (1, 12), {"topics": []}, m.MetadataResponse)
            live = {b["node_id"] for b in body["brokers"] if b["node_id"] < CONTROLLER_ID_BASE}
            return client.controller_id is not None and len(live) >= brokers
        finally:
            await client.close()

    try:
        return asyncio.run(check())
    except (TieredError, OSError):
        return False


def stop_process(p: ProcessInfo, *, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; only while the pid is still the process we started."""
    child = _CHILDREN.pop(p.pid, None)
    if not is_ours(p):
        if child is not None:
            child.wait(timeout=timeout_s)  # it is exiting or has exited: collect it
        return
    try:
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if child is not None:  # our own child: wait on it directly, which also reaps it
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
        return
    deadline = time.monotonic() + timeout_s
    while is_ours(p) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_ours(p):
        os.kill(p.pid, signal.SIGKILL)
        while is_ours(p) and time.monotonic() < deadline + 5:
            time.sleep(0.05)


def _remove_cluster_files(directory: Path, *, keep_store: bool) -> None:
    for name in ("run", "data", "config"):
        shutil.rmtree(directory / name, ignore_errors=True)
    if not keep_store:
        for suffix in ("", "-wal", "-shm"):
            (directory / f"{STORE_FILE}{suffix}").unlink(missing_ok=True)
    (directory / STATE_FILE).unlink(missing_ok=True)


def down(directory: Path, *, timeout_s: float = 20.0) -> list[ProcessInfo]:
    """Stop every process of the cluster (brokers, then controllers, then S3); returns those stopped."""
    directory = directory.resolve()
    state = LocalClusterState.load(directory)
    order = {"broker": 0, "controller": 1, "s3": 2}
    stopped = []
    for p in sorted(state.processes, key=lambda p: order[p.role]):
        was = is_ours(p)
        stop_process(p, timeout_s=timeout_s)
        if was:
            stopped.append(p)
    _remove_cluster_files(directory, keep_store=not state.embedded_s3)
    return stopped


def status(directory: Path) -> dict[str, Any]:
    """The contract of ``cluster status --output json``."""
    state = LocalClusterState.load(directory.resolve())
    active = None
    store = state.metadata_store
    if store.exists():
        with SqliteMetadataStore(store, recover_on_open=False) as s:
            lease = s.current_lease()
            if lease is not None and not lease.expired(int(time.time() * 1000)):
                active = int(lease.holder.split("@", 1)[0]) if "@" in lease.holder else None
    procs = []
    for p in state.processes:
        alive = is_ours(p)
        entry: dict[str, Any] = {"role": p.role, "id": p.id, "pid": p.pid, "port": p.port, "alive": alive, "log": p.log}
        if p.role == "controller":
            entry["active"] = entry["alive"] and p.id == active
        procs.append(entry)
    return {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap_server,
        "s3_endpoint": state.s3_endpoint,
        "bucket": state.bucket,
        "prefix": state.prefix,
        "processes": procs,
    }


def restart(directory: Path, role: str, ident: int, *, timeout_s: float = 30.0) -> ProcessInfo:
    """Start a stopped (or killed) controller or broker again from its own config; updates cluster.json."""
    state = LocalClusterState.load(directory.resolve())
    p = state.find(role, ident)
    if is_ours(p):
        raise LocalClusterError(f"{role} {ident} is still running (pid {p.pid})")
    if p.config is None:
        raise LocalClusterError(f"{role} {ident} cannot be restarted")
    ready = Path(state.dir) / "run" / f"{role}-{ident}.ready"
    ready.unlink(missing_ok=True)
    cmd = controller_command(Path(p.config)) if role == "controller" else broker_command(Path(p.config))
    proc = _spawn(cmd, Path(p.log), process_env(state))
    p.pid = proc.pid
    state.save()
    _wait(f"{role} {ident} to restart", ready.exists, timeout_s, Path(p.log), proc)
    return p
