"""One chaos run: a real local cluster driven through a seed's scenario under its faults, healed, observed, checked.

What runs (all real processes and sockets on 127.0.0.1) is :mod:`chaos.rig`'s: the embedded S3 (moto's server)
behind an :class:`~chaos.s3_proxy.S3FaultProxy`, the controllers and brokers of :mod:`orchestrator.local.cluster`
with every link between a broker and a controller through a :class:`~chaos.link_proxy.LinkProxy`, and a
:class:`~orchestrator.client.TieredClient` per operation. Sentinel objects are put in the bucket outside every
topic's prefix before the workload starts.

A run, in order (this module holds the order; each step's work is its own module's):

1. the operations of :func:`chaos.scenario.generate` (:mod:`chaos.operations`), each preceded by its faults
   (:mod:`chaos.fault_injection`); after each, the processes are looked at: one dead at a crash point (its record
   line says so) or past its restart time is restarted unarmed, one dead for no reason the run knows is an
   *unexpected exit* (a violation);
2. healing: every fault lifted (the run's PostgreSQL server continued or started again, S3 rules cleared, links
   passed, paused processes continued, dead ones restarted, armed ones restarted unarmed), then wait until no topic
   is DISABLING and no deletion is owed;
3. the observation (:mod:`chaos.observation`): the metadata log (tailed all along by :mod:`chaos.log_tail`, so a
   snapshot cannot hide records), the RLMM, the bucket, the proxy's record of every mutation, each topic's state,
   offsets and records, the controllers' logs;
4. :func:`chaos.checker.check`.

Invariants: every process the run started is stopped by pid when it ends, whatever happened; the run's directory
is removed unless it found a violation or was asked to keep it; nothing of the run binds anything but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import checker as ck
from chaos import deposed, replication_events
from chaos.deposed import DeposedController
from chaos.fault_injection import FaultInjector
from chaos.history import History
from chaos.log_tail import LogTail
from chaos.observation import observe, unfinished_work
from chaos.operations import Operations
from chaos.rig import BUCKET, FAST_BROKER, FAST_CONTROLLER, PREFIX, Rig
from chaos.s3_proxy import S3FaultProxy
from chaos.scenario import Fault, Scenario, generate
from chaos.store_server import ChaosPostgres
from chaos.traffic import Traffic
from orchestrator import crash_points
from orchestrator.errors import TieredError
from orchestrator.local.security import LocalSecurity

# Where they were first defined: the suite's tests and tests/support/live_cluster.py import them from here.
__all__ = ["BUCKET", "FAST_BROKER", "FAST_CONTROLLER", "PREFIX", "Run", "RunResult", "run_seed"]


@dataclass
class RunResult:
    seed: int
    scenario: Scenario
    violations: list[ck.Violation]
    faults: Counter[str]  # injected, by kind (S3 faults by what the proxy served), and chaos.replication_events
    crash_points_hit: list[str]
    operations: int
    operations_failed: int
    seconds: float
    directory: Path | None  # kept when there are violations (or when asked)
    incomplete: list[ck.Violation]  # what the run could not observe (a log gap): not checked, not a violation
    history: list[dict[str, Any]] = field(default_factory=list)
    store: str = "sqlite"  # or "postgresql" (a URL given), or "postgresql server" (the run's own, with its faults)


class Run:
    def __init__(
        self,
        scenario: Scenario,
        *,
        heal_timeout_s: float = 90.0,
        store: str | None = None,
        postgres: ChaosPostgres | None = None,
        security: LocalSecurity = LocalSecurity(),
    ) -> None:
        """``store``: a ``postgresql://`` URL the cluster keeps its metadata in (a database of its own); None, the
        cluster's SQLite file. ``postgres``: the server of that URL, when the scenario pauses and restarts it.
        ``security``: TLS, SCRAM logins and ACLs as ``cluster up`` takes them; the run's clients connect as the
        cluster's admin."""
        self.scenario = scenario
        self.seed = scenario.seed
        self.dir = Path(tempfile.mkdtemp(prefix=f"chaos-{scenario.seed}-"))
        self.heal_timeout_s = heal_timeout_s
        self.history = History(self.dir / "history.jsonl")
        self.rig = Rig(self.dir, scenario, store=store, postgres=postgres, security=security)
        self.injector = FaultInjector(self.rig, self.history, self.dir / "crash-points.jsonl")
        self.operations = Operations(self.rig, self.history, self.injector)
        self.tail = LogTail(self.rig.store_spec, self.history)
        self.deposed = DeposedController(self.rig, self.history)
        self.traffic = Traffic(self.rig, self.history, self.tail, self.operations.acks)

    # What the run's result and the suite's own tests read.

    @property
    def proxy(self) -> S3FaultProxy | None:
        return self.rig.proxy

    @property
    def faults(self) -> Counter[str]:
        return self.injector.injected

    @property
    def unexpected(self) -> list[ck.Violation]:
        return self.injector.unexpected

    @property
    def crash_points_hit(self) -> list[str]:
        return self.injector.crash_points_hit

    @property
    def ops_failed(self) -> int:
        return self.operations.failed

    # -- set-up and tear-down ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.rig.start_cluster()
        self.tail.start()
        self.rig.plant_sentinels()
        if any(f.kind == "disk_full" for f in self.scenario.faults):  # a disk of its own for each broker, to fill
            self.rig.size_disks()
        self.rig.insert_links()
        self.history.record("start", seed=self.seed, schedule=self.scenario.schedule())
        self.traffic.start()

    def close(self) -> None:
        self.traffic.stop()
        self.tail.stop()
        self.injector.cancel_timers()
        self.injector.release_disks()
        self.rig.close()
        self.history.close()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the workload -------------------------------------------------------------------------------------------

    def execute(self) -> None:
        faults_at: dict[int, list[Fault]] = defaultdict(list)
        for f in self.scenario.faults:
            faults_at[f.at].append(f)
        for op in self.scenario.ops:
            self.injector.op_index = op.index
            for f in faults_at[op.index]:
                self.injector.inject(f)
            self.injector.revive()
            self.deposed.maybe_probe(self.tail.records, self.injector.paused())
            self.operations.run(op)
            self.injector.revive()

    # -- healing and observing -----------------------------------------------------------------------------------

    def heal(self) -> list[str]:
        """Lift every fault, restart everything unarmed, and wait for the cluster to finish its work; returns what
        was still unfinished when the wait gave up (empty: converged)."""
        self.traffic.stop()  # client traffic runs through the faults; the healed cluster is observed quiet
        self.injector.lift_all()
        self.history.record("heal")
        # Armed processes stay armed through the first wait: the work finishing is often the moment a crash point
        # names (a crash then is one more fault healed). Then they are restarted unarmed, and the wait repeats.
        unfinished = self._converge(self.heal_timeout_s)
        if self.injector.disarm():
            unfinished = self._converge(self.heal_timeout_s)
        self.deposed.maybe_probe(self.tail.records, ())  # a failover while healing: nothing is paused any more
        self.history.record("healed", unfinished=unfinished)
        return unfinished

    def _converge(self, timeout_s: float) -> list[str]:
        """Wait until nothing is left unfinished (restarting what dies meanwhile); what was left when it gave up."""
        deadline = time.monotonic() + timeout_s
        unfinished: list[str] = ["not looked at yet"]
        while time.monotonic() < deadline:
            self.injector.revive(healing=True)
            try:
                unfinished = self.rig.call(unfinished_work)
            except (TieredError, OSError, TimeoutError) as exc:
                unfinished = [f"the cluster did not answer: {type(exc).__name__}: {exc}"]
            if not unfinished:
                break
            time.sleep(0.5)
        return unfinished

    def observe(self, unfinished: list[str]) -> ck.Observation:
        self.tail.finish()  # the tail reads to the end, then stops
        self.injector.read_crashes()
        return observe(
            self.rig,
            self.history,
            log=self.tail.records,
            log_gaps=self.tail.gaps,
            acks=self.operations.acks,
            delete_requests=self.operations.delete_requests,
            unfinished=unfinished,
            deposed=self.deposed.answers,
            reads=self.traffic.reads,
        )


@contextlib.contextmanager
def stop_signals_held() -> Iterator[list[int]]:
    """SIGINT and SIGTERM held while the body runs: each one that comes is noted in the list yielded (never lost,
    and never cutting the body short); the caller's handlers are back once it ends."""
    came: list[int] = []

    def note(signum: int, _frame: object) -> None:
        came.append(signum)

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield came
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_seed(
    seed: int,
    *,
    operations: int = 20,
    brokers: int = 3,
    controllers: int = 2,
    fault_rate: float = 0.35,
    keep: bool = False,
    tamper: Callable[[Run], None] | None = None,
    store: str | None = None,
    postgres: ChaosPostgres | None = None,
    security: LocalSecurity = LocalSecurity(),
    replication_factor: int = 1,
    disk_faults: bool = False,
    topics: int = 3,
) -> RunResult:
    """Generate the scenario of ``seed``, run it, heal, observe and check. ``tamper`` (for the suite's own tests)
    is called between healing and observing, to plant a defect the checker must find. ``replication_factor``: of
    the workload's topics (at most ``brokers``; see :func:`chaos.scenario.generate`); ``disk_faults``: brokers' data
    directories turn read-only or full too (root only), and with replicas are lost; ``topics``: how many topic names
    the workload draws from.

    The metadata store: ``store`` (a ``postgresql://`` URL the caller made) or, with ``postgres``, a database of
    the seed's own on that server, made before the run and dropped after it (kept, and dumped into the run's
    directory, when the seed is kept), with the server's pauses and restarts among the faults; else SQLite."""
    if store is not None and postgres is not None:
        raise ValueError("run_seed takes a store URL or a PostgreSQL server to make one on, not both")
    scenario = generate(
        seed,
        operations=operations,
        brokers=brokers,
        controllers=controllers,
        fault_rate=fault_rate,
        crash_points=sorted(set(crash_points.POINTS) - crash_points.STOP_ONLY),
        store_faults=postgres is not None,
        replication_factor=replication_factor,
        disk_faults=disk_faults,
        topics=topics,
    )
    started = time.monotonic()
    database = postgres.create_database() if postgres is not None else None
    if postgres is not None and database is not None:
        store = postgres.url(database)
    run = Run(scenario, store=store, postgres=postgres, security=security)
    violations: list[ck.Violation] = []
    replication: Counter[str] = Counter()
    interrupted = False
    try:
        run.start()
        run.execute()
        unfinished = run.heal()
        if tamper is not None:
            tamper(run)
        obs = run.observe(unfinished)
        violations = [*run.unexpected, *ck.check(obs)]
        replication = replication_events.count(obs.log)
    except Exception as exc:  # the run itself failed: that is reported as a violation, with the history kept
        violations = [*run.unexpected, ck.Violation("run", f"the run failed: {type(exc).__name__}: {exc}")]
        run.history.record("run_failed", error=f"{type(exc).__name__}: {exc}")
    except BaseException:  # ^C: nothing to report; the run's directory goes too (unless asked to keep it)
        interrupted = True
        raise
    finally:
        with stop_signals_held() as held:  # a ^C or SIGTERM now must not leave processes behind: held till closed
            run.close()
        if (interrupted or held) and not keep:
            run.remove()
        if held and not interrupted:
            raise KeyboardInterrupt  # the stop that came while the seed was being closed
    incomplete = [v for v in violations if v.invariant == ck.INCOMPLETE]
    violations = [v for v in violations if v.invariant != ck.INCOMPLETE]
    faults = Counter(run.faults) + replication + deposed.count(run.deposed.answers) + run.traffic.counts
    if run.proxy is not None:
        for kind, n in run.proxy.faults_served.items():
            faults[f"s3 {kind} served"] += n
    kept = run.dir if violations or keep else None
    if postgres is not None and database is not None:
        if kept is None:
            postgres.drop_database(database)
        else:
            why_not = postgres.dump(database, run.dir / "metadata.sql")
            run.history.record("store_kept", database=database, dump=why_not or "metadata.sql")
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
        "postgresql server" if postgres is not None else "sqlite" if store is None else "postgresql",
    )
