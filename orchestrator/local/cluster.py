"""Start, inspect, stop and resume a local cluster: embedded S3 (moto's server) unless an endpoint is given, the
SQLite store (or an external PostgreSQL database: ``up(store="postgresql://...")``), N controllers (one active, the
rest standby) and M brokers, each a separate OS process.

Everything lives under ``--dir``: ``cluster.json`` (the processes with role, id, pid, port and the file on their
command line that identifies them), ``logs/<role>-<id>.log``, ``config/<role>-<id>.toml``, ``run/`` (ready files),
``metadata.db``, ``data/broker-<id>/`` and, on the embedded S3, ``s3/`` (its objects, see :mod:`.s3_snapshot`).

Invariants:
* Nothing is deleted unless asked in so many words: ``down`` stops exactly the processes recorded in
  ``cluster.json`` and keeps every file; ``up`` on that directory resumes the cluster (same node ids, data
  directories, store, bucket; the embedded S3 restores the objects it wrote as it stopped). Only
  ``down(purge=True)`` deletes, and exactly the files listed in ``_CLUSTER_FILES`` (objects in an external bucket
  and the metadata in an external PostgreSQL store are never deleted). A cluster that never became healthy is
  removed by the ``up`` that failed to start it.
* A cluster whose embedded S3 did not stop cleanly (killed: its objects died with it) is not resumed: ``up``
  refuses and says how to purge it, instead of serving topics whose tiered data is silently gone.
* A pid is only signalled while ``/proc/<pid>/cmdline`` still names that process's own file (so a recycled pid
  is never hit).
* Processes bind 127.0.0.1 only, on port 0: each binds a port itself and publishes it in its ready file, so no
  port chosen in advance can be taken before it is bound. ``up`` then writes the port into the process's settings
  file, so a process restarted from it (after a crash, or by a test) comes back on the same address. The same goes
  for each controller's and broker's Prometheus endpoint (``metrics_port``; ``status`` lists its URL). Such a port
  is ephemeral: while its process is down an outgoing connection may be given it. ``restart`` then moves a broker
  to a new port (it registers it; clients follow Metadata) and refuses, with the reason, to restart a controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bce

from orchestrator.errors import LocalClusterError, TieredError
from orchestrator.local import s3_snapshot
from orchestrator.local.s3_snapshot import SNAPSHOT_DIR
from orchestrator.local.security import LocalSecurity, bootstrap_logins, node_name, prepare
from orchestrator.local.state import (
    CLIENT_PROPERTIES,
    DEFAULT_BUCKET,
    DEFAULT_PREFIX,
    STATE_FILE,
    STORE_FILE,
    LocalClusterState,
    ProcessInfo,
    Stopped,
    is_ours,
)
from orchestrator.metadata.open import open_store, parse_store_spec, read_password, split_password
from orchestrator.metadata.store import MetadataStore
from orchestrator.net.admin import AdminClient
from orchestrator.net.client_properties import read_command_config
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity, SaslCredentials
from orchestrator.private_files import PRIVATE_UMASK, open_private_append, private_dir, write_private
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import StoreSettings
from remote_storage.s3 import make_s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CONTROLLER_ID_BASE = 3000


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
    private_dir(log_path.parent)
    with open_private_append(log_path) as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            umask=PRIVATE_UMASK,  # what it creates (store, segments, objects) is the owner's alone
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
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in v) + "]"
    return json.dumps(str(v))


def operator_security(state: LocalClusterState) -> ClientSecurity:
    """How the operator connects to the cluster: as its ``client.properties`` says (plaintext without one)."""
    properties = Path(state.dir) / CLIENT_PROPERTIES
    return read_command_config(properties) if properties.exists() else PLAINTEXT


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
    private_dir(path.parent)
    write_private(path, "\n".join(lines))


S3_STOP_TIMEOUT_S = 300.0  # the embedded S3 writes its snapshot on SIGTERM before it exits


def up(
    directory: Path,
    *,
    brokers: int | None = None,
    controllers: int | None = None,
    s3_endpoint: str | None = None,
    bucket: str | None = None,
    prefix: str | None = None,
    store: str | None = None,
    security: LocalSecurity = LocalSecurity(),
    broker_overrides: Tables | None = None,
    controller_overrides: Tables | None = None,
    timeout_s: float = 60.0,
    progress: Callable[[str], None] = lambda _m: None,
) -> LocalClusterState:
    """Start a new cluster in ``directory``, or resume the one ``cluster down`` left there, and wait until it is
    healthy: a controller is active and every broker is registered.

    A new cluster has ``brokers`` (3) brokers and ``controllers`` (2) controllers. A resumed one keeps its node ids,
    data directories, store, bucket and (on the embedded S3) its objects; the arguments, when given, must match
    it. ``broker_overrides`` and ``controller_overrides`` add to the settings files the processes are started with,
    table by table (``{"controller": {"lease_ttl_ms": 1500}, "membership": {"session_timeout_ms": 2500}}``).

    ``store`` (a ``postgresql://`` URL) puts the metadata in that database instead of ``metadata.db``; it must hold
    no cluster yet. Its password, from the environment (``TIEREDCTL_STORE_PASSWORD`` or ``PGPASSWORD``, which the
    processes inherit) or from the URL, is never written into a settings file: a password in the URL is moved to
    ``config/store-password`` (mode 0600), which the settings files name.

    ``security`` turns on TLS, SASL/SCRAM logins and ACLs for a new cluster (:mod:`orchestrator.local.security`);
    a resumed cluster keeps what it was started with."""
    directory = directory.resolve()
    previous = LocalClusterState.load_if_present(directory)
    if previous is None:
        _refuse_leftovers(directory)
        n_brokers, n_controllers = brokers or 3, controllers or 2
        if n_brokers < 1 or n_controllers < 1:
            raise LocalClusterError("a cluster needs at least one broker and one controller")
        state = LocalClusterState(
            str(directory),
            "",
            s3_endpoint or "",
            bucket or DEFAULT_BUCKET,
            prefix or DEFAULT_PREFIX,
            embedded_s3=s3_endpoint is None,
            tls=security.tls,
            sasl=security.sasl,
            acls=security.acls,
            s3_secret_key=secrets.token_urlsafe(24) if s3_endpoint is None else None,
        )
        controller_ids = [CONTROLLER_ID_BASE + i for i in range(n_controllers)]
        broker_ids = list(range(1, n_brokers + 1))
        if store is not None:
            try:
                _use_external_store(state, store)
            except BaseException:
                _purge(directory)  # the password file it may have written: nothing of a cluster stays
                raise
    else:
        state = previous
        controller_ids = [p.id for p in state.processes if p.role == "controller"]
        broker_ids = [p.id for p in state.processes if p.role == "broker"]
        _check_resumable(
            state, brokers=brokers, controllers=controllers, s3_endpoint=s3_endpoint, bucket=bucket, prefix=prefix
        )
        if security.on and security != LocalSecurity(state.tls, state.sasl, state.acls):
            raise LocalClusterError(
                f"the cluster in {directory} was started with tls={state.tls}, sasl={state.sasl}, acls={state.acls}; "
                "it resumes as it was ('cluster up' without those options), or purge it to start anew"
            )
        if store is not None and split_password(store)[0] != state.store:
            raise LocalClusterError(
                f"the cluster in {directory} keeps its metadata in {state.store or STORE_FILE}, not in the --store "
                f"given; 'tieredctl cluster down --purge --dir {directory}' deletes it, then 'cluster up' starts anew"
            )
        sizes = f"{len(broker_ids)} broker(s), {len(controller_ids)} controller(s)"
        progress(f"resuming the cluster in {directory}: {sizes}, its data and objects as 'cluster down' left them")
    for private in (directory, directory / "run", directory / "config", directory / "logs"):
        private_dir(private)
    recorded = list(state.processes)
    started: list[ProcessInfo] = []
    try:
        node_tables: dict[str, Tables] = {}
        if previous is None:
            nodes = [("controller", n) for n in controller_ids] + [("broker", b) for b in broker_ids]
            node_tables, _ = prepare(directory, security, nodes)
        _start_processes(
            state,
            controller_ids,
            broker_ids,
            started,
            fresh=previous is None,
            node_tables=node_tables,
            broker_overrides=broker_overrides,
            controller_overrides=controller_overrides,
            timeout_s=timeout_s,
            progress=progress,
        )
        progress("cluster is healthy")
        return state
    except BaseException:
        for p in reversed(started):
            stop_process(p, timeout_s=S3_STOP_TIMEOUT_S if p.role == "s3" and previous else 5)
        if previous is None:
            _purge(directory)  # a cluster that never started holds nothing of the user's
        else:
            state.processes = recorded  # keep the cluster's record (its node ids) for the next attempt
            state.save()
        raise


def _start_processes(
    state: LocalClusterState,
    controller_ids: list[int],
    broker_ids: list[int],
    started: list[ProcessInfo],
    *,
    fresh: bool,
    node_tables: Mapping[str, Tables],
    broker_overrides: Tables | None,
    controller_overrides: Tables | None,
    timeout_s: float,
    progress: Callable[[str], None],
) -> None:
    directory = Path(state.dir)
    env = process_env(state)
    if state.embedded_s3:
        s3 = start_embedded_s3(
            directory / "logs" / "s3-0.log",
            snapshot_dir=directory / SNAPSHOT_DIR,
            ready_file=directory / "run" / "s3-0.ready",
            timeout_s=timeout_s,
        )
        started.append(s3)
        state.s3_endpoint = f"http://127.0.0.1:{s3.port}"
        progress(f"embedded S3 (moto's server) started at {state.s3_endpoint}")
    _ensure_bucket(state, create=fresh)
    store = state.store_spec
    store_tables: Tables = {}
    if state.store_password_file.exists():
        store_tables = {"store": {"password_file": str(state.store_password_file)}}
    if fresh and state.sasl:
        with _open_cluster_store(state, create=True) as metadata:
            bootstrap_logins(directory, metadata)  # the first logins, before anyone needs one
        progress("SCRAM logins written into the new metadata log")
    controller_ports = []
    for node in controller_ids:
        base = {
            "controller": {"node_id": node, "metadata_store": store},
            **store_tables,
            **node_tables.get(node_name("controller", node), {}),
        }
        info = _start_node(directory, "controller", node, base, controller_overrides, fresh=fresh, env=env)
        started.append(info.process)
        progress(f"controller {node} starting")
        controller_ports.append(info.wait(timeout_s))
        progress(f"controller {node} serves on 127.0.0.1:{info.process.port}")
    state.bootstrap_server = ",".join(f"127.0.0.1:{p}" for p in controller_ports)
    pending = []
    for b in broker_ids:
        base = {
            "broker": {
                "broker_id": b,
                "data_dir": str(directory / "data" / f"broker-{b}"),
                "metadata_store": store,
                "controllers": state.bootstrap_server,
            },
            "s3": {"endpoint_url": state.s3_endpoint, "bucket": state.bucket, "prefix": state.prefix},
            **store_tables,
            **node_tables.get(node_name("broker", b), {}),
        }
        info = _start_node(directory, "broker", b, base, broker_overrides, fresh=fresh, env=env)
        started.append(info.process)
        pending.append(info)
        progress(f"broker {b} starting")
    state.processes = started
    state.save()  # from here on 'cluster down' finds every process, even if this start is interrupted
    for info in pending:
        info.wait(timeout_s)
    state.save()  # with the ports the brokers bound
    controller_log = directory / "logs" / f"controller-{controller_ids[0]}.log"
    operator = operator_security(state)
    operator_ssl = operator.ssl_context()  # the certificate files read once, not on every poll
    _wait(
        "every broker to register and be unfenced",
        lambda: _healthy(state, len(broker_ids), operator_ssl, operator.sasl),
        timeout_s,
        controller_log,
    )


class _Starting:
    """A controller or broker process started on port 0: :meth:`wait` learns the port it bound from its ready file
    and writes it into its settings file, so a restart from that file comes back on the same address."""

    def __init__(self, process: ProcessInfo, proc: subprocess.Popen[bytes], ready: Path, tables: Tables) -> None:
        self.process, self._proc, self._ready, self._tables = process, proc, ready, tables

    def wait(self, timeout_s: float) -> int:
        p = self.process
        _wait(f"{p.role} {p.id}", self._ready.exists, timeout_s, Path(p.log), self._proc)
        ready = json.loads(self._ready.read_text())
        p.port, p.metrics_port = int(ready["port"]), int(ready.get("metrics_port") or 0)
        assert p.config is not None
        ports: dict[str, dict[str, Any]] = {p.role: {"port": p.port}}
        if p.metrics_port:
            ports["metrics"] = {"port": p.metrics_port}
        _write_toml(Path(p.config), _with_overrides(self._tables, ports))
        return p.port


def _start_node(
    directory: Path,
    role: str,
    node: int,
    base: Tables,
    overrides: Tables | None,
    *,
    fresh: bool,
    env: dict[str, str],
) -> _Starting:
    """Write the settings file of one process (on a resume: over the one it had, keeping its other settings) with
    port 0, and start it."""
    cfg = directory / "config" / f"{role}-{node}.toml"
    ready = directory / "run" / f"{role}-{node}.ready"
    ready.unlink(missing_ok=True)
    existing: Tables = {} if fresh or not cfg.exists() else _read_toml(cfg)
    tables = _with_overrides(_with_overrides(existing, base), overrides)
    tables = _with_overrides(tables, {role: {"ready_file": str(ready)}})
    _write_toml(cfg, _with_overrides(tables, {role: {"port": 0}, "metrics": {"port": 0}}))
    log = directory / "logs" / f"{role}-{node}.log"
    command = controller_command(cfg) if role == "controller" else broker_command(cfg)
    proc = _spawn(command, log, env)
    return _Starting(ProcessInfo(role, node, proc.pid, 0, str(cfg), str(log)), proc, ready, tables)


def _read_toml(path: Path) -> Tables:
    with path.open("rb") as f:
        return tomllib.load(f)


def _refuse_leftovers(directory: Path) -> None:
    leftovers = [name for name in _CLUSTER_FILES if (directory / name).exists()]
    if leftovers:
        raise LocalClusterError(
            f"{directory} holds files of a local cluster ({', '.join(leftovers)}) but no {STATE_FILE} to resume it "
            f"from; 'tieredctl cluster down --purge --dir {directory}' deletes them"
        )


def _use_external_store(state: LocalClusterState, store: str) -> None:
    """Record a new cluster's PostgreSQL store: its URL without the password (kept in a 0600 file, if the URL had
    one), after checking it can be opened and holds no other cluster's metadata."""
    if not parse_store_spec(store).is_postgresql:
        raise LocalClusterError("--store takes a postgresql:// URL (without it the cluster keeps metadata.db)")
    dsn, password = split_password(store)
    password_file = state.store_password_file
    if password is not None:
        password_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
    state.store = dsn
    with _open_cluster_store(state) as opened:
        if opened.end_offset() > 0 or opened.current_lease() is not None:
            location = parse_store_spec(dsn).location
            raise LocalClusterError(
                f"the store {location} already holds a cluster's metadata; a new local cluster needs an empty one "
                "(another database, or drop that one's tieredctl schema yourself)"
            )


@contextlib.contextmanager
def _open_cluster_store(state: LocalClusterState, *, create: bool = False) -> Iterator[MetadataStore]:
    """The cluster's store as a reader (never recovered here: that is the processes' job), or, with ``create``, a
    new cluster's store made ready for its first records."""
    password_file = state.store_password_file
    settings = StoreSettings(password_file=str(password_file) if password_file.exists() else None)
    password = read_password(settings, os.environ) if state.store else None
    store = open_store(
        state.store_spec,
        settings=settings if state.store else None,
        password=password,
        recover_on_open=create,
        application_name="tieredctl-cli",
    )
    try:
        yield store
    finally:
        store.close()


def _check_resumable(
    state: LocalClusterState,
    *,
    brokers: int | None,
    controllers: int | None,
    s3_endpoint: str | None,
    bucket: str | None,
    prefix: str | None,
) -> None:
    directory = Path(state.dir)
    running = [p for p in state.processes if is_ours(p)]
    if running:
        raise LocalClusterError(
            f"a cluster is already running in {directory} ({len(running)} process(es)); "
            f"'tieredctl cluster down --dir {directory}' stops it"
        )
    start_over = f"'tieredctl cluster down --purge --dir {directory}' deletes it, then 'cluster up' starts a new one"
    counts = {
        "broker": (brokers, sum(p.role == "broker" for p in state.processes)),
        "controller": (controllers, sum(p.role == "controller" for p in state.processes)),
    }
    for role, (asked, has) in counts.items():
        if asked is not None and asked != has:
            raise LocalClusterError(f"the cluster in {directory} has {has} {role}(s), not {asked}; {start_over}")
    if s3_endpoint is not None and (state.embedded_s3 or s3_endpoint != state.s3_endpoint):
        was = "the embedded S3" if state.embedded_s3 else state.s3_endpoint
        raise LocalClusterError(
            f"the cluster in {directory} keeps its objects in {was}, not {s3_endpoint}; {start_over}"
        )
    if bucket is not None and bucket != state.bucket:
        raise LocalClusterError(
            f"the cluster in {directory} uses bucket {state.bucket!r}, not {bucket!r}; {start_over}"
        )
    if prefix is not None and prefix != state.prefix:
        raise LocalClusterError(
            f"the cluster in {directory} uses prefix {state.prefix!r}, not {prefix!r}; {start_over}"
        )
    if state.embedded_s3:
        found = s3_snapshot.status(directory / SNAPSHOT_DIR)
        if found.status is not s3_snapshot.SnapshotStatus.STOPPED:
            raise LocalClusterError(
                f"the embedded S3 of the cluster in {directory} did not stop cleanly (it keeps objects in memory and "
                f"writes them to {directory / SNAPSHOT_DIR} only when 'cluster down' stops it), so the objects of its "
                f"tiered topics are gone and resuming would serve topics whose data is missing; {start_over}"
            )


def start_embedded_s3(
    log: Path,
    *,
    snapshot_dir: Path | None = None,
    ready_file: Path | None = None,
    port: int = 0,
    timeout_s: float = 30.0,
) -> ProcessInfo:
    """The embedded S3 (:mod:`.embedded_s3`) as its own process on loopback, bound to ``port`` (0: a free one of
    its choosing); returns once it serves, with the port it bound. With ``snapshot_dir`` its objects survive a
    stop and start (SIGTERM writes them there). Stop it with :func:`stop_process`."""
    ready = ready_file or log.with_suffix(".ready")
    private_dir(ready.parent)
    ready.unlink(missing_ok=True)
    proc = _spawn(embedded_s3_command(ready, port=port, snapshot_dir=snapshot_dir), log, process_env())
    info = ProcessInfo("s3", 0, proc.pid, port, str(ready), str(log))
    try:
        _wait("the embedded S3 endpoint", ready.exists, timeout_s, log, proc)
        info.port = int(json.loads(ready.read_text())["port"])
    except BaseException:
        stop_process(info, timeout_s=5)
        raise
    return info


def embedded_s3_command(ready: Path, *, port: int = 0, snapshot_dir: Path | None = None) -> list[str]:
    command = [sys.executable, "-m", "orchestrator.local.embedded_s3", "--port", str(port), "--ready-file", str(ready)]
    return command + (["--snapshot-dir", str(snapshot_dir)] if snapshot_dir is not None else [])


def _ensure_bucket(state: LocalClusterState, *, create: bool) -> None:
    """The cluster's bucket exists; a new cluster creates it, a resumed one needs it (it holds the tiered data)."""
    client = s3_client(state)
    try:
        client.head_bucket(Bucket=state.bucket)
    except bce.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise LocalClusterError(f"cannot use bucket {state.bucket!r} at {state.s3_endpoint}: {exc}") from exc
        if not create:
            raise LocalClusterError(
                f"bucket {state.bucket!r} no longer exists at {state.s3_endpoint}: the cluster in {state.dir} kept its "
                f"tiered data there; 'tieredctl cluster down --purge --dir {state.dir}' deletes the cluster"
            ) from exc
        client.create_bucket(Bucket=state.bucket)


def _healthy(
    state: LocalClusterState, brokers: int, ssl_context: ssl.SSLContext | None, sasl: SaslCredentials | None
) -> bool:
    async def check() -> bool:
        client = AdminClient(
            state.bootstrap_server,
            timeout_s=2,
            max_attempts=1,
            ssl_context=ssl_context,
            sasl=sasl,
        )
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


# Everything a local cluster writes under its directory ('down --purge' deletes exactly these).
_CLUSTER_FILES = (
    STATE_FILE,
    CLIENT_PROPERTIES,
    "security",
    STORE_FILE,
    f"{STORE_FILE}-wal",
    f"{STORE_FILE}-shm",
    "config",
    "run",
    "data",
    "logs",
    SNAPSHOT_DIR,
)


def _purge(directory: Path) -> list[str]:
    deleted = []
    for name in _CLUSTER_FILES:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        deleted.append(str(path))
    return deleted


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
            return Stopped([], str(directory), purged=True, deleted=_purge(directory), resumable=False)
        LocalClusterState.load(directory)  # raises: no cluster here
        raise AssertionError("unreachable")
    order = {"broker": 0, "controller": 1, "s3": 2}
    stopped = []
    for p in sorted(state.processes, key=lambda p: order[p.role]):
        was = is_ours(p)
        if p.role == "s3" and purge:
            kill_process(p)  # its objects are about to be deleted: no snapshot
        else:
            stop_process(p, timeout_s=S3_STOP_TIMEOUT_S if p.role == "s3" else timeout_s)
        if was:
            stopped.append(p)
    warnings = []
    if not state.embedded_s3:
        where = f"s3://{state.bucket}/{state.prefix} at {state.s3_endpoint}"
        warnings.append(f"objects in {where} are not deleted" if purge else f"objects stay in {where}")
    if state.store is not None and purge:
        location = parse_store_spec(state.store).location
        warnings.append(f"the metadata in the external store {location} is not deleted (drop it yourself)")
    if purge:
        deleted = _purge(directory)
        return Stopped(stopped, str(directory), purged=True, deleted=deleted, resumable=False, warnings=warnings)
    state.save()
    s3_objects = None
    if state.embedded_s3:
        found = s3_snapshot.status(directory / SNAPSHOT_DIR)
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


def kill_process(p: ProcessInfo) -> None:
    """SIGKILL, only while the pid is still the process we started; reaps our own child."""
    child = _CHILDREN.pop(p.pid, None)
    if is_ours(p):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if child is not None:
        child.wait(timeout=10)
    deadline = time.monotonic() + 10
    while is_ours(p) and time.monotonic() < deadline:
        time.sleep(0.05)


def status(directory: Path) -> dict[str, Any]:
    """The contract of ``cluster status --output json``."""
    state = LocalClusterState.load(directory.resolve())
    active = None
    if state.store is not None or state.metadata_store.exists():
        with _open_cluster_store(state) as s:
            lease = s.current_lease()
            if lease is not None and not lease.expired(int(time.time() * 1000)):
                active = int(lease.holder.split("@", 1)[0]) if "@" in lease.holder else None
    procs = []
    for p in state.processes:
        alive = is_ours(p)
        entry: dict[str, Any] = {"role": p.role, "id": p.id, "pid": p.pid, "port": p.port, "alive": alive, "log": p.log}
        entry["metrics_url"] = f"http://127.0.0.1:{p.metrics_port}/metrics" if p.metrics_port else None
        if p.role == "controller":
            entry["active"] = entry["alive"] and p.id == active
        procs.append(entry)
    return {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap_server,
        "s3_endpoint": state.s3_endpoint,
        "bucket": state.bucket,
        "prefix": state.prefix,
        "store": parse_store_spec(state.store_spec).location,  # never a password
        "security": {"tls": state.tls, "sasl": state.sasl, "acls": state.acls},
        "client_properties": str(Path(state.dir) / CLIENT_PROPERTIES) if state.tls or state.sasl else None,
        "processes": procs,
    }


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
    dead = _CHILDREN.pop(p.pid, None)
    if dead is not None:  # our child that died by itself (a crash, a crash point): reaped, not left a zombie
        dead.wait(timeout=10)
    taken = [port for port in (p.port, p.metrics_port) if port and not _port_free(port)]
    moved: Tables | None = None
    if taken and role != "broker":
        raise LocalClusterError(
            f"{role} {ident} cannot restart: its port(s) {taken} on 127.0.0.1 were taken by another process while it "
            "was down; a controller's address is in every bootstrap list, so it cannot move. Free the port, or "
            f"'tieredctl cluster down --dir {state.dir}' then 'cluster up' to start it anew"
        )
    if taken:  # a broker moves: it registers its new address, and clients follow Metadata to it
        moved = _read_toml(Path(p.config))
        _write_toml(Path(p.config), _with_overrides(moved, {role: {"port": 0}, "metrics": {"port": 0}}))
    if role == "s3":
        ready = Path(p.config)
        cmd = embedded_s3_command(ready, port=p.port, snapshot_dir=Path(state.dir) / SNAPSHOT_DIR)
    else:
        ready = Path(state.dir) / "run" / f"{role}-{ident}.ready"
        cmd = controller_command(Path(p.config)) if role == "controller" else broker_command(Path(p.config))
    ready.unlink(missing_ok=True)
    proc = _spawn(cmd, Path(p.log), process_env(state) | dict(env or {}))
    p.pid = proc.pid
    state.save()
    if moved is not None:
        _Starting(p, proc, ready, moved).wait(timeout_s)  # learns the new ports and writes them into the settings
        state.save()
    else:
        _wait(f"{role} {ident} to restart", ready.exists, timeout_s, Path(p.log), proc)
    return p


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now. A port a process bound with port 0 is an ephemeral port: while
    the process is down, any outgoing connection of the machine may be given it as its source port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener's TIME_WAIT leftovers do not count
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
