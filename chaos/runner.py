"""One chaos run: a real local cluster driven through a seed's scenario under its faults, healed, observed, checked.

What runs (all real processes and sockets on 127.0.0.1): the embedded S3 (moto's server) behind an
:class:`~chaos.s3_proxy.S3FaultProxy`, the controllers and brokers of :mod:`orchestrator.local.cluster` with every
link between a broker and a controller through a :class:`~chaos.link_proxy.LinkProxy`, and a
:class:`~orchestrator.client.TieredClient` per operation. Sentinel objects are put in the bucket outside every
topic's prefix before the workload starts.

A run, in order:

1. the operations of :func:`chaos.scenario.generate`, each preceded by its faults; after each, the processes are
   looked at: one dead at a crash point (its record line says so) or past its restart time is restarted unarmed,
   one dead for no reason the run knows is an *unexpected exit* (a violation);
2. healing: every fault lifted (S3 rules cleared, links passed, paused processes continued, dead ones restarted,
   armed ones restarted unarmed), then wait until no topic is DISABLING and no deletion is owed;
3. the observation: the metadata log (tailed all along, so a snapshot cannot hide records), the RLMM, the bucket,
   the proxy's record of every mutation, each topic's state, offsets and records, the controllers' logs;
4. :func:`chaos.checker.check`.

Invariants: every process the run started is stopped by pid when it ends, whatever happened; the run's directory
is removed unless it found a violation or was asked to keep it; nothing of the run binds anything but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from chaos import checker as ck
from chaos.history import History
from chaos.link_proxy import LinkProxy
from chaos.links import Links, insert_link_proxies
from chaos.s3_proxy import S3Fault, S3FaultProxy
from chaos.scenario import TOPIC_NAMES, Fault, Op, Scenario, generate
from orchestrator import crash_points
from orchestrator.client import TieredClient
from orchestrator.clock import wall_ms
from orchestrator.errors import KafkaError, TieredError
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState, ProcessInfo, is_ours
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.s3 import make_s3_client

T = TypeVar("T")

# The fast timings of a test cluster; tests/support/live_cluster.py uses them too.
FAST_BROKER = {
    "broker": {
        "heartbeat_interval_ms": 200,
        "metadata_poll_ms": 50,
        "tiering_interval_ms": 200,
        "segment_bytes": 4096,
        "segment_ms": 600_000,
        "request_timeout_ms": 3000,
    }
}
FAST_CONTROLLER = {
    "controller": {"lease_ttl_ms": 1500},
    "membership": {"session_timeout_ms": 2500},
    "disablement": {"request_timeout_ms": 2000, "repoll_ms": 100},
}
CONTROLLER_SETTINGS = {
    **FAST_CONTROLLER,
    # Snapshots often enough that a run writes some (and can crash in one). A snapshot lets the records before
    # the oldest one kept go: the run tails the log every TAIL_INTERVAL_S so it has read them first.
    "snapshots": {"every_records": 40, "retained": 2},
}
OP_TIMEOUT_S = 20.0
TAIL_INTERVAL_S = 0.01
_STATE_RECORDS = frozenset({"TopicRecord", "RemoveTopicRecord", "TieredStateRecord", "UnregisterBrokerRecord"})
CLIENT_TIMEOUT_S = 5.0
SENTINELS = (
    "outside/keep.bin",
    "{prefix}chaos-0-sentinel/keep.bin",
    "{prefix}chaos-10-AAAAAAAAAAAAAAAAAAAAAA/0/keep.bin",
)
BUCKET = "chaos"
UNKNOWN_OUTCOME = 2**62  # the time of a request whose outcome the run never learned: "at any time from now on"
PREFIX = "tiered/"


@dataclass
class RunResult:
    seed: int
    scenario: Scenario
    violations: list[ck.Violation]
    faults: Counter[str]  # injected, by kind (S3 faults by what the proxy served)
    crash_points_hit: list[str]
    operations: int
    operations_failed: int
    seconds: float
    directory: Path | None  # kept when there are violations (or when asked)
    incomplete: list[ck.Violation]  # what the run could not observe (a log gap): not checked, not a violation
    history: list[dict[str, Any]] = field(default_factory=list)


def _value(seed: int, op: int, i: int, size: int) -> bytes:
    return f"{seed}:{op}:{i}:".encode().ljust(size, b"v")


def _iso_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class Run:
    def __init__(
        self,
        scenario: Scenario,
        *,
        heal_timeout_s: float = 90.0,
    ) -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self.dir = Path(tempfile.mkdtemp(prefix=f"chaos-{scenario.seed}-"))
        self.heal_timeout_s = heal_timeout_s
        self.history = History(self.dir / "history.jsonl")
        self.cluster_dir = self.dir / "cluster"
        self.crash_record = self.dir / "crash-points.jsonl"
        self.s3: ProcessInfo | None = None
        self.proxy: S3FaultProxy | None = None
        self.links: Links | None = None
        self.bootstrap = ""
        self.faults: Counter[str] = Counter()
        self.acks: list[ck.Ack] = []
        self.delete_requests: dict[str, list[int]] = defaultdict(list)
        self.log_records: list[ck.LogRecord] = []
        self.log_gaps: list[tuple[int, int]] = []
        self._next_offset = 0
        self.unexpected: list[ck.Violation] = []
        self._down: dict[tuple[str, int], int] = {}  # (role, id) -> op index from which it is restarted
        self._paused: set[tuple[str, int]] = set()
        self._armed: set[tuple[str, int]] = set()
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._s3_rules: dict[int, S3Fault] = {}
        self._crash_lines_seen = 0
        self._crashed_pids: set[int] = set()
        self._slots = 0
        self.crash_points_hit: list[str] = []
        self._op_index = 0
        self.ops_failed = 0
        self._stop_tailing = threading.Event()
        self._tailer = threading.Thread(target=self._tail_loop, name="chaos-log-tail", daemon=True)

    # -- set-up and tear-down ---------------------------------------------------------------------------------

    def start(self) -> None:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "chaos")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "chaos")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        self.s3 = lc.start_embedded_s3(self.dir / "s3.log")
        target = f"http://127.0.0.1:{self.s3.port}"
        self.proxy = S3FaultProxy(target, seed=self.seed)
        self._direct_s3 = make_s3_client(endpoint_url=target)
        state = lc.up(
            self.cluster_dir,
            brokers=self.scenario.brokers,
            controllers=self.scenario.controllers,
            s3_endpoint=self.proxy.url,
            bucket=BUCKET,
            prefix=PREFIX,
            broker_overrides=FAST_BROKER,
            controller_overrides=CONTROLLER_SETTINGS,
        )
        self.bootstrap = state.bootstrap_server
        self._tailer.start()
        self.sentinels = frozenset(s.format(prefix=PREFIX) for s in SENTINELS)
        for key in self.sentinels:
            self._direct_s3.put_object(Bucket=BUCKET, Key=key, Body=b"not a topic's: never touched")
        self.links = insert_link_proxies(self.cluster_dir)
        self.history.record("start", seed=self.seed, schedule=self.scenario.schedule())

    def close(self) -> None:
        self._stop_tailing.set()
        if self._tailer.is_alive():
            self._tailer.join(timeout=10)
        for t in self._timers:
            t.cancel()
        with contextlib.suppress(Exception):
            if LocalClusterState.load_if_present(self.cluster_dir) is not None:
                for p in LocalClusterState.load(self.cluster_dir).processes:
                    if is_ours(p):
                        os.kill(p.pid, signal.SIGCONT)
                lc.down(self.cluster_dir, purge=False, timeout_s=10)
        if self.links is not None:
            self.links.close()
        if self.proxy is not None:
            self.proxy.close()
        if self.s3 is not None:
            lc.stop_process(self.s3, timeout_s=5)
        self.history.close()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the workload -------------------------------------------------------------------------------------------

    def _call(self, fn: Callable[[TieredClient], Coroutine[Any, Any, T]], timeout_s: float = OP_TIMEOUT_S) -> T:
        async def go() -> T:
            async with TieredClient(self.bootstrap, timeout_s=CLIENT_TIMEOUT_S) as c:
                return await asyncio.wait_for(fn(c), timeout_s)

        return asyncio.run(go())

    def execute(self) -> None:
        faults_at: dict[int, list[Fault]] = defaultdict(list)
        for f in self.scenario.faults:
            faults_at[f.at].append(f)
        for op in self.scenario.ops:
            self._op_index = op.index
            for f in faults_at[op.index]:
                self._inject(f)
            self._revive()
            self._run_op(op)
            self._revive()

    def _run_op(self, op: Op) -> None:
        self.history.record("op", index=op.index, op=op.kind, topic=op.topic, args=op.args)
        started = time.monotonic()
        try:
            detail = self._perform(op)
        except (TieredError, OSError, TimeoutError) as exc:
            self.ops_failed += 1
            error = f"{type(exc).__name__}: {exc}"
            self.history.record("result", index=op.index, op=op.kind, topic=op.topic, ok=False, error=error)
        else:
            took = round(time.monotonic() - started, 2)
            self.history.record("result", index=op.index, op=op.kind, topic=op.topic, ok=True, s=took, **detail)

    def _perform(self, op: Op) -> dict[str, Any]:
        a = op.args
        if op.kind == "settle":
            time.sleep(a["seconds"])
            return {}
        if op.kind == "decommission":
            return self._decommission(a["broker"], a["dead_for"])
        if op.kind in ("create", "recreate"):
            if op.kind == "recreate":
                with contextlib.suppress(TieredError):
                    self._call(lambda c: c.delete_topic(op.topic))
            configs = {"remote.storage.enable": "true" if a["tiered"] else "false", "retention.ms": "-1"}
            configs["local.retention.ms"] = "0"
            created = self._call(lambda c: c.create_topic(op.topic, partitions=a["partitions"], configs=configs))
            return {"topic_id": str(created)}
        tid = str(self._call(lambda c: c.topic(op.topic))["topic_id"])
        if op.kind == "produce":
            values = [_value(self.seed, op.index, i, a["size"]) for i in range(a["records"])]
            first, _last = self._call(lambda c: c.produce(op.topic, values, partition=a["partition"]))
            self.acks.append(ck.Ack(tid, a["partition"], first, tuple(values), wall_ms()))
            return {"topic_id": tid, "partition": a["partition"], "first_offset": first, "records": len(values)}
        if op.kind == "disable":
            # A delete policy may take records acknowledged before its answer. One whose answer never came may
            # still be applied at any later time, so it stands for every record of the topic id from then on.
            delete = a["policy"] == "delete"
            try:
                self._call(lambda c: c.disable_tiering(op.topic, a["policy"]))
            except Exception as exc:
                refused = isinstance(exc, KafkaError) and not exc.retriable  # a definite no: nothing was applied
                if delete and not refused:
                    self.delete_requests[tid].append(UNKNOWN_OUTCOME)
                raise
            if delete:
                self.delete_requests[tid].append(wall_ms())
        elif op.kind == "enable":
            self._call(lambda c: c.enable_tiering(op.topic))
        elif op.kind == "delete":
            self._call(lambda c: c.delete_topic(op.topic))
        elif op.kind == "add_partitions":
            self._call(lambda c: c.add_partitions(op.topic, a["total"]))
        else:  # pragma: no cover - the generator makes no other kind
            raise AssertionError(op.kind)
        return {"topic_id": tid}

    def _decommission(self, broker: int, dead_for: int) -> dict[str, Any]:
        p = self._process("broker", broker)
        if is_ours(p):
            lc.kill_process(p)
            self.history.record("fault", kind="kill", role="broker", id=broker, why="decommission")
        self._down[("broker", broker)] = self._op_index + dead_for
        self._call(lambda c: c.decommission_broker(broker))
        return {"broker": broker}

    # -- faults ---------------------------------------------------------------------------------------------------

    def _process(self, role: str, ident: int) -> ProcessInfo:
        return LocalClusterState.load(self.cluster_dir).find(role, ident)

    def _controller_id(self, target: int) -> int:
        if target >= 0:
            return lc.CONTROLLER_ID_BASE + target
        active = [p["id"] for p in lc.status(self.cluster_dir)["processes"] if p.get("active")]
        return int(active[0]) if active else lc.CONTROLLER_ID_BASE

    def _later(self, seconds: float, fn: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, fn)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _inject(self, f: Fault) -> None:
        self.faults[f.kind] += 1
        self.history.record("fault", kind=f.kind, role=f.role, target=f.target, **f.args)
        if f.kind in ("kill", "pause"):
            ident = self._controller_id(f.target) if f.role == "controller" else f.target
            key = (f.role, ident)
            p = self._process(*key)
            if not is_ours(p) or key in self._paused:
                return
            if f.kind == "kill":
                lc.kill_process(p)
                self._down[key] = self._op_index + f.args["restart_after"]
            else:
                os.kill(p.pid, signal.SIGSTOP)
                with self._lock:
                    self._paused.add(key)
                self._later(f.args["duration_s"], lambda: self._resume(key, p.pid))
        elif f.kind == "crash_point":
            point = f"{f.args['point']}@{f.args['hit']}"
            # Every process of the role is armed: which one reaches the moment first is up to the cluster.
            targets = (
                [("controller", lc.CONTROLLER_ID_BASE + i) for i in range(self.scenario.controllers)]
                if f.role == "controller"
                else [("broker", b) for b in range(1, self.scenario.brokers + 1)]
            )
            for key in targets:
                if key in self._paused or key in self._down:
                    continue
                self._restart(key, armed=point)
        elif f.kind == "s3":
            assert self.proxy is not None
            rule = S3Fault(
                f.args["fault"],
                operation=f.args["operation"],
                probability=f.args["probability"],
                delay_s=f.args.get("delay_s", 0.0),
            )
            with self._lock:
                self._slots += 1
                slot = self._slots
                self._s3_rules[slot] = rule
                self.proxy.set_faults(list(self._s3_rules.values()))
            self._later(f.args["duration_s"], lambda: self._lift_s3(slot))
        elif f.kind == "link":
            link = self._link(f.args)
            link.set_mode(f.args["mode"], delay_s=f.args.get("delay_s", 0.0))
            self._later(f.args["duration_s"], lambda: link.set_mode("pass"))

    def _link(self, args: dict[str, Any]) -> LinkProxy:
        assert self.links is not None
        if args["link"] == "to_broker":
            return self.links.to_broker[args["broker"]]
        return self.links.to_controller[(args["broker"], lc.CONTROLLER_ID_BASE + args["controller"])]

    def _lift_s3(self, slot: int) -> None:
        assert self.proxy is not None
        with self._lock:
            self._s3_rules.pop(slot, None)
            self.proxy.set_faults(list(self._s3_rules.values()))

    def _resume(self, key: tuple[str, int], pid: int) -> None:
        with self._lock:
            if key not in self._paused:
                return
            self._paused.discard(key)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self.history.record("fault_lifted", kind="pause", role=key[0], id=key[1])

    def _restart(self, key: tuple[str, int], *, armed: str | None = None) -> None:
        """Start (or kill and start again) one process, armed with a crash point or not."""
        p = self._process(*key)
        if is_ours(p):
            lc.kill_process(p)
        env = {}
        if armed:
            env = {crash_points.ENV_VAR: armed, crash_points.RECORD_ENV_VAR: str(self.crash_record)}
            self._armed.add(key)
        else:
            self._armed.discard(key)
        try:
            p = lc.restart(self.cluster_dir, key[0], key[1], env=env)
            self.history.record("restart", role=key[0], id=key[1], armed=armed)
            link = self.links.to_broker.get(key[1]) if self.links is not None and key[0] == "broker" else None
            if link is not None and link.target[1] != p.port:  # its old port was taken: it came back on another
                link.target = ("127.0.0.1", p.port)
                self.history.record("moved", role=key[0], id=key[1], port=p.port)
        except TieredError as exc:  # died before it was ready (a crash point reached early): the next look restarts
            self.history.record("restart_failed", role=key[0], id=key[1], armed=armed, error=str(exc)[:500])

    def _crashes(self) -> list[dict[str, Any]]:
        if not self.crash_record.exists():
            return []
        lines = self.crash_record.read_text().splitlines()
        new = [json.loads(line) for line in lines[self._crash_lines_seen :] if line.strip()]
        self._crash_lines_seen = len(lines)
        return new

    def _read_crashes(self) -> None:
        for c in self._crashes():
            self._crashed_pids.add(c["pid"])
            self.crash_points_hit.append(c["point"])
            self.history.record("crash_point_hit", point=c["point"], pid=c["pid"], hit=c.get("hit"))

    def _revive(self, *, healing: bool = False) -> None:
        """Restart what died at a crash point or is due back; report what died for no reason the run knows."""
        state = LocalClusterState.load(self.cluster_dir)
        for p in state.processes:
            key = (p.role, p.id)
            if p.role == "s3" or is_ours(p) or key in self._paused:
                continue
            due = self._down.get(key)
            if due is not None and due > self._op_index and not healing:
                continue
            self._read_crashes()  # read after the process was seen dead: its record line, written first, is there
            if due is None and p.pid not in self._crashed_pids:
                tail = "\n".join(Path(p.log).read_text(errors="replace").splitlines()[-12:]) if p.log else ""
                why = f"{p.role} {p.id} (pid {p.pid}) exited, killed by no fault of the run"
                self.unexpected.append(ck.Violation("process", why, None, (tail,)))
                self.history.record("unexpected_exit", role=p.role, id=p.id, pid=p.pid, log_tail=tail)
            self._down.pop(key, None)
            self._restart(key)

    # -- healing and observing -----------------------------------------------------------------------------------

    def heal(self) -> list[str]:
        """Lift every fault, restart everything unarmed, and wait for the cluster to finish its work; returns what
        was still unfinished when the wait gave up (empty: converged)."""
        for t in self._timers:
            t.cancel()
        assert self.proxy is not None and self.links is not None
        with self._lock:
            self._s3_rules.clear()
            self.proxy.clear()
            paused, self._paused = set(self._paused), set()
        for link in self.links.all():
            link.set_mode("pass")
        for key in paused:
            p = self._process(*key)
            if is_ours(p):
                os.kill(p.pid, signal.SIGCONT)
        self.history.record("heal")
        # Armed processes stay armed through the first wait: the work finishing is often the moment a crash point
        # names (a crash then is one more fault healed). Then they are restarted unarmed, and the wait repeats.
        unfinished = self._converge(self.heal_timeout_s)
        still_armed = sorted(self._armed)
        for key in still_armed:
            self._restart(key)
        if still_armed:
            unfinished = self._converge(self.heal_timeout_s)
        self.history.record("healed", unfinished=unfinished)
        return unfinished

    def _converge(self, timeout_s: float) -> list[str]:
        """Wait until nothing is left unfinished (restarting what dies meanwhile); what was left when it gave up."""
        deadline = time.monotonic() + timeout_s
        unfinished: list[str] = ["not looked at yet"]
        while time.monotonic() < deadline:
            self._revive(healing=True)
            try:
                unfinished = self._call(self._unfinished)
            except (TieredError, OSError, TimeoutError) as exc:
                unfinished = [f"the cluster did not answer: {type(exc).__name__}: {exc}"]
            if not unfinished:
                break
            time.sleep(0.5)
        return unfinished

    async def _unfinished(self, c: TieredClient) -> list[str]:
        out = []
        for s in await c.tiering_status(None):
            if s.state == TieredState.DISABLING:
                pending = [p.broker_id for p in s.pending_brokers]
                out.append(f"{s.topic} ({s.topic_id}) still DISABLING at epoch {s.tiered_epoch}, pending {pending}")
        for d in await c.remote_deletions(None):
            out.append(f"deleted topic {d.topic} ({d.topic_id}): partitions {list(d.partitions_remaining)} owed")
        md = await c.metadata(None)
        for t in md["topics"]:
            for p in t["partitions"]:
                if p["leader_id"] < 0:
                    out.append(f"{t['name']}-{p['partition_index']} has no leader")
        return out

    def _tail_loop(self) -> None:
        """Read the metadata log as it grows, on one connection of its own, so a snapshot (which lets the records
        before the oldest snapshot kept go) does not take records before the run saw them. Once told to stop it
        reads to the end one last time (retrying a busy store) and returns."""
        failures = 0
        store: SqliteMetadataStore | None = None
        try:
            while True:
                stopping = self._stop_tailing.wait(TAIL_INTERVAL_S)
                try:
                    if store is None:
                        store = SqliteMetadataStore(self.cluster_dir / "metadata.db", recover_on_open=False)
                    self._read_log(store)
                    failures = 0
                except Exception as exc:  # a busy or locked store: read again next tick; a persistent error is shown
                    failures += 1
                    if failures in (1, 100) or stopping:
                        self.history.record("tail_failed", error=f"{type(exc).__name__}: {exc}", failures=failures)
                    if stopping and failures < 20:
                        continue
                if stopping:
                    return
        finally:
            if store is not None:
                store.close()

    def _read_log(self, store: SqliteMetadataStore) -> None:
        start = store.start_offset()
        if start > self._next_offset:
            self.log_gaps.append((self._next_offset, start - 1))
            self._next_offset = start
        for e in store.read(from_offset=self._next_offset):
            self.log_records.append(ck.LogRecord(e.offset, e.controller_epoch, e.record.name, e.record.fields))
            self._next_offset = e.offset + 1
            if e.record.name in _STATE_RECORDS:  # the state changes, in the history beside what caused them
                fields = {k: str(v) if k == "topic_id" else v for k, v in e.record.fields.items()}
                self.history.record("state", offset=e.offset, record=e.record.name, **fields)

    def observe(self, unfinished: list[str]) -> ck.Observation:
        self._stop_tailing.set()  # the tail reads to the end, then stops
        self._tailer.join(timeout=60)
        if self._tailer.is_alive():
            raise RuntimeError("the metadata log's tail did not finish reading within 60 s")
        self._read_crashes()
        assert self.proxy is not None
        with SqliteMetadataStore(self.cluster_dir / "metadata.db", recover_on_open=False) as store:
            rlmm = [_rlmm(e.record) for e in store.read_remote_log_metadata()]
        pages = self._direct_s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        keys = frozenset(o["Key"] for page in pages for o in page.get("Contents", []))
        topics = self._call(self._topics_at_end, timeout_s=120)
        mutations = tuple(ck.Mutation(m.time_ms, m.operation, m.key, m.status) for m in self.proxy.mutations())
        listing = Counter(k.split("/", 2)[1] if k.startswith(PREFIX) else "(outside the prefix)" for k in keys)
        self.history.record("observed", bucket_objects=dict(listing), topics=[t.name for t in topics])
        return ck.Observation(
            prefix=PREFIX,
            log=tuple(self.log_records),
            log_gaps=tuple(self.log_gaps),
            rlmm=tuple(rlmm),
            bucket_keys=keys,
            sentinels=self.sentinels,
            mutations=mutations,
            topics=tuple(topics),
            acks=tuple(self.acks),
            delete_requests={k: tuple(v) for k, v in self.delete_requests.items()},
            controller_events=tuple(self._controller_events()),
            unconverged=tuple(unfinished),
        )

    async def _topics_at_end(self, c: TieredClient) -> list[ck.TopicEnd]:
        out = []
        statuses = {s.topic: s for s in await c.tiering_status(None)}
        md = await c.metadata(None)
        for t in md["topics"]:
            if t["name"] not in TOPIC_NAMES:
                continue
            s = statuses.get(t["name"])
            parts = []
            for p in sorted(p["partition_index"] for p in t["partitions"]):
                bounds = await c.offsets(t["name"], p)
                records = {r.offset: r.value async for r in c.consume(t["name"], p)}
                parts.append(
                    ck.PartitionEnd(
                        p, bounds.log_start_offset, bounds.local_log_start_offset, bounds.log_end_offset, records
                    )
                )
            out.append(
                ck.TopicEnd(
                    t["name"],
                    str(t["topic_id"]),
                    int(s.state) if s else 0,
                    s.tiered_epoch if s else 0,
                    int(s.policy) if s else 0,
                    tuple(parts),
                )
            )
        return out

    def _controller_events(self) -> list[ck.ControllerEvent]:
        out = []
        for path in sorted((self.cluster_dir / "logs").glob("controller-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if '"disable.ack"' not in line and '"disable.completed"' not in line:
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                # One line per exchange (acks) or per completion batch, each listing its topics.
                for t in e.get("topics", ()):
                    out.append(
                        ck.ControllerEvent(
                            _iso_ms(e["timestamp"]),
                            e["event"],
                            t["topic_id"],
                            int(t["tiered_epoch"]),
                            int(e.get("broker_id", -1)),
                        )
                    )
        return out


def _rlmm(record: Any) -> ck.RlmmRecord:
    f = record.fields
    if "remote_log_segment_id" in f:
        seg = f["remote_log_segment_id"]
        tid = str(seg["topic_id_partition"]["id"])
        return ck.RlmmRecord(
            tid,
            str(seg["id"]),
            f["remote_log_segment_state"],
            f.get("tiered_epoch", -1),
            record.name == "RemoteLogSegmentMetadataRecord",
        )
    tip = f["topic_id_partition"]
    return ck.RlmmRecord(str(tip["id"]), None, f["remote_partition_delete_state"], f.get("tiered_epoch", -1), False)


def run_seed(
    seed: int,
    *,
    operations: int = 20,
    brokers: int = 3,
    controllers: int = 2,
    fault_rate: float = 0.35,
    keep: bool = False,
    tamper: Callable[[Run], None] | None = None,
) -> RunResult:
    """Generate the scenario of ``seed``, run it, heal, observe and check. ``tamper`` (for the suite's own tests)
    is called between healing and observing, to plant a defect the checker must find."""
    scenario = generate(
        seed,
        operations=operations,
        brokers=brokers,
        controllers=controllers,
        fault_rate=fault_rate,
        crash_points=sorted(crash_points.POINTS),
    )
    started = time.monotonic()
    run = Run(scenario)
    violations: list[ck.Violation] = []
    try:
        run.start()
        run.execute()
        unfinished = run.heal()
        if tamper is not None:
            tamper(run)
        obs = run.observe(unfinished)
        violations = [*run.unexpected, *ck.check(obs)]
    except Exception as exc:  # the run itself failed: that is reported as a violation, with the history kept
        violations = [*run.unexpected, ck.Violation("run", f"the run failed: {type(exc).__name__}: {exc}")]
        run.history.record("run_failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ^C must not leave processes behind
        try:
            run.close()
        finally:
            signal.signal(signal.SIGINT, previous)
    incomplete = [v for v in violations if v.invariant == ck.INCOMPLETE]
    violations = [v for v in violations if v.invariant != ck.INCOMPLETE]
    faults = Counter(run.faults)
    if run.proxy is not None:
        for kind, n in run.proxy.faults_served.items():
            faults[f"s3 {kind} served"] += n
    kept = run.dir if violations or keep else None
    if kept is None:
        run.remove()
    return RunResult(
        seed,
        scenario,
        violations,
        faults,
        run.crash_points_hit,
        len(scenario.ops),
        run.ops_failed,
        time.monotonic() - started,
        kept,
        incomplete,
        run.history.events,
    )
