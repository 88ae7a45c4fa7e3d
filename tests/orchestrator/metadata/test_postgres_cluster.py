"""A cluster on the PostgreSQL store whose processes share nothing but the database server and the bucket.

Two controllers and three brokers run as separate OS processes, each in its own working directory with its own
data directory, settings file and (controllers) password file; no path in one process's settings names another's
directory, and the test checks that no process holds a file open outside its own directory. The store's files
are the PostgreSQL server's (``tests.support.postgres_server``); S3 is moto's server on loopback.

Faults are real signals: mid-disable (a broker paused so the topic stays DISABLING) the active controller and
that broker are SIGKILLed, and the broker is started again. No duration is asserted: the standby takes the lease
at the next controller epoch, only once the dead controller's lease has run out; how soon after the kill is
measured by ``make bench`` (``failover-postgres``, against the lease TTL: the goal is TTL + 1 s). Every process is
stopped by pid at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.metadata.open import PASSWORD_ENV
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.store import Lease
from tests.support.live_cluster import (
    COPIED_THEN_DELETED,
    FAST_BROKER,
    FAST_CONTROLLER,
    bucket_keys,
    retries_folded,
    segment_records,
    wait_until,
)
from tests.support.postgres_server import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TTL_MS = FAST_CONTROLLER["controller"]["lease_ttl_ms"]
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0"}
CONTROLLERS = (3000, 3001)
BROKERS = (1, 2, 3)


@dataclass
class Node:
    role: str
    ident: int
    home: Path  # its working directory: settings, data, password file, log, ready file
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def config(self) -> Path:
        return self.home / "settings.toml"

    @property
    def ready(self) -> Path:
        return self.home / "ready.json"

    def start(self, tables: dict[str, dict[str, Any]]) -> None:
        tables[self.role]["port"] = self.port
        tables[self.role]["ready_file"] = "ready.json"  # relative: resolved against its own directory
        lines = []
        for table, values in tables.items():
            lines.append(f"[{table}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.ready.unlink(missing_ok=True)
        command = lc.controller_command(self.config) if self.role == "controller" else lc.broker_command(self.config)
        with (self.home / "process.log").open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=self.home,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_until(f"{self.role} {self.ident} to serve", lambda: self.ready.exists() or self.proc.poll() is not None)
        assert self.proc.poll() is None, (self.home / "process.log").read_text()[-3000:]
        self.port = json.loads(self.ready.read_text())["port"]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)  # by pid: our own child
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def database(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    """(a URL without the password, a DSN with it) of a database for this test alone."""
    name = postgres_server.create_database()
    try:
        yield f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}", postgres_server.dsn(name)
    finally:
        postgres_server.drop_database(name)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    started: list[Node] = []
    try:
        yield started
    finally:
        for node in reversed(started):
            node.stop()
    for node in started:
        assert node.proc is None or node.proc.poll() is not None


def _call(bootstrap: str, fn: Any) -> Any:
    async def go() -> Any:
        async with TieredClient(bootstrap, timeout_s=10) as c:
            return await fn(c)

    return asyncio.run(go())


def _status(bootstrap: str, topic: str) -> Any:
    return _call(bootstrap, lambda c: c.tiering_status([topic]))[0]


def _files_held(pid: int, under: Path) -> set[Path]:
    """Regular files under ``under`` that process ``pid`` holds open, and its working directory."""
    held = {Path(os.readlink(f"/proc/{pid}/cwd"))}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = Path(os.readlink(fd))
            if target.is_relative_to(under):
                held.add(target)
    return held


def test_a_share_nothing_cluster_on_postgresql_survives_killing_the_active_controller_and_a_broker_mid_disable(
    tmp_path: Path,
    nodes: list[Node],
    database: tuple[str, str],
    postgres_server: PostgresServer,
    moto_endpoint: str,
    s3_client: Any,
    bucket: str,
) -> None:
    url, dsn = database
    base_env = {k: v for k, v in os.environ.items() if k not in (PASSWORD_ENV, "PGPASSWORD")}
    controllers: list[Node] = []
    for node_id in CONTROLLERS:  # password from a file in its own directory
        home = tmp_path / f"controller-{node_id}"
        home.mkdir(mode=0o700)
        (home / "store-password").write_text(postgres_server.password + "\n")
        node = Node("controller", node_id, home, base_env)
        tables = {
            "controller": {"node_id": node_id, "metadata_store": url, **FAST_CONTROLLER["controller"]},
            "store": {"password_file": "store-password"},
            **{k: dict(v) for k, v in FAST_CONTROLLER.items() if k != "controller"},
        }
        node.start(tables)
        nodes.append(node)
        controllers.append(node)
    bootstrap = ",".join(f"127.0.0.1:{c.port}" for c in controllers)
    brokers: dict[int, Node] = {}
    broker_tables: dict[int, dict[str, dict[str, Any]]] = {}
    for broker_id in BROKERS:  # password from the environment
        home = tmp_path / f"broker-{broker_id}"
        home.mkdir(mode=0o700)
        node = Node("broker", broker_id, home, {**base_env, PASSWORD_ENV: postgres_server.password})
        broker_tables[broker_id] = {
            "broker": {
                "broker_id": broker_id,
                "data_dir": "data",
                "metadata_store": url,
                "controllers": bootstrap,
                **FAST_BROKER["broker"],
            },
            "s3": {"endpoint_url": moto_endpoint, "bucket": bucket, "prefix": "tiered/"},
        }
        node.start(json.loads(json.dumps(broker_tables[broker_id])))
        nodes.append(node)
        brokers[broker_id] = node

    def registered() -> bool:
        md = _call(bootstrap, lambda c: c.metadata())
        return {b["node_id"] for b in md["brokers"]} >= set(BROKERS)

    wait_until("every broker to register", registered)
    # Share nothing: each process works in, and holds files in, its own directory only; no SQLite file anywhere.
    for node in nodes:
        assert node.proc is not None
        held = _files_held(node.proc.pid, tmp_path)
        assert all(p.is_relative_to(node.home) for p in held), (node.role, node.ident, held)
        assert str(tmp_path) not in node.config.read_text().replace(str(node.home), "")
    assert not [p for p in tmp_path.rglob("*.db*")]

    _call(bootstrap, lambda c: c.create_topic("payments", partitions=3, replication_factor=1, configs=TIERED))

    async def produce(c: TieredClient) -> None:
        for p in range(3):
            await c.produce("payments", [b"v" * 200 for _ in range(100)], partition=p)

    _call(bootstrap, produce)
    tid = _status(bootstrap, "payments").topic_id
    prefix = f"tiered/payments-{tid}/"
    reader = PostgresMetadataStore(dsn, recover_on_open=False)
    try:

        def copied_segments() -> dict[Any, list[SegmentState]]:
            segs: dict[Any, list[SegmentState]] = {}
            for e in reader.read_remote_log_metadata(topic_id=tid):
                f = e.record.fields
                if "remote_log_segment_id" in f:
                    segs.setdefault(f["remote_log_segment_id"]["id"], []).append(
                        SegmentState(f["remote_log_segment_state"])
                    )
            return segs

        wait_until(
            "segments of every partition copied to S3",
            lambda: (
                len(copied_segments()) >= 3
                and all(s[-1] == SegmentState.COPY_SEGMENT_FINISHED for s in copied_segments().values())
                and bucket_keys(s3_client, bucket, prefix)
            ),
            timeout_s=60,
        )
        paused_id = _call(bootstrap, lambda c: c.topic("payments"))["partitions"][0]["leader_id"]
        paused = brokers[paused_id]
        assert paused.proc is not None
        os.kill(paused.proc.pid, signal.SIGSTOP)  # keeps the topic DISABLING: the kills land mid-disable
        _call(bootstrap, lambda c: c.disable_tiering("payments", "delete"))
        wait_until("DISABLING with the paused broker pending", lambda: _status(bootstrap, "payments").pending_brokers)
        lease = reader.current_lease()
        assert lease is not None
        active = next(c for c in controllers if lease.holder.startswith(f"{c.ident}@"))
        standby = next(c for c in controllers if c is not active)

        active.kill()

        def standby_holds_lease() -> Lease | None:
            now = reader.current_lease()
            return now if now is not None and now.holder.startswith(f"{standby.ident}@") else None

        # How soon is `make bench`'s to measure (failover-postgres, against the lease TTL); here, that it happens, and
        # that the standby's lease is the next controller epoch, taken only once the dead controller's had run out.
        taken = wait_until("the standby to take the lease", standby_holds_lease, timeout_s=60, interval_s=0.02)
        assert taken.controller_epoch == lease.controller_epoch + 1
        assert taken.expires_at_ms - TTL_MS >= lease.expires_at_ms  # acquired at or after the old lease's end

        paused.kill()  # SIGKILL a broker too (it was paused inside the disablement), then start it again
        paused.start(json.loads(json.dumps(broker_tables[paused_id])))

        final = wait_until(
            "DISABLED after both kills",
            lambda: (s := _status(bootstrap, "payments")).state == TieredState.DISABLED and s,
            timeout_s=90,
        )
        assert final.policy == DisablePolicy.DELETE
        assert final.tiered_epoch == 2
        assert bucket_keys(s3_client, bucket, prefix) == []
        # Nothing applied twice: the tiered epoch moved once per change (ENABLED@1, DISABLING@2, DISABLED@2) and
        # every remote segment was deleted exactly once.
        changes = [
            (TieredState(e.record.fields["tiered_state"]), e.record.fields["tiered_epoch"])
            for e in reader.read()
            if e.record.name == "TieredStateRecord" and e.record.fields["topic_id"] == tid
        ]
        assert changes == [(TieredState.ENABLED, 1), (TieredState.DISABLING, 2), (TieredState.DISABLED, 2)]
        for records in segment_records(reader, tid).values():  # copied, then deleted, once (retries aside)
            assert retries_folded(records) == COPIED_THEN_DELETED, records
    finally:
        reader.close()


# A process set up as every store process is (its connection carries the server-side timeouts), which takes the
# store's write lock (the lease row, as every write does first), says so, and then would write: SIGSTOPped there, it
# is a broker paused inside a write.
_PAUSED_WRITER = """
import sys
from orchestrator.metadata.postgres.connection import SessionTimeouts, connect
timeouts = SessionTimeouts(statement_timeout_ms=5000, lock_timeout_ms=500, idle_in_transaction_timeout_ms=1500)
conn = connect(sys.argv[1], schema="tieredctl", timeouts=timeouts, application_name="paused-writer")
conn.execute("BEGIN")
conn.execute("SELECT holder FROM lease WHERE id = 1 FOR UPDATE")
print("locked", flush=True)
sys.stdin.readline()  # the write it would do next, once resumed and told to
conn.execute("INSERT INTO meta (key, value) VALUES ('paused-writer', 'wrote')")
conn.execute("COMMIT")
"""

STALL_STORE = {"lock_timeout_ms": 500, "idle_in_transaction_timeout_ms": 1500, "statement_timeout_ms": 5000}


def test_a_writer_paused_inside_a_write_holds_the_others_up_only_until_the_server_ends_its_session(
    tmp_path: Path,
    nodes: list[Node],
    database: tuple[str, str],
    postgres_server: PostgresServer,
    moto_endpoint: str,
    bucket: str,
) -> None:
    """On SQLite a process paused inside a write transaction holds the file's write lock until it resumes: every
    other writer waits out its busy timeout and fails, for as long as the pause lasts. On PostgreSQL the paused
    process's own session carries ``idle_in_transaction_timeout_ms``, so the server ends it and frees the lock; the
    controller (whose waits are bounded by ``lock_timeout_ms``) keeps its lease and its writes go through while the
    paused process is still stopped, and the paused process's write never happens."""
    url, dsn = database
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"} | {PASSWORD_ENV: postgres_server.password}
    controller = Node("controller", 3000, tmp_path / "controller", env)
    controller.home.mkdir()
    ttl = {"lease_ttl_ms": 4000}  # longer than one stall (lock wait + idle timeout): the lease is kept through it
    tables = {
        "controller": {"node_id": 3000, "metadata_store": url, **FAST_CONTROLLER["controller"], **ttl},
        "store": dict(STALL_STORE),
        **{k: dict(v) for k, v in FAST_CONTROLLER.items() if k != "controller"},
    }
    controller.start(tables)
    nodes.append(controller)
    bootstrap = f"127.0.0.1:{controller.port}"
    broker = Node("broker", 1, tmp_path / "broker", env)
    broker.home.mkdir()
    broker.start(
        {
            "broker": {"broker_id": 1, "data_dir": "data", "metadata_store": url, "controllers": bootstrap}
            | FAST_BROKER["broker"],
            "store": dict(STALL_STORE),
            "s3": {"endpoint_url": moto_endpoint, "bucket": bucket, "prefix": "tiered/"},
        }
    )
    nodes.append(broker)
    wait_until(
        "the broker to register and be unfenced",
        lambda: 1 in {b["node_id"] for b in _call(bootstrap, lambda c: c.metadata())["brokers"]},
    )
    epoch_before = _lease_epoch(dsn)

    writer = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_WRITER, dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        os.kill(writer.pid, signal.SIGSTOP)  # paused while it holds the write lock
        stopped_at = time.monotonic()

        def created() -> bool:
            try:
                _call(bootstrap, lambda c: c.create_topic("after-the-pause", partitions=1, replication_factor=1))
            except Exception as exc:  # KAFKA_STORAGE_ERROR (lock timeout) while the paused session holds the lock
                print(f"{time.monotonic() - stopped_at:.2f} s after the pause, a create failed: {exc}")
                return False
            return True

        wait_until("a controller write to go through", created, timeout_s=30, interval_s=0.2)
        stalled_s = time.monotonic() - stopped_at
        assert os.waitpid(writer.pid, os.WNOHANG) == (0, 0), "the paused writer is still stopped, not gone"
        print(f"a writer paused inside a write stalled the controller's writes {stalled_s:.2f} s")
        assert _lease_epoch(dsn) == epoch_before, "the controller kept its lease through the stall"
        os.kill(writer.pid, signal.SIGCONT)
        _, err = writer.communicate("write\n", timeout=30)
        assert writer.returncode != 0 and "terminat" in err, err[-2000:]  # its session was ended: nothing written
    finally:
        if writer.poll() is None:
            os.kill(writer.pid, signal.SIGKILL)
            writer.wait(timeout=10)
    with PostgresMetadataStore(dsn, recover_on_open=False) as store:
        names = [e.record.fields["name"] for e in store.read() if e.record.name == "TopicRecord"]
    # the controller creates __remote_log_metadata on its own once it is due: not the paused writer's doing
    assert [n for n in names if n != "__remote_log_metadata"] == ["after-the-pause"]
    with psycopg.connect(dsn) as raw:
        assert raw.execute("SELECT count(*) FROM tieredctl.meta WHERE key = 'paused-writer'").fetchone() == (0,)


def _listening(dsn: str, application_name: str) -> bool:
    """Whether a session of that name has sent LISTEN (pg_stat_activity keeps each session's last statement)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%'",
            (application_name,),
        ).fetchone()
    return row is not None and row[0] > 0


def _lease_epoch(dsn: str) -> int:
    with PostgresMetadataStore(dsn, recover_on_open=False) as store:
        lease = store.current_lease()
        assert lease is not None
        return lease.controller_epoch


def test_on_postgresql_a_broker_follows_the_log_by_notification_not_by_polling(
    tmp_path: Path,
    nodes: list[Node],
    database: tuple[str, str],
    postgres_server: PostgresServer,
    moto_endpoint: str,
    bucket: str,
) -> None:
    """The broker's metadata loop polls only once a minute here, so the directory of a partition it hosts can
    appear within seconds of the topic's creation only because the append's NOTIFY woke it."""
    url, dsn = database
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"} | {PASSWORD_ENV: postgres_server.password}
    controller = Node("controller", 3000, tmp_path / "controller", env)
    controller.home.mkdir()
    controller.start(
        {
            "controller": {"node_id": 3000, "metadata_store": url, **FAST_CONTROLLER["controller"]},
            **{k: dict(v) for k, v in FAST_CONTROLLER.items() if k != "controller"},
        }
    )
    nodes.append(controller)
    bootstrap = f"127.0.0.1:{controller.port}"
    broker = Node("broker", 1, tmp_path / "broker", env)
    broker.home.mkdir()
    minute = {"metadata_poll_ms": 60_000, "metadata_notified_poll_ms": 60_000}
    broker.start(
        {
            "broker": {"broker_id": 1, "data_dir": "data", "metadata_store": url, "controllers": bootstrap}
            | FAST_BROKER["broker"]
            | minute,
            "s3": {"endpoint_url": moto_endpoint, "bucket": bucket, "prefix": "tiered/"},
        }
    )
    nodes.append(broker)
    wait_until(
        "the broker to register and be unfenced",
        lambda: 1 in {b["node_id"] for b in _call(bootstrap, lambda c: c.metadata())["brokers"]},
    )
    # The broker's loop LISTENs once it is up (tieredctl-broker-1's session), reads the log once more at once, and
    # from then on waits a minute between reads unless a NOTIFY wakes it: wait for the LISTEN, not for a while.
    wait_until("the broker to listen for the store's changes", lambda: _listening(dsn, "tieredctl-broker-1"))
    _call(bootstrap, lambda c: c.create_topic("notified", partitions=2, replication_factor=1))
    wait_until(
        "the broker to open the new partitions' logs",
        lambda: all((broker.home / "data" / f"notified-{p}").is_dir() for p in range(2)),
        timeout_s=20,
    )
