"""A chaos scenario from a seed: the workload a run drives and the faults it injects, decided before the run.

Pure: :func:`generate` reads nothing but its arguments, so one seed always gives the same operations and the same
fault schedule (what a run *observes* still depends on timing: a seed replays the schedule, not the interleaving).

The workload is Kafka operations on a few topic names (``chaos-0`` ...): create, produce, disable with either
policy, re-enable, purge (delete after retain), delete, delete and re-create under the same name, add partitions,
and decommission a broker (killed first: only a dead broker is decommissioned). The generator keeps a rough model
of each name (exists, tiered, disabled) so most operations make sense; the run still expects refusals (a disable
while one is in progress), and records them. Every topic is created with the scenario's replication factor (1 unless
asked, at most the broker count) and, from factor 3, ``min.insync.replicas=2``; produces are acks=all, so what is
acknowledged is on every in-sync replica and must survive any one broker's death.

Faults are placed before operations (``at`` is the index of the operation they precede) and last ``duration_s``
seconds where that applies:

* ``kill``: SIGKILL of a controller or broker, restarted ``restart_after`` operations later (0: at once);
* ``pause``: SIGSTOP, then SIGCONT after ``duration_s``;
* ``crash_point``: every controller (or every broker) restarted with a named crash point armed
  (:mod:`orchestrator.crash_points`); the one that reaches it dies there and is restarted unarmed as soon as the run
  sees it dead. The next operations are the ones that reach that moment (a disable, a delete, a produce and a pause
  for tiering: ``_TRIGGERS``);
* ``s3``: S3 faults (SlowDown, InternalError, reset, slow, and hang: held past the brokers' S3 read timeout,
  :data:`S3_READ_TIMEOUT_S`, then forwarded all the same) on one operation family or all, for ``duration_s``;
* ``link``: a link between brokers and controllers dropped, delayed, reset or cut one way, for ``duration_s``;
* ``postgres_pause`` (only when the store is PostgreSQL, ``store_faults``): every process of the PostgreSQL server
  SIGSTOPped, then SIGCONTed after ``duration_s``: half the draws under the controllers' lease (:data:`LEASE_S`),
  half well beyond it, so the active controller loses its lease while the store cannot be reached;
* ``postgres_restart`` (likewise): the server stopped (fast shutdown) and started again on the same data directory
  and port ``down_s`` seconds later;
* ``postgres_link`` (likewise): one process's link to the store (:mod:`chaos.store_links`; a controller, -1 the
  active one, or a broker) dropped, delayed, reset or cut one way for ``duration_s``, half the draws within the
  lease and half well beyond it: an active controller cut off from the store while the other controllers reach it
  must step down, and the one that takes over must not be undone by it;
* ``disk_readonly`` (only when asked, ``disk_faults``): a broker's data directory made read-only in place for
  ``duration_s`` (:mod:`chaos.disk`); a broker that writes to it meanwhile halts, as Kafka's does when its only log
  directory fails, and is started again once the disk is back;
* ``disk_full`` (likewise): a broker's data directory (on a tmpfs of its own in such a run) filled to the last byte
  for ``duration_s``; a broker that writes to it meanwhile halts on ENOSPC the same way;
* ``disk_eio`` (likewise, and no root needed): every file operation under a broker's data directory fails with EIO
  for ``duration_s``, as a failing disk answers (:mod:`chaos.io_errors`: a preload library the cluster's processes
  start with); a broker that reads or writes there meanwhile halts the same way. It takes the place of half the
  ``disk_readonly`` draws, decided by a second random stream of the seed, so a seed draws the same schedule as before
  it existed but for the kind of those faults;
* ``disk_lost`` (likewise, and only when the workload's topics have replicas): a broker SIGKILLed and every file of
  its data directory deleted, as a disk replaced by an empty one; it is started again ``restart_after`` operations
  on, and must come back with nothing acknowledged lost (its replicas are copied back from the others; it may not
  lead a partition it holds nothing of). With one replica a lost disk loses what was not tiered yet by definition:
  ``tests/orchestrator/local/test_lost_data_dir.py`` holds that case to what it can promise.

Invariants: every operation index in ``faults`` is within the workload; a ``kill`` of the last live broker is never
scheduled while another kill of a broker is outstanding (the cluster must be able to heal on its own once the run
restores everything); crash points come from the list given (the run passes every known point).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

TOPIC_NAMES = ("chaos-0", "chaos-1", "chaos-2")
MAX_TOPICS = 10  # chaos-0 .. chaos-9: a sentinel object sits under a chaos-10 prefix of a topic id no topic has


def topic_names(topics: int) -> tuple[str, ...]:
    """The names a workload of ``topics`` topics draws from (``chaos-0`` ...; :data:`TOPIC_NAMES` for 3)."""
    if not 1 <= topics <= MAX_TOPICS:
        raise ValueError(f"a workload has 1 to {MAX_TOPICS} topics, got {topics}")
    return tuple(f"chaos-{i}" for i in range(topics))


_OPS = (
    ("produce", 34),
    ("create", 8),
    ("disable_retain", 9),
    ("disable_delete", 9),
    ("enable", 10),
    ("purge", 5),
    ("delete", 4),
    ("recreate", 5),
    ("add_partitions", 4),
    ("decommission", 2),
    ("settle", 10),
)
_FAULTS = (("kill", 4), ("pause", 2), ("crash_point", 5), ("s3", 4), ("link", 3))
FAULT_KINDS = tuple(kind for kind, _ in _FAULTS)
# Drawn only when the store is PostgreSQL: appended, so a seed on SQLite draws exactly what it drew before.
_STORE_FAULTS = (("postgres_pause", 2), ("postgres_restart", 2), ("postgres_link", 2))
STORE_FAULT_KINDS = tuple(kind for kind, _ in _STORE_FAULTS)
# Drawn only when asked (a run as root): appended after the store's, so other runs draw exactly what they drew.
_DISK_FAULTS = (("disk_readonly", 4), ("disk_full", 3))
DISK_EIO = "disk_eio"  # in place of half the read-only draws (see the module docstring)
DISK_FAULT_KINDS = (*(kind for kind, _ in _DISK_FAULTS), DISK_EIO)
DISK_LOST = "disk_lost"
_REPLICATED_DISK_FAULTS = ((DISK_LOST, 3),)  # drawn with the disk faults when the topics have replicas
LEASE_S = 1.5  # the controllers' lease in a chaos run (chaos.rig's lease_ttl_ms): long store pauses outlast it
S3_FAULT_KINDS = ("slowdown", "internal", "reset", "slow", "hang")
# The brokers' S3 read timeout in a chaos run (chaos.rig's [s3] read_timeout_s): a "hang" holds a request longer.
S3_READ_TIMEOUT_S = 2.0
S3_OPERATIONS = (None, "PutObject", "DeleteObjects", "GetObject", "ListObjectsV2")
LINK_MODES = ("drop", "drop_in", "drop_out", "delay", "reset")
REPLICATED_MIN_INSYNC, MIN_INSYNC_REPLICAS = 3, 2  # from replication factor 3, topics require 2 in-sync replicas


@dataclass(frozen=True)
class Op:
    index: int
    kind: str
    topic: str = ""
    args: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return " ".join(part for part in (f"#{self.index}", self.kind, self.topic, extra) if part)


@dataclass(frozen=True)
class Fault:
    at: int  # the index of the operation this fault precedes
    kind: str
    role: str = ""  # "controller" | "broker" for process faults; "" otherwise
    target: int = -1  # broker id, or controller index (0-based) for process faults; -1 = the active controller
    args: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        who = "" if not self.role else f"{self.role}:{'active' if self.target < 0 else self.target}"
        extra = " ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return " ".join(part for part in (f"before #{self.at}", self.kind, who, extra) if part)


@dataclass(frozen=True)
class Scenario:
    seed: int
    brokers: int
    controllers: int
    ops: tuple[Op, ...]
    faults: tuple[Fault, ...]
    # Of every topic the workload creates, at most ``brokers``; it draws nothing but lost disks (with disk faults, at
    # 2 or more), so a seed's operations and faults are otherwise the same at every factor (min.insync.replicas is
    # MIN_INSYNC_REPLICAS from REPLICATED_MIN_INSYNC up).
    replication_factor: int = 1
    topic_names: tuple[str, ...] = TOPIC_NAMES  # the names the workload draws from

    def topic_configs(self) -> dict[str, str]:
        """What the workload's topics are created with besides their tiering: acks=all is promised to survive a
        broker's death only with a second in-sync replica required."""
        if self.replication_factor >= REPLICATED_MIN_INSYNC:
            return {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
        return {}

    def schedule(self) -> list[str]:
        return [f.describe() for f in self.faults]


@dataclass
class _Name:
    exists: bool = False
    tiered: bool = False  # ENABLED (or believed so)
    disabled: str = ""  # "", "retain" or "delete"
    partitions: int = 0


def _pick(rng: random.Random, weighted: Sequence[tuple[str, int]]) -> str:
    return rng.choices([k for k, _ in weighted], weights=[w for _, w in weighted])[0]


def _op(rng: random.Random, index: int, names: dict[str, _Name], brokers: int) -> Op:
    kind = _pick(rng, _OPS)
    name = rng.choice(list(names))
    model = names[name]
    existing = [n for n, m in names.items() if m.exists]
    if kind == "create" or (not existing and kind not in ("settle", "decommission")):
        if model.exists:
            name = rng.choice(existing)
            return Op(index, "produce", name, {"partition": rng.randrange(names[name].partitions), **_batch(rng)})
        tiered = rng.random() < 0.85
        model.exists, model.tiered, model.disabled, model.partitions = True, tiered, "", rng.randint(1, 3)
        return Op(index, "create", name, {"partitions": model.partitions, "tiered": tiered})
    if kind in ("settle", "decommission"):
        if kind == "decommission":
            return Op(index, kind, "", {"broker": rng.randint(1, brokers), "dead_for": rng.randint(1, 4)})
        return Op(index, kind, "", {"seconds": round(rng.uniform(0.5, 2.0), 2)})
    name = rng.choice(existing)
    model = names[name]
    if kind == "produce":
        return Op(index, kind, name, {"partition": rng.randrange(model.partitions), **_batch(rng)})
    if kind in ("disable_retain", "disable_delete"):
        policy = kind.split("_", 1)[1]
        if model.tiered:
            model.tiered, model.disabled = False, policy
        return Op(index, "disable", name, {"policy": policy})
    if kind == "purge":
        if model.disabled == "retain":
            model.disabled = "delete"
        return Op(index, "disable", name, {"policy": "delete", "purge": True})
    if kind == "enable":
        model.tiered, model.disabled = True, ""
        return Op(index, kind, name)
    if kind == "add_partitions":
        if model.partitions >= 4:
            return Op(index, "produce", name, {"partition": rng.randrange(model.partitions), **_batch(rng)})
        model.partitions += 1
        return Op(index, kind, name, {"total": model.partitions})
    if kind == "delete":
        model.exists = False
        return Op(index, kind, name)
    # recreate: delete, then create the same name anew (a new topic id)
    tiered = rng.random() < 0.85
    model.exists, model.tiered, model.disabled, model.partitions = True, tiered, "", rng.randint(1, 3)
    return Op(index, "recreate", name, {"partitions": model.partitions, "tiered": tiered})


def _batch(rng: random.Random) -> dict[str, Any]:
    return {"records": rng.randint(10, 60), "size": rng.choice((100, 200, 400))}  # ~8 KiB: segments of 4 KiB roll


def _fault(
    rng: random.Random,
    at: int,
    brokers: int,
    controllers: int,
    crash_points: Sequence[str],
    broker_down: bool,
    store_faults: bool = False,
    disk_faults: bool = False,
    replicated: bool = False,
) -> Fault:
    disk = (_DISK_FAULTS + (_REPLICATED_DISK_FAULTS if replicated else ())) if disk_faults else ()
    kind = _pick(rng, _FAULTS + (_STORE_FAULTS if store_faults else ()) + disk)
    if kind in ("kill", DISK_LOST, *DISK_FAULT_KINDS) and broker_down:
        kind = "s3"
    if kind == DISK_LOST:
        return Fault(at, kind, "broker", rng.randint(1, brokers), {"restart_after": rng.choice((0, 1, 2))})
    if kind in DISK_FAULT_KINDS:
        return Fault(at, kind, "broker", rng.randint(1, brokers), {"duration_s": round(rng.uniform(0.5, 3.0), 2)})
    if kind == "postgres_pause":
        under_lease = rng.random() < 0.5
        low, high = (0.3, LEASE_S * 0.8) if under_lease else (LEASE_S * 1.5, LEASE_S * 5)
        return Fault(at, kind, args={"duration_s": round(rng.uniform(low, high), 2)})
    if kind == "postgres_restart":
        return Fault(at, kind, args={"down_s": round(rng.uniform(0.2, 4.0), 2)})
    if kind == "postgres_link":
        role = rng.choice(("controller", "broker"))
        target = rng.choice((-1, *range(controllers))) if role == "controller" else rng.randint(1, brokers)
        under_lease = rng.random() < 0.5
        low, high = (0.3, LEASE_S * 0.8) if under_lease else (LEASE_S * 1.5, LEASE_S * 4)
        store_args: dict[str, Any] = {"mode": rng.choice(LINK_MODES), "duration_s": round(rng.uniform(low, high), 2)}
        if store_args["mode"] == "delay":
            store_args["delay_s"] = round(rng.uniform(0.05, 0.5), 2)
        return Fault(at, kind, role, target, store_args)
    if kind in ("kill", "pause"):
        role = rng.choice(("controller", "broker"))
        target = rng.choice((-1, *range(controllers))) if role == "controller" else rng.randint(1, brokers)
        if kind == "kill":
            return Fault(at, kind, role, target, {"restart_after": rng.choice((0, 0, 1, 2))})
        return Fault(at, kind, role, target, {"duration_s": round(rng.uniform(0.3, 2.0), 2)})
    if kind == "crash_point":
        point = rng.choice(list(crash_points))
        role = point.split(".", 1)[0]
        target = -1 if role == "controller" else rng.randint(1, brokers)
        return Fault(at, kind, role, target, {"point": point, "hit": 1})
    if kind == "s3":
        args: dict[str, Any] = {
            "fault": rng.choice(S3_FAULT_KINDS),
            "operation": rng.choice(S3_OPERATIONS),
            "probability": rng.choice((0.3, 0.6, 1.0)),
            "duration_s": round(rng.uniform(0.5, 3.0), 2),
        }
        if args["fault"] == "slow":
            args["delay_s"] = round(rng.uniform(0.1, 0.8), 2)
        elif args["fault"] == "hang":  # held past the client's timeout: it gives up and retries, the request lands late
            args["delay_s"] = round(rng.uniform(S3_READ_TIMEOUT_S * 1.25, S3_READ_TIMEOUT_S * 3), 2)
        return Fault(at, kind, args=args)
    mode = rng.choice(LINK_MODES)
    link = rng.choice(("to_broker", "to_controller"))
    b = rng.randint(1, brokers)
    link_args: dict[str, Any] = {"link": link, "broker": b, "mode": mode, "duration_s": round(rng.uniform(0.5, 3.0), 2)}
    if link == "to_controller":
        link_args["controller"] = rng.randrange(controllers)
    if mode == "delay":
        link_args["delay_s"] = round(rng.uniform(0.05, 0.5), 2)
    return Fault(at, "link", args=link_args)


# What makes each crash point's moment come soon after it is armed: the operations forced after the fault.
_TRIGGERS = {
    "controller.after_epoch_bump": ("disable",),
    "controller.before_disable_send": ("disable",),
    "controller.after_ack_before_disabled": ("disable",),
    "broker.before_disable_ack": ("disable",),
    "broker.mid_delete_batch": ("produce", "settle", "disable_delete"),
    "controller.after_topic_removed": ("produce", "settle", "delete"),
    "broker.mid_partition_delete": ("produce", "settle", "delete"),
    "broker.after_upload_before_rlmm": ("produce", "settle"),
    "controller.mid_snapshot": ("produce",),
}


def _forced(rng: random.Random, index: int, kind: str, names: dict[str, _Name]) -> Op | None:
    """A triggering operation on a tiered topic (None when no topic is tiered: the generator picks freely)."""
    tiered = [n for n, m in names.items() if m.exists and m.tiered]
    if kind == "settle":
        return Op(index, "settle", "", {"seconds": 3.0})  # a restarted broker registers once its old session ends
    if not tiered:
        return None
    name = rng.choice(tiered)
    model = names[name]
    if kind == "produce":
        return Op(index, "produce", name, {"partition": rng.randrange(model.partitions), **_batch(rng)})
    if kind == "delete":
        model.exists = False
        return Op(index, "delete", name)
    policy = "delete" if kind == "disable_delete" else rng.choice(("retain", "delete"))
    model.tiered, model.disabled = False, policy
    return Op(index, "disable", name, {"policy": policy})


def generate(
    seed: int,
    *,
    operations: int = 20,
    brokers: int = 3,
    controllers: int = 2,
    fault_rate: float = 0.35,
    crash_points: Sequence[str] = (),
    store_faults: bool = False,
    replication_factor: int = 1,
    disk_faults: bool = False,
    topics: int = len(TOPIC_NAMES),
) -> Scenario:
    """The scenario of ``seed``: ``operations`` operations and, before each, a fault with ``fault_rate`` odds.
    ``store_faults``: the store is a PostgreSQL server the run controls, so its pauses and restarts are drawn too.
    ``replication_factor``: of the topics created, capped at ``brokers``; it changes nothing drawn, except with
    ``disk_faults``, when a factor of 2 or more draws lost disks too. ``disk_faults``: brokers' data directories
    turn read-only, full or fail with EIO too (the run is root). ``topics``: how many names the workload draws
    from (``chaos-0`` ...; 3 draws exactly what every seed drew before the option)."""
    if replication_factor < 1:
        raise ValueError(f"the replication factor must be at least 1, got {replication_factor}")
    rng = random.Random(seed)
    eio_rng = random.Random(f"{seed}:{DISK_EIO}")  # drawn only on read-only draws: nothing else moves
    names = {n: _Name() for n in topic_names(topics)}
    ops: list[Op] = []
    faults: list[Fault] = []
    broker_down_until = -1  # op index until which a killed (or decommissioned) broker stays down
    forced: list[str] = []
    for i in range(operations):
        op = (_forced(rng, i, forced.pop(0), names) if forced else None) or _op(rng, i, names, brokers)
        if op.kind == "decommission":
            if i < broker_down_until:
                op = Op(i, "settle", "", {"seconds": 0.5})
            else:
                broker_down_until = i + op.args["dead_for"]
        ops.append(op)
        if i > 0 and rng.random() < fault_rate:
            points = crash_points or ("none",)
            down = i < broker_down_until
            fault = _fault(
                rng,
                i,
                brokers,
                controllers,
                points,
                broker_down=down,
                store_faults=store_faults,
                disk_faults=disk_faults,
                replicated=min(replication_factor, brokers) >= 2,
            )
            if fault.kind == "crash_point" and not crash_points:
                continue
            if fault.kind == "disk_readonly" and eio_rng.random() < 0.5:
                fault = replace(fault, kind=DISK_EIO)
            if fault.kind in ("kill", DISK_LOST) and fault.role == "broker":
                broker_down_until = max(broker_down_until, i + fault.args["restart_after"])
            if fault.kind in DISK_FAULT_KINDS:  # it may halt, and is started again from the next operation on
                broker_down_until = max(broker_down_until, i + 1)
            if fault.kind == "crash_point":
                forced = list(_TRIGGERS.get(fault.args["point"], ()))
            faults.append(fault)
    return Scenario(
        seed, brokers, controllers, tuple(ops), tuple(faults), min(replication_factor, brokers), tuple(names)
    )
