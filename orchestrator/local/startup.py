"""``cluster up``: start a new local cluster, or resume the one ``cluster down`` left, or start again the processes
of a running one that died, and wait until it is healthy.

The steps, in order: plan (:mod:`.plan`), record an external store, make the directories, write the security
files, start the embedded S3 and make sure of the bucket, write the first logins, start the controllers one by one
(each waited on: the brokers need their addresses), start the brokers, record every process, wait for the brokers'
ports, then for every broker to register.

Invariants:
* From the moment the brokers are started, ``cluster.json`` names every process, so ``cluster down`` finds them
  even if this start is interrupted.
* A start that fails stops every process it started. A new cluster that never became healthy is removed (it holds
  nothing of the user's); a resumed one keeps its record as it was (its node ids), for the next attempt.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import botocore.exceptions as bce

from orchestrator.errors import LocalClusterError, TieredError
from orchestrator.local.access import operator_security, s3_client
from orchestrator.local.cluster_store import open_cluster_store, record_external_store, store_password_tables
from orchestrator.local.nodes import StartingNode, broker_settings, controller_settings, start_node
from orchestrator.local.plan import (
    CONTROLLER_ID_BASE,
    ClusterPlan,
    ClusterRequest,
    dead_processes,
    plan_new,
    plan_resume,
)
from orchestrator.local.ports import stable_port
from orchestrator.local.processes import S3_STOP_TIMEOUT_S, process_env, start_embedded_s3, stop_process, wait_for
from orchestrator.local.restart import BIND_ATTEMPTS, lost_bind_race, restart
from orchestrator.local.s3_snapshot import SNAPSHOT_DIR
from orchestrator.local.security import LocalSecurity, bootstrap_logins, node_name, prepare
from orchestrator.local.settings_files import Tables
from orchestrator.local.shutdown import purge_files
from orchestrator.local.state import LocalClusterState, ProcessInfo, is_ours
from orchestrator.net.admin import AdminClient
from orchestrator.net.client_security import SaslCredentials
from orchestrator.private_files import private_dir
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

Progress = Callable[[str], None]
HEALTH_CHECK_TIMEOUT_S = 2.0
CLUSTER_DIRS = (".", "run", "config", "logs")  # made 0700 before anything starts


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
    progress: Progress = lambda _m: None,
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
    request = ClusterRequest(brokers, controllers, s3_endpoint, bucket, prefix, store, security)
    previous = LocalClusterState.load_if_present(directory)
    if previous is not None and any(is_ours(p) for p in previous.processes):
        return _start_dead(previous, request, timeout_s, progress)
    plan = _plan(directory, request, progress)
    for name in CLUSTER_DIRS:
        private_dir(directory / name)
    recorded = list(plan.state.processes)
    started: list[ProcessInfo] = []
    try:
        new_files = not plan.resumed
        node_tables = prepare(directory, security, plan.nodes, s3_key_pair=plan.state.s3_auth)[0] if new_files else {}
        launch = _Launch(
            env=process_env(plan.state),  # after prepare: a secured cluster's S3 key pair is in its file
            overrides={"controller": controller_overrides, "broker": broker_overrides},
            timeout_s=timeout_s,
            progress=progress,
        )
        _start_cluster(plan, launch, node_tables, started)
    except BaseException:
        _undo(plan, started, recorded)
        raise
    progress("cluster is healthy")
    return plan.state


def _start_dead(
    state: LocalClusterState, request: ClusterRequest, timeout_s: float, progress: Progress
) -> LocalClusterState:
    """Some processes of the cluster run: start the others again on their addresses, then wait until healthy. A
    process that does not come back is left as it is (the others keep running) and the error says which."""
    dead = dead_processes(state, request)
    running = len(state.processes) - len(dead)
    progress(
        f"{running} of {len(state.processes)} processes of the cluster in {state.dir} are running; starting the "
        f"others again: {', '.join(f'{p.role} {p.id}' for p in dead)}"
    )
    for p in dead:
        back = restart(Path(state.dir), p.role, p.id, timeout_s=timeout_s)
        if back.port != p.port:  # a broker whose port another process took while it was down (restart.py)
            taken = f"its port {p.port} was taken while it was down"
            progress(f"{p.role} {p.id} started again on port {back.port}: {taken}")
        else:
            progress(f"{p.role} {p.id} started again")
    state = LocalClusterState.load(Path(state.dir))
    brokers = sum(p.role == "broker" for p in state.processes)
    first_controller = min(p.id for p in state.processes if p.role == "controller")
    _wait_healthy(state, brokers, first_controller, timeout_s)
    progress("cluster is healthy")
    return state


@dataclass(frozen=True)
class _Launch:
    """How the processes of one ``up`` are started: their environment, the caller's settings by role, how long each
    may take to be ready, and where the steps are reported."""

    env: Mapping[str, str]
    overrides: Mapping[str, Tables | None]
    timeout_s: float
    progress: Progress


def _plan(directory: Path, request: ClusterRequest, progress: Progress) -> ClusterPlan:
    """A new cluster (its external store recorded), or the stopped one in ``directory``, checked."""
    previous = LocalClusterState.load_if_present(directory)
    if previous is not None:
        plan = plan_resume(directory, previous, request)
        sizes = f"{len(plan.broker_ids)} broker(s), {len(plan.controller_ids)} controller(s)"
        progress(f"resuming the cluster in {directory}: {sizes}, its data and objects as 'cluster down' left them")
        return plan
    plan = plan_new(directory, request)
    if request.store is not None:
        try:
            record_external_store(plan.state, request.store)
        except BaseException:
            purge_files(directory)  # the password file it may have written: nothing of a cluster stays
            raise
    return plan


def _start_cluster(
    plan: ClusterPlan, launch: _Launch, node_tables: Mapping[str, Tables], started: list[ProcessInfo]
) -> None:
    """Every step after the plan; each process goes into ``started`` as soon as it runs, so a failure stops it."""
    state = plan.state
    if state.embedded_s3:
        _start_s3(state, launch, started)
    _ensure_bucket(state, create=not plan.resumed)
    if not plan.resumed and state.sasl:
        _write_first_logins(state, launch.progress)
    store_tables = store_password_tables(state)

    def shared(role: str, node: int) -> Tables:
        return {**store_tables, **node_tables.get(node_name(role, node), {})}

    ports = [_start_controller(plan, node, shared("controller", node), launch, started) for node in plan.controller_ids]
    state.bootstrap_server = ",".join(f"127.0.0.1:{port}" for port in ports)
    brokers = [_start_broker(plan, b, shared("broker", b), launch, started) for b in plan.broker_ids]
    state.processes = started
    state.save()  # from here on 'cluster down' finds every process, even if this start is interrupted
    for broker in brokers:
        broker.wait(launch.timeout_s)
    state.save()  # with the ports the brokers bound
    _wait_healthy(state, len(plan.broker_ids), plan.controller_ids[0], launch.timeout_s)


def _start_s3(state: LocalClusterState, launch: _Launch, started: list[ProcessInfo]) -> None:
    directory = Path(state.dir)
    s3 = start_embedded_s3(
        directory / "logs" / "s3-0.log",
        snapshot_dir=directory / SNAPSHOT_DIR,
        ready_file=directory / "run" / "s3-0.ready",
        credentials_file=state.s3_credentials_file,
        timeout_s=launch.timeout_s,
    )
    started.append(s3)
    state.s3_endpoint = f"http://127.0.0.1:{s3.port}"
    signed = f"; it serves only requests signed with the key pair in {state.s3_credentials_file}"
    launch.progress(f"embedded S3 (moto's server) started at {state.s3_endpoint}{signed if state.s3_auth else ''}")


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


def _write_first_logins(state: LocalClusterState, progress: Progress) -> None:
    with open_cluster_store(state, create=True) as metadata:
        bootstrap_logins(Path(state.dir), metadata)  # the first logins, before anyone needs one
    progress("SCRAM logins written into the new metadata log")


def _start_controller(plan: ClusterPlan, node: int, shared: Tables, launch: _Launch, started: list[ProcessInfo]) -> int:
    """Start controller ``node`` on a port below the ephemeral range (:mod:`.ports`: one no outgoing connection can
    take while it is down, so it restarts on the same address) and wait until it serves (the brokers are told the
    controllers' addresses); returns its port. A port taken between the choice and the controller's bind is
    replaced by another, at most ``BIND_ATTEMPTS`` times in all."""
    settings = controller_settings(plan.state, node, shared)
    for attempt in range(1, BIND_ATTEMPTS + 1):
        chosen = stable_port()
        starting = _start_node(plan, "controller", node, settings, launch, port=chosen)
        log = Path(starting.process.log)
        log_size = log.stat().st_size if log.exists() else 0
        started.append(starting.process)
        launch.progress(f"controller {node} starting")
        try:
            port = starting.wait(launch.timeout_s)
        except LocalClusterError:
            if attempt == BIND_ATTEMPTS or not lost_bind_race(log, log_size):
                raise
            started.remove(starting.process)  # it exited: nothing to stop
            launch.progress(f"controller {node}: port {chosen} was taken before it could bind it; choosing another")
            continue
        launch.progress(f"controller {node} serves on 127.0.0.1:{port}")
        return port
    raise AssertionError("unreachable")


def _start_broker(
    plan: ClusterPlan, broker: int, shared: Tables, launch: _Launch, started: list[ProcessInfo]
) -> StartingNode:
    """Start broker ``broker``, not waited on: the brokers start side by side."""
    starting = _start_node(plan, "broker", broker, broker_settings(plan.state, broker, shared), launch)
    started.append(starting.process)
    launch.progress(f"broker {broker} starting")
    return starting


def _start_node(
    plan: ClusterPlan, role: str, node: int, settings: Tables, launch: _Launch, *, port: int = 0
) -> StartingNode:
    directory = Path(plan.state.dir)
    overrides = launch.overrides[role]
    return start_node(directory, role, node, settings, overrides, fresh=not plan.resumed, env=launch.env, port=port)


def _wait_healthy(state: LocalClusterState, brokers: int, first_controller: int, timeout_s: float) -> None:
    controller_log = Path(state.dir) / "logs" / f"controller-{first_controller}.log"
    operator = operator_security(state)
    operator_ssl = operator.ssl_context()  # the certificate files read once, not on every poll
    wait_for(
        "every broker to register and be unfenced",
        lambda: _healthy(state, brokers, operator_ssl, operator.sasl),
        timeout_s,
        controller_log,
    )


def _healthy(
    state: LocalClusterState, brokers: int, ssl_context: ssl.SSLContext | None, sasl: SaslCredentials | None
) -> bool:
    """Whether a controller is active and at least ``brokers`` brokers are live, asked once."""

    async def check() -> bool:
        client = AdminClient(
            state.bootstrap_server,
            timeout_s=HEALTH_CHECK_TIMEOUT_S,
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


def _undo(plan: ClusterPlan, started: list[ProcessInfo], recorded: list[ProcessInfo]) -> None:
    """After a failed start: stop what it started; remove a new cluster, keep a resumed one's record as it was."""
    for p in reversed(started):
        stop_process(p, timeout_s=S3_STOP_TIMEOUT_S if p.role == "s3" and plan.resumed else 5)
    if not plan.resumed:
        purge_files(Path(plan.state.dir))  # a cluster that never started holds nothing of the user's
    else:
        plan.state.processes = recorded  # keep the cluster's record (its node ids) for the next attempt
        plan.state.save()
