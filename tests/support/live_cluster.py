"""A real local cluster (separate OS processes) for integration tests, with fast timings and helpers to wait.

Every process is started by :mod:`orchestrator.local.cluster` and stopped by pid at teardown, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from chaos.runner import FAST_BROKER, FAST_CONTROLLER
from orchestrator.client import TieredClient
from orchestrator.errors import UnknownTopicOrPartition
from orchestrator.local import cluster as lc
from orchestrator.local.security import LocalSecurity
from orchestrator.local.state import LocalClusterState, ProcessInfo
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import SegmentState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.client_security import ClientSecurity
from remote_storage.rlmm_topic.layout import TOPIC_NAME
from tests.support.kafka_clients import confluent_watermarks

T = TypeVar("T")

# For a test whose S3 fails on purpose for a while (a shut gate, a proxy answering errors): each S3 call is tried
# twice instead of eight times ([s3] max_attempts), so a broker's attempt against the outage ends, and is reported
# and retried by the controller, in a fraction of a second instead of seconds of backoff; and a request waits at
# most 2 s for an answer instead of 5, so the late-write window that a deletion resumed after the outage waits out
# (five read timeouts, remote_storage.deletion) is 10 s instead of 25. The same paths run, sooner.
S3_OUTAGE_TIMINGS: dict[str, dict[str, Any]] = {"s3": {**FAST_BROKER["s3"], "read_timeout_s": 2.0, "max_attempts": 2}}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


FIRST_LOOK_S, LAST_LOOK_S = 0.05, 0.5


def look_gaps(interval_s: float | None) -> Iterator[float]:
    """The gaps between :func:`wait_until`'s looks: ``interval_s`` each, or (None) 0.05 s growing by half at each
    look up to 0.5 s. A look is a request to the cluster or a process, and the suite is bound by CPU: an event that
    comes at once is still seen within 0.05 s, and one that takes 20 s costs about 45 looks instead of 200."""
    gap = FIRST_LOOK_S if interval_s is None else interval_s
    while True:
        yield gap
        if interval_s is None:
            gap = min(gap * 1.5, LAST_LOOK_S)


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 30.0, interval_s: float | None = None) -> Any:
    """``check()``'s first true value, looked for until ``timeout_s`` (gaps: :func:`look_gaps`); AssertionError
    naming ``what`` and the last value when it never comes."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    for gap in look_gaps(interval_s):
        last = check()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(gap, left))
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value {last!r}")


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped), or ``?`` once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return "?"


def store_writable(path: Path) -> bool:
    """Nobody holds the SQLite store's write lock (WAL mode: BEGIN IMMEDIATE takes it, or waits up to 1 s)."""
    db = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def pause_outside_sqlite_writes(pid: int, database: Path, what: str, *, attempts: int = 50) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write lock on the SQLite store ``database``: stopped inside a write
    transaction, it is continued, let finish, and stopped again (at most ``attempts`` times, then AssertionError).
    A process stopped while it holds the one-file store's write lock blocks every writer (a standby's lease
    included), a known limit of the SQLite store that a test of failover is not about."""
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        wait_until(f"{what} to stop", lambda: process_state(pid) == "T", timeout_s=10, interval_s=0.01)
        if store_writable(database):
            return
        os.kill(pid, signal.SIGCONT)  # stopped inside a write: let it finish and try again
        time.sleep(0.05)
    raise AssertionError(f"{what} held the store's write lock each of the {attempts} times it was paused")


def fast_up(directory: Path, *, brokers: int, controllers: int, **options: Any) -> LocalClusterState:
    """``cluster up`` of a new cluster (or a resumed one) with the suite's fast timings; ``options`` as
    :func:`orchestrator.local.cluster.up` takes them."""
    return lc.up(
        directory,
        brokers=brokers,
        controllers=controllers,
        broker_overrides=FAST_BROKER,
        controller_overrides=FAST_CONTROLLER,
        **options,
    )


def retries_folded(records: list[tuple[SegmentState, int, int]]) -> list[SegmentState]:
    """A segment's RLMM states, one per distinct record: each record is (state, event time, broker id), and a
    broker's RLMM write whose answer was lost (a controller killed between appending and answering, or slow to
    answer) is sent again as the very same record, which the RLMM takes as a retry (moot), even when it lands after
    the next state. A state written again as a new record (a second deletion, say) stays visible."""
    seen: set[tuple[SegmentState, int, int]] = set()
    out = []
    for record in records:
        if record not in seen:
            seen.add(record)
            out.append(record[0])
    return out


def segment_records(store: Any, topic_id: Any) -> dict[Any, list[tuple[SegmentState, int, int]]]:
    """Each remote segment of the topic id with its RLMM records in order, as (state, event time, broker id)."""
    out: dict[Any, list[tuple[SegmentState, int, int]]] = {}
    for e in store.read_remote_log_metadata(topic_id=topic_id):
        f = e.record.fields
        if "remote_log_segment_id" in f:
            entry = (SegmentState(f["remote_log_segment_state"]), f["event_timestamp_ms"], f["broker_id"])
            out.setdefault(f["remote_log_segment_id"]["id"], []).append(entry)
    return out


COPIED_THEN_DELETED = [
    SegmentState.COPY_SEGMENT_STARTED,
    SegmentState.COPY_SEGMENT_FINISHED,
    SegmentState.DELETE_SEGMENT_STARTED,
    SegmentState.DELETE_SEGMENT_FINISHED,
]


class LiveCluster:
    def __init__(
        self,
        directory: Path,
        *,
        brokers: int = 3,
        controllers: int = 2,
        s3_endpoint: str | None = None,
        bucket: str | None = None,
        controller_overrides: dict[str, dict[str, Any]] | None = None,
        broker_overrides: dict[str, dict[str, Any]] | None = None,
        security: LocalSecurity = LocalSecurity(),
        store: str | None = None,
    ) -> None:
        """A new cluster in ``directory``; on the embedded S3 unless ``s3_endpoint`` (and ``bucket``) name another.
        ``controller_overrides`` adds tables to the fast controller settings (``{"snapshots": {...}}``), and
        ``broker_overrides`` to the fast broker settings (``{"rsm": {...}}``);
        ``security`` turns on TLS, SCRAM logins and ACLs (the clients here connect as the cluster's admin);
        ``store`` (a ``postgresql://`` URL) keeps the metadata there instead of ``metadata.db``."""
        self.dir = directory
        self.store = store
        controller = {**FAST_CONTROLLER, **(controller_overrides or {})}
        broker = {**FAST_BROKER, **(broker_overrides or {})}
        fast_timings = {"broker_overrides": broker, "controller_overrides": controller}
        where = {"s3_endpoint": s3_endpoint, "bucket": bucket, "store": store}
        self.state = lc.up(
            directory, brokers=brokers, controllers=controllers, security=security, **where, **fast_timings
        )
        self.bootstrap = self.state.bootstrap_server
        self.security = lc.operator_security(self.state)

    def client(self, security: ClientSecurity | None = None) -> TieredClient:
        # Batches of at most 1 KiB: the cluster's 4 KiB segments then roll every few batches, as tests expect.
        return TieredClient(self.bootstrap, timeout_s=10, security=security or self.security, max_batch_bytes=1024)

    def call(self, fn: Callable[[TieredClient], Coroutine[Any, Any, T]]) -> T:
        async def go() -> T:
            async with self.client() as c:
                return await fn(c)

        return run(go())

    def metadata_and_active_controller(self) -> tuple[Any, int | None]:
        """Metadata as the active controller answers it, and that controller's id (Metadata's own ``controller_id``
        names the broker that forwards Kafka clients' writes, as in KRaft)."""

        async def ask(c: TieredClient) -> tuple[Any, int | None]:
            md = await c.metadata()
            return md, c.admin.controller_id

        return self.call(ask)

    def process(self, role: str, ident: int) -> ProcessInfo:
        return LocalClusterState.load(self.dir).find(role, ident)

    def maybe_active_controller(self) -> ProcessInfo | None:
        """The active controller, or None during a handover (the lease expired and no one has taken it yet)."""
        st = lc.status(self.dir)
        ids = [p["id"] for p in st["processes"] if p["role"] == "controller" and p.get("active")]
        return self.process("controller", ids[0]) if ids else None

    def active_controller(self) -> ProcessInfo:
        active = self.maybe_active_controller()
        assert active is not None, f"no active controller: {lc.status(self.dir)}"
        return active

    def signal(self, role: str, ident: int, sig: signal.Signals) -> None:
        p = self.process(role, ident)
        assert lc.is_ours(p), f"{role} {ident} is not running"
        os.kill(p.pid, sig)

    def pause_outside_store_writes(self, role: str, ident: int) -> ProcessInfo:
        """SIGSTOP a process of the cluster (:func:`pause_outside_sqlite_writes`; on a PostgreSQL store, ``store=``,
        at once). The caller continues it (SIGCONT)."""
        p = self.process(role, ident)
        assert lc.is_ours(p), f"{role} {ident} is not running"
        if self.store is None:
            pause_outside_sqlite_writes(p.pid, self.dir / "metadata.db", f"{role} {ident}")
        else:
            os.kill(p.pid, signal.SIGSTOP)
        return p

    def status(self, topic: str) -> Any:
        return self.call(lambda c: c.tiering_status([topic]))[0]

    def segments(self, topic_id: Any) -> dict[Any, list[SegmentState]]:
        """Each remote segment of the topic id with its RLMM states in order, read from the shared store."""
        with SqliteMetadataStore(self.dir / "metadata.db", recover_on_open=False) as store:
            states: dict[Any, list[SegmentState]] = {}
            for e in store.read_remote_log_metadata(topic_id=topic_id):
                f = e.record.fields
                if "remote_log_segment_id" not in f:  # a RemotePartitionDeleteMetadataRecord (a deleted topic)
                    continue
                states.setdefault(f["remote_log_segment_id"]["id"], []).append(
                    SegmentState(f["remote_log_segment_state"])
                )
            return states

    def segment_records(self, topic_id: Any) -> dict[Any, list[tuple[SegmentState, int, int]]]:
        """Each remote segment of the topic id with its RLMM records in order, as (state, event time, broker id)."""
        with SqliteMetadataStore(self.dir / "metadata.db", recover_on_open=False) as store:
            return segment_records(store, topic_id)

    def wait_tiering_settled(self, topic_id: Any, minimum: int = 1) -> None:
        """Wait until the topic has at least ``minimum`` remote segments and nothing left to copy: no copy in flight
        (no segment at COPY_SEGMENT_STARTED) and, in every partition directory of the topic on the brokers' disks,
        every closed segment copied (the highest offset copied reaches the active segment's base). A quiet spell
        between copies is no proof (a partition backing off after a failed copy is quiet for seconds with segments
        still owed), so what a test does next meets no copy in flight and no copy still to come."""
        wait_until("tiering to settle", lambda: self.tiering_settled(topic_id, minimum), interval_s=0.5, timeout_s=90)

    def tiering_settled(self, topic_id: Any, minimum: int = 1) -> bool:
        with SqliteMetadataStore(self.dir / "metadata.db", recover_on_open=False) as store:
            entries = list(store.read_remote_log_metadata(topic_id=topic_id))
            topic = MetadataFollower(store).refresh().topics.get(topic_id)
        leaders = {p.partition_id: p.leader for p in topic.partitions.values()} if topic is not None else {}
        where: dict[Any, tuple[int, int]] = {}  # segment id -> (partition, end offset)
        started: set[Any] = set()
        finished: set[Any] = set()  # ever reached COPY_SEGMENT_FINISHED (then maybe deleted by retention)
        for e in entries:
            f = e.record.fields
            if "remote_log_segment_id" not in f:  # a RemotePartitionDeleteMetadataRecord (a deleted topic)
                continue
            sid, state = f["remote_log_segment_id"]["id"], SegmentState(f["remote_log_segment_state"])
            if "start_offset" in f:  # the segment's own record (an update record has end_offset -1)
                where[sid] = (f["remote_log_segment_id"]["topic_id_partition"]["partition"], f["end_offset"])
            if state == SegmentState.COPY_SEGMENT_STARTED:
                started.add(sid)
            elif state == SegmentState.COPY_SEGMENT_FINISHED:
                finished.add(sid)
            else:  # its deletion: a copy that failed and was cleaned up is no copy in flight
                started.discard(sid)
        if len(where) < minimum or started - finished:
            return False
        copied: dict[int, int] = {}
        for sid in finished:
            partition, end = where[sid]
            copied[partition] = max(copied.get(partition, -1), end)
        return all(
            copied.get(partition, -1) >= active_base - 1
            for partition, active_base in self._active_bases(topic_id, leaders)
        )

    def wait_rlmm_published(self) -> None:
        """Wait until ``__remote_log_metadata`` exists (the controller creates it ``placement_settle_ms`` after the
        brokers' set settles) and holds every RLMM record of the store (the brokers publish it from the store every
        ``publish_interval_ms``): what a reader of the topic (``--compat kafka``) sees next is
        the store's RLMM as it stands now."""

        def caught_up() -> bool:
            with SqliteMetadataStore(self.dir / "metadata.db", recover_on_open=False) as store:
                records = sum(1 for _ in store.read_remote_log_metadata())
            try:
                topic = self.call(lambda c: c.topic(TOPIC_NAME))
            except UnknownTopicOrPartition:  # the controller creates it once the brokers' set has settled
                return False
            partitions = [p["partition_index"] for p in topic["partitions"]]
            return (
                sum(high for _, high in confluent_watermarks(self.bootstrap, TOPIC_NAME, partitions).values())
                >= records
            )

        wait_until("__remote_log_metadata to hold every RLMM record of the store", caught_up, interval_s=0.2)

    def _active_bases(self, topic_id: Any, leaders: dict[int, int]) -> Iterator[tuple[int, int]]:
        """(partition, base offset of its active segment) of the directory of each partition of the topic id on its
        leader's disk (a follower's segments end where its own rolls put them; only the leader copies)."""
        for meta in (self.dir / "data").glob("broker-*/*/partition.metadata"):
            if f"topic_id: {topic_id}" not in meta.read_text().splitlines():
                continue
            partition = int(meta.parent.name.rsplit("-", 1)[1])
            if meta.parent.parent.name != f"broker-{leaders.get(partition)}":
                continue
            logs = sorted(meta.parent.glob("*.log"))
            if logs:
                yield partition, int(logs[-1].name.split(".")[0])

    def close(self) -> None:
        for p in LocalClusterState.load(self.dir).processes:  # a SIGSTOPped process cannot handle SIGTERM
            if lc.is_ours(p):
                os.kill(p.pid, signal.SIGCONT)
        lc.down(self.dir, purge=True, timeout_s=10)


@contextlib.contextmanager
def live_cluster(directory: Path, **options: Any) -> Iterator[LiveCluster]:
    """A :class:`LiveCluster` (``options`` as it takes them) for the body of the ``with``, stopped and purged at
    its end; then none of the processes it recorded may still run. A fixture yields from inside the ``with``."""
    cluster = LiveCluster(directory, **options)
    try:
        yield cluster
    finally:
        processes = LocalClusterState.load(cluster.dir).processes
        cluster.close()
    for p in processes:
        assert not lc.is_ours(p), f"{p.role} {p.id} (pid {p.pid}) still runs after the cluster was stopped"


def bucket_keys(s3_client: Any, bucket: str, prefix: str = "") -> list[str]:
    """Every key under ``prefix`` in ``bucket``, all pages."""
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for p in pages for o in p.get("Contents", [])]
