"""What ``cluster up`` starts: a new cluster's record and node ids, or the stopped cluster's own, checked against
what was asked.

Invariants:
* A new cluster goes only into a directory that holds no file of a cluster (:data:`CLUSTER_FILES`): leftovers
  without a ``cluster.json`` are refused with the command that deletes them.
* A resumed cluster keeps its node ids, data directories, store, bucket, prefix, endpoint and security; an argument
  given to ``up`` that differs from them is refused, naming both, never silently ignored.
* ``up`` on a cluster of which only some processes run starts just the others (:func:`dead_processes`), as
  ``docker compose up`` does, unless the one that died is the embedded S3 (its objects died with it).
* A cluster whose embedded S3 did not stop cleanly (killed: its objects died with it) is not resumed: ``up`` refuses
  and says how to purge it, instead of serving topics whose tiered data is silently gone.
* Node ids: brokers 1..N; controllers from :data:`CONTROLLER_ID_BASE`, so the two never meet.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.local import s3_snapshot
from orchestrator.local.security import LocalSecurity
from orchestrator.local.state import (
    CLUSTER_FILES,
    DEFAULT_BUCKET,
    DEFAULT_PREFIX,
    STATE_FILE,
    STORE_FILE,
    LocalClusterState,
    ProcessInfo,
    is_ours,
)
from orchestrator.metadata.open import split_password

CONTROLLER_ID_BASE = 3000
DEFAULT_BROKERS = 3
DEFAULT_CONTROLLERS = 2


@dataclass(frozen=True)
class ClusterRequest:
    """What ``cluster up`` was asked for. None: not given (a new cluster takes the default, a resumed one keeps its
    own). ``store`` is a ``postgresql://`` URL, its password included or not."""

    brokers: int | None = None
    controllers: int | None = None
    s3_endpoint: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    store: str | None = None
    security: LocalSecurity = LocalSecurity()


@dataclass(frozen=True)
class ClusterPlan:
    """The cluster ``up`` starts: its record (filled in as its processes start) and its node ids."""

    state: LocalClusterState
    controller_ids: tuple[int, ...]
    broker_ids: tuple[int, ...]
    resumed: bool

    @property
    def nodes(self) -> list[tuple[str, int]]:
        return [("controller", n) for n in self.controller_ids] + [("broker", b) for b in self.broker_ids]


def plan_new(directory: Path, request: ClusterRequest) -> ClusterPlan:
    """A new cluster in ``directory`` (resolved), as asked; its external store is not recorded yet."""
    refuse_leftovers(directory)
    n_brokers = request.brokers or DEFAULT_BROKERS
    n_controllers = request.controllers or DEFAULT_CONTROLLERS
    if n_brokers < 1 or n_controllers < 1:
        raise LocalClusterError("a cluster needs at least one broker and one controller")
    embedded = request.s3_endpoint is None
    authenticated = request.security.tls or request.security.sasl  # the S3 and /metrics then require it too
    state = LocalClusterState(
        str(directory),
        "",
        request.s3_endpoint or "",
        request.bucket or DEFAULT_BUCKET,
        request.prefix or DEFAULT_PREFIX,
        embedded_s3=embedded,
        tls=request.security.tls,
        sasl=request.security.sasl,
        acls=request.security.acls,
        s3_secret_key=secrets.token_urlsafe(24) if embedded and not authenticated else None,
        s3_auth=embedded and authenticated,
        metrics_tls=authenticated,
    )
    controller_ids = tuple(CONTROLLER_ID_BASE + i for i in range(n_controllers))
    broker_ids = tuple(range(1, n_brokers + 1))
    return ClusterPlan(state, controller_ids, broker_ids, resumed=False)


def plan_resume(directory: Path, state: LocalClusterState, request: ClusterRequest) -> ClusterPlan:
    """The stopped cluster that ``state``, read from ``directory`` (resolved), records, once checked that it can
    resume as asked."""
    check_resumable(state, request)
    controller_ids = tuple(p.id for p in state.processes if p.role == "controller")
    broker_ids = tuple(p.id for p in state.processes if p.role == "broker")
    return ClusterPlan(state, controller_ids, broker_ids, resumed=True)


def refuse_leftovers(directory: Path) -> None:
    leftovers = [name for name in CLUSTER_FILES if (directory / name).exists()]
    if leftovers:
        raise LocalClusterError(
            f"{directory} holds files of a local cluster ({', '.join(leftovers)}) but no {STATE_FILE} to resume it "
            f"from; 'tieredctl cluster down --purge --dir {directory}' deletes them"
        )


def check_resumable(state: LocalClusterState, request: ClusterRequest) -> None:
    """The cluster is stopped, is what ``request`` names where it names anything, and kept its objects."""
    directory = Path(state.dir)
    running = [p for p in state.processes if is_ours(p)]
    if running:
        raise LocalClusterError(
            f"a cluster is already running in {directory} ({len(running)} process(es)); "
            f"'tieredctl cluster down --dir {directory}' stops it"
        )
    check_matches(state, request)
    if state.embedded_s3:
        _check_objects_kept(directory, _start_over(directory))


def dead_processes(state: LocalClusterState, request: ClusterRequest) -> list[ProcessInfo]:
    """For a cluster of which some processes run: the ones that do not, to be started again on their addresses
    (the embedded S3 first, then controllers, then brokers). Refused when every process runs (nothing to do: said
    so), when ``request`` names something else, or when the dead one is the embedded S3 (killed: its objects died
    with it, so the topics' tiered data is gone)."""
    directory = Path(state.dir)
    check_matches(state, request)
    dead = [p for p in state.processes if not is_ours(p)]
    if not dead:
        raise LocalClusterError(
            f"the cluster in {directory} is already running, all {len(state.processes)} of its processes; "
            f"'tieredctl cluster status --dir {directory}' shows them, 'tieredctl cluster down --dir {directory}' "
            "stops it"
        )
    if any(p.role == "s3" for p in dead):
        raise LocalClusterError(
            f"the embedded S3 of the cluster in {directory} is not running while the rest is: it was killed, and the "
            f"objects it kept in memory died with it; {_start_over(directory)}"
        )
    order = {"controller": 0, "broker": 1}
    return sorted(dead, key=lambda p: (order.get(p.role, 2), p.id))


def _start_over(directory: Path) -> str:
    return f"'tieredctl cluster down --purge --dir {directory}' deletes it, then 'cluster up' starts a new one"


def check_matches(state: LocalClusterState, request: ClusterRequest) -> None:
    """What ``request`` names, where it names anything, is what the cluster in ``state`` is."""
    directory = Path(state.dir)
    security = request.security
    if security.on and security != LocalSecurity(state.tls, state.sasl, state.acls):
        raise LocalClusterError(
            f"the cluster in {directory} was started with tls={state.tls}, sasl={state.sasl}, acls={state.acls}; "
            "it resumes as it was ('cluster up' without those options), or purge it to start anew"
        )
    if request.store is not None and split_password(request.store)[0] != state.store:
        raise LocalClusterError(
            f"the cluster in {directory} keeps its metadata in {state.store or STORE_FILE}, not in the --store "
            f"given; 'tieredctl cluster down --purge --dir {directory}' deletes it, then 'cluster up' starts anew"
        )
    start_over = _start_over(directory)
    counts = {
        "broker": (request.brokers, sum(p.role == "broker" for p in state.processes)),
        "controller": (request.controllers, sum(p.role == "controller" for p in state.processes)),
    }
    for role, (asked, has) in counts.items():
        if asked is not None and asked != has:
            raise LocalClusterError(f"the cluster in {directory} has {has} {role}(s), not {asked}; {start_over}")
    s3_endpoint = request.s3_endpoint
    if s3_endpoint is not None and (state.embedded_s3 or s3_endpoint != state.s3_endpoint):
        was = "the embedded S3" if state.embedded_s3 else state.s3_endpoint
        raise LocalClusterError(
            f"the cluster in {directory} keeps its objects in {was}, not {s3_endpoint}; {start_over}"
        )
    if request.bucket is not None and request.bucket != state.bucket:
        raise LocalClusterError(
            f"the cluster in {directory} uses bucket {state.bucket!r}, not {request.bucket!r}; {start_over}"
        )
    if request.prefix is not None and request.prefix != state.prefix:
        raise LocalClusterError(
            f"the cluster in {directory} uses prefix {state.prefix!r}, not {request.prefix!r}; {start_over}"
        )


def _check_objects_kept(directory: Path, start_over: str) -> None:
    snapshot_dir = directory / s3_snapshot.SNAPSHOT_DIR
    if s3_snapshot.status(snapshot_dir).status is not s3_snapshot.SnapshotStatus.STOPPED:
        raise LocalClusterError(
            f"the embedded S3 of the cluster in {directory} did not stop cleanly (it keeps objects in memory and "
            f"writes them to {snapshot_dir} only when 'cluster down' stops it), so the objects of its "
            f"tiered topics are gone and resuming would serve topics whose data is missing; {start_over}"
        )
