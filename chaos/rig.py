"""The rig of one chaos run: the real processes and proxies it drives, started in order and stopped by pid.

A :class:`Rig` is, all on 127.0.0.1: the embedded S3 (moto's server) behind an :class:`~chaos.s3_proxy.S3FaultProxy`,
the controllers and brokers of :mod:`orchestrator.local.cluster` (with this suite's fast timings), sentinel objects in
the bucket outside every topic's prefix, and a :class:`~chaos.link_proxy.LinkProxy` on every link between a broker and
a controller; when the store is the run's own PostgreSQL server, that server's control (:mod:`chaos.store_server`),
for the faults it suffers, and a link proxy between each process and that server (:mod:`chaos.store_links`); when
the scenario draws disk I/O errors, the preload library of :mod:`chaos.io_errors` in every process it starts. It
also opens a :class:`~orchestrator.client.TieredClient` per call (:meth:`Rig.call`) and
finds a process of the cluster by role and id.

Invariants: :meth:`Rig.close` stops every process the rig started, by pid, whatever part of the start-up was reached
(every piece is ``None`` until it is up); paused processes are continued first, so that they can be stopped, and the
PostgreSQL server is continued or started again first, so that the cluster can shut down and the next seed finds it
up; the sentinels are written straight to moto's server, never through the fault proxy; this process's environment
(which carries the preload library to the processes it starts) is restored by :meth:`Rig.close`, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from chaos.disk import DiskFaultRefused, SizedDisk
from chaos.io_errors import build_library, preloaded
from chaos.links import Links, insert_link_proxies
from chaos.s3_proxy import S3FaultProxy
from chaos.scenario import DISK_EIO, S3_READ_TIMEOUT_S, Scenario
from chaos.store_links import StoreLinks, insert_store_proxies
from chaos.store_server import ChaosPostgres
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.local.security import LocalSecurity
from orchestrator.local.state import LocalClusterState, ProcessInfo, is_ours
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity
from remote_storage.s3 import make_s3_client

T = TypeVar("T")

# The fast timings of a test cluster; tests/support/live_cluster.py uses them too.
# The loops' own pace is the product's default: a test cluster's broker spends about half its idle CPU on loop
# rounds at 200, 50 and 200 ms against 500, 100 and 500 ms (a 3-broker cluster: 4.6% of a core each against 2.4%),
# and the suite runs clusters side by side on 2 cores, so faster rounds slowed every other test more than they
# sped up their own.
FAST_BROKER: dict[str, dict[str, Any]] = {
    "broker": {
        "heartbeat_interval_ms": 500,
        "metadata_poll_ms": 100,
        "tiering_interval_ms": 500,
        "segment_bytes": 4096,
        "segment_ms": 600_000,
        "request_timeout_ms": 3000,
        # A failing loop or partition is tried again within 2 s (10 s by default): once a fault is lifted, the
        # cluster catches up in seconds instead of waiting out a long backoff window.
        "loop_retry_max_ms": 2000,
        # A running job's answer is held at most 1 s: half the fast controllers' disablement request timeout (2 s),
        # which it must stay well below.
        "job_answer_wait_ms": 1000,
    },
    # A hung S3 request ends within 5 s (30 s by default), and so the late-write window of the deletions that must
    # leave nothing behind (five read timeouts, remote_storage.deletion) is 25 s instead of 150 s.
    "s3": {"read_timeout_s": 5.0},
}
FAST_CONTROLLER = {
    "controller": {"lease_ttl_ms": 1500},
    "membership": {"session_timeout_ms": 2500},
    # A broker that did not answer is asked again within 2 s (30 s by default): a broker back from a pause or a
    # fault is reached in seconds, not after a backoff that grew while it was away.
    "disablement": {"request_timeout_ms": 2000, "repoll_ms": 100, "retry_backoff_max_ms": 2000},
}
CONTROLLER_SETTINGS = {
    **FAST_CONTROLLER,
    # Snapshots often enough that a run writes some (and can crash in one). A snapshot lets the records before
    # the oldest one kept go: the run's tail of the log (chaos.log_tail) holds it at what it has not read yet.
    "snapshots": {"every_records": 40, "retained": 2},
}
# With replicas, a follower that has not caught up this long leaves the ISR (Kafka's replica.lag.time.max.ms, 30 s
# by default): within the run's pauses (0.3 to 2 s) and link faults, so that ISR shrinks and expands happen under
# faults too, not only the fencing of a broker dead past its session.
REPLICA_LAG_MS = 2000
OP_TIMEOUT_S = 20.0
IO_ERRORS_LIBRARY_DIR = Path(tempfile.gettempdir()) / "tieredctl-chaos-native"  # built once per source version
DISK_BYTES = 64 * 1024 * 1024  # a broker's own disk in a run with disk faults: far above what a run writes
CLIENT_TIMEOUT_S = 5.0
SENTINELS = (
    "outside/keep.bin",
    "{prefix}chaos-0-sentinel/keep.bin",
    "{prefix}chaos-10-AAAAAAAAAAAAAAAAAAAAAA/0/keep.bin",
)
BUCKET = "chaos"
PREFIX = "tiered/"


class Rig:
    def __init__(
        self,
        directory: Path,
        scenario: Scenario,
        *,
        store: str | None = None,
        postgres: ChaosPostgres | None = None,
        security: LocalSecurity = LocalSecurity(),
    ) -> None:
        self.dir = directory
        self.cluster_dir = directory / "cluster"
        self.store = store  # a postgresql:// URL, or None: the cluster's SQLite file
        self.postgres = postgres  # the server of ``store`` when the run may pause and restart it; else None
        self.security = security  # TLS, SCRAM logins and ACLs on every Kafka port of the cluster, as asked
        self.client_security: ClientSecurity = PLAINTEXT  # how the run's own clients connect: the cluster's admin
        self.scenario = scenario
        self.s3: ProcessInfo | None = None
        self.proxy: S3FaultProxy | None = None
        self.links: Links | None = None
        self.store_links: StoreLinks | None = None  # each process's link to the run's PostgreSQL server
        self.sized_disks: dict[int, SizedDisk] = {}  # broker id -> its data directory's own tmpfs (disk faults)
        # With a disk_eio fault in the scenario, every process of the cluster starts with the I/O error library
        # (chaos.io_errors), which watches data/: None then, else why not (the faults are skipped, saying so).
        self.io_errors_refused: str | None = "the scenario draws no disk_eio fault"
        self._environment = contextlib.ExitStack()
        self.bootstrap = ""
        self.sentinels = frozenset(s.format(prefix=PREFIX) for s in SENTINELS)

    # -- set-up and tear-down ---------------------------------------------------------------------------------

    def start_cluster(self) -> None:
        """S3 and its fault proxy, then the cluster, every S3 request of which goes through the proxy."""
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "chaos")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "chaos")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        if any(f.kind == DISK_EIO for f in self.scenario.faults):
            try:
                library = build_library(IO_ERRORS_LIBRARY_DIR)
            except DiskFaultRefused as exc:
                self.io_errors_refused = str(exc)
            else:
                self._environment.enter_context(preloaded(library, self.cluster_dir / "data"))
                self.io_errors_refused = None
        self.s3 = lc.start_embedded_s3(self.dir / "s3.log")
        target = f"http://127.0.0.1:{self.s3.port}"
        self.proxy = S3FaultProxy(target, seed=self.scenario.seed)
        self.direct_s3 = make_s3_client(endpoint_url=target)
        state = lc.up(
            self.cluster_dir,
            brokers=self.scenario.brokers,
            controllers=self.scenario.controllers,
            s3_endpoint=self.proxy.url,
            bucket=BUCKET,
            prefix=PREFIX,
            broker_overrides=self.broker_settings(),
            controller_overrides=CONTROLLER_SETTINGS,
            store=self.store,
            security=self.security,
        )
        self.client_security = lc.operator_security(state)
        self.bootstrap = state.bootstrap_server

    def broker_settings(self) -> dict[str, dict[str, Any]]:
        """The brokers' overrides: the fast timings, an S3 read timeout that a ``hang`` fault outlasts
        (:data:`~chaos.scenario.S3_READ_TIMEOUT_S`), and with replicas a short :data:`REPLICA_LAG_MS`."""
        broker = dict(FAST_BROKER["broker"])
        if self.scenario.replication_factor > 1:
            broker["replica_lag_time_max_ms"] = REPLICA_LAG_MS
        return {"broker": broker, "s3": {"read_timeout_s": S3_READ_TIMEOUT_S}}

    @property
    def store_spec(self) -> str:
        """Where the cluster's metadata is, as :func:`~orchestrator.metadata.open.open_store` takes it."""
        return self.store if self.store is not None else str(self.cluster_dir / "metadata.db")

    def plant_sentinels(self) -> None:
        for key in self.sentinels:
            self.direct_s3.put_object(Bucket=BUCKET, Key=key, Body=b"not a topic's: never touched")

    def size_disks(self, size_bytes: int = DISK_BYTES) -> None:
        """Move every broker's data directory onto a tmpfs of its own (:class:`~chaos.disk.SizedDisk`), the broker
        stopped meanwhile and started again, so that a ``disk_full`` fault can fill it."""
        for p in LocalClusterState.load(self.cluster_dir).processes:
            if p.role != "broker":
                continue
            lc.stop_process(p, timeout_s=10)
            self.sized_disks[p.id] = SizedDisk(self.cluster_dir / "data" / f"broker-{p.id}", size_bytes)
            lc.restart(self.cluster_dir, "broker", p.id)

    def insert_links(self) -> None:
        """The link proxies between brokers and controllers and, when the run controls the store's server, between
        every process and the store (:mod:`chaos.store_links`), for the faults drawn on them."""
        if self.postgres is not None:
            self.store_links = insert_store_proxies(self.cluster_dir)
        self.links = insert_link_proxies(self.cluster_dir)

    def close(self) -> None:
        """Everything the run started stopped, every disk released, and this process's environment as it was."""
        try:
            self._close()
        finally:
            self._environment.close()

    def _close(self) -> None:
        if self.postgres is not None:
            with contextlib.suppress(Exception):  # one that will not start again fails the seed's database drop
                self.postgres.heal()
        with contextlib.suppress(Exception):
            if LocalClusterState.load_if_present(self.cluster_dir) is not None:
                for p in LocalClusterState.load(self.cluster_dir).processes:
                    if is_ours(p):
                        os.kill(p.pid, signal.SIGCONT)
                lc.down(self.cluster_dir, purge=False, timeout_s=10)
        if self.links is not None:
            self.links.close()
        if self.store_links is not None:
            self.store_links.close()
        for disk in self.sized_disks.values():  # once the brokers stopped: their files go with the tmpfs
            with contextlib.suppress(Exception):
                disk.release()
        if self.proxy is not None:
            self.proxy.close()
        if self.s3 is not None:
            lc.stop_process(self.s3, timeout_s=5)

    # -- using it -------------------------------------------------------------------------------------------------

    def call(self, fn: Callable[[TieredClient], Coroutine[Any, Any, T]], timeout_s: float = OP_TIMEOUT_S) -> T:
        """One call through a client of its own, within ``timeout_s``."""

        async def go() -> T:
            async with TieredClient(self.bootstrap, timeout_s=CLIENT_TIMEOUT_S, security=self.client_security) as c:
                return await asyncio.wait_for(fn(c), timeout_s)

        return asyncio.run(go())

    def process(self, role: str, ident: int) -> ProcessInfo:
        return LocalClusterState.load(self.cluster_dir).find(role, ident)

    def controller_id(self, target: int) -> int:
        """Controller ``target`` (0-based), or the active one when ``target`` is negative."""
        if target >= 0:
            return lc.CONTROLLER_ID_BASE + target
        active = [p["id"] for p in lc.status(self.cluster_dir)["processes"] if p.get("active")]
        return int(active[0]) if active else lc.CONTROLLER_ID_BASE
