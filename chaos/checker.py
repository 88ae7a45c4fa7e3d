"""The checker: ARCHITECTURE §4's invariants, and what a user was promised, over what a chaos run observed.

Pure: :func:`check` reads an :class:`Observation` (gathered by the run once the cluster healed) and returns the
violations; it never talks to the cluster. It does not reuse the code under test to interpret what it sees: it walks
the metadata log's records itself.

What is checked (the number is the invariant of ARCHITECTURE §4 it shows; "promise" are the issue's other checks):

1. every topic id's ``tiered_epoch`` never goes down; a change of state bumps it by exactly one, except
   DISABLING -> DISABLED, which keeps the epoch it completes; a repeated state at the same epoch is a duplicate;
2. a DISABLED at epoch E is preceded (controller logs: ``disable.ack`` before ``disable.completed``) by an
   acknowledgement of E from every broker that held a replica of the topic and was not decommissioned;
3. every RLMM copy record of a topic id carries an epoch at which the log had made that topic ENABLED;
4. a topic DISABLED with the delete policy has no object left under its prefix, every segment of its id ends
   DELETE_SEGMENT_FINISHED in the RLMM, and each partition's log start is its local log start; no finished segment
   of a topic id is deleted unless the id had a delete policy or was deleted (retention never expires in a run);
5. every object written or deleted is under ``<prefix><topic>-<topicId>/`` of a topic the log created, and the
   sentinel objects placed outside every topic's prefix are still there, untouched;
6. the controller epoch of the log's records never goes down along the offsets; and every broker that answered
   the run's own DisableRemoteTopic as a deposed controller (:mod:`chaos.deposed`: after each failover, at the epoch
   before) refused it whole, as STALE_CONTROLLER_EPOCH (or KAFKA_STORAGE_ERROR when it could not read the lease);
8. promise: every acknowledged record at or above its partition's log start is read back with its value; one below
   it is gone only if its topic id had a delete-policy disable asked after it was acknowledged, and a copy of its
   offset was finished (COPY_SEGMENT_FINISHED) in the RLMM: local retention drops only what was copied, so a record
   the policy let go was in a copy it deleted; one that was only ever local is lost;
   promise: no offset is handed out twice: two different records acknowledged at the same offset of a partition (of
   one topic id) is a violation, whether or not they are still there to read (a policy may have removed both); with
   replicas this is what a leader elected without a record its predecessor acknowledged would do;
   promise: a record a client read during the run (:mod:`chaos.traffic`) is the one acknowledged at its offset;
   promise: the run converged (no topic left DISABLING, no deletion left unfinished).

Invariant 7 (idempotent re-delivery) has no check of its own: retries and failovers re-deliver all the time in a
run, and any change re-delivery made twice shows up in 1, 4 or 8.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ENABLED, DISABLING, DISABLED = 1, 2, 3
RETAIN, DELETE = 1, 2
COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3
_MUTATING_OPS = frozenset({"PutObject", "CopyObject", "CompleteMultipartUpload", "DeleteObject", "DeleteObjects"})
_DELETES = frozenset({"DeleteObject", "DeleteObjects"})
STALE_CONTROLLER_EPOCH, KAFKA_STORAGE_ERROR = 11, 56  # Kafka's error codes
INCOMPLETE = "incomplete"  # the invariant name of what the run could not see, rather than what the cluster did


@dataclass(frozen=True)
class LogRecord:
    offset: int
    controller_epoch: int | None
    name: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class RlmmRecord:
    topic_id: str
    segment_id: str | None  # None: a partition deletion record
    state: int
    tiered_epoch: int
    copy_record: bool  # a RemoteLogSegmentMetadataRecord (a copy started), not an update
    partition: int = -1
    start_offset: int | None = None  # a copy record's offsets (an update carries none)
    end_offset: int | None = None


@dataclass(frozen=True)
class Mutation:
    time_ms: int
    operation: str
    key: str
    status: int


@dataclass(frozen=True)
class Ack:
    topic_id: str
    partition: int
    first_offset: int
    values: tuple[bytes, ...]
    time_ms: int


@dataclass(frozen=True)
class Read:
    """A record a client read during the run (:mod:`chaos.traffic`), at the time the read ended."""

    topic_id: str
    partition: int
    offset: int
    value: bytes | None
    time_ms: int


@dataclass(frozen=True)
class PartitionEnd:
    partition: int
    log_start: int
    local_log_start: int
    log_end: int
    records: Mapping[int, bytes | None]  # offset -> value, everything read from the log start


@dataclass(frozen=True)
class TopicEnd:
    name: str
    topic_id: str
    state: int
    tiered_epoch: int
    policy: int
    partitions: tuple[PartitionEnd, ...]


@dataclass(frozen=True)
class ControllerEvent:
    time_ms: int
    event: str  # "disable.ack" | "disable.completed"
    topic_id: str
    tiered_epoch: int
    broker_id: int = -1


@dataclass(frozen=True)
class DeposedAnswer:
    """A broker's answer to the DisableRemoteTopic the run sent as a deposed controller (:mod:`chaos.deposed`)."""

    broker_id: int
    sent_epoch: int  # the controller epoch the request carried
    committed_epoch: int  # a higher one the metadata log had committed before it was sent
    error_code: int | None  # None: no answer (paused, dead, cut off), judged on nothing
    unanswered: str | None = None


@dataclass(frozen=True)
class Observation:
    prefix: str
    log: tuple[LogRecord, ...]
    log_gaps: tuple[tuple[int, int], ...]  # offset ranges the run could not read (a snapshot let them go first)
    rlmm: tuple[RlmmRecord, ...]
    bucket_keys: frozenset[str]
    sentinels: frozenset[str]
    mutations: tuple[Mutation, ...]
    topics: tuple[TopicEnd, ...]
    acks: tuple[Ack, ...]
    delete_requests: Mapping[str, tuple[int, ...]]  # topic id -> times (ms) a delete-policy disable was asked
    controller_events: tuple[ControllerEvent, ...]
    unconverged: tuple[str, ...] = ()  # what was still unfinished when healing gave up
    deposed: tuple[DeposedAnswer, ...] = ()  # the answers to the run's requests as a deposed controller
    reads: tuple[Read, ...] = ()  # records clients read while the faults went on


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    topic_id: str | None = None
    evidence: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message}"


def _topic_ids(records: Iterable[LogRecord]) -> dict[str, str]:
    """topic id -> name, for every topic the log created."""
    return {str(r.fields["topic_id"]): r.fields["name"] for r in records if r.name == "TopicRecord"}


def check_epochs(obs: Observation) -> list[Violation]:
    out: list[Violation] = []
    last: dict[str, tuple[int, int, int]] = {}  # topic id -> (state, epoch, offset)
    for r in obs.log:
        if r.name != "TieredStateRecord":
            continue
        tid, state, epoch = str(r.fields["topic_id"]), r.fields["tiered_state"], r.fields["tiered_epoch"]
        prev = last.get(tid)
        last[tid] = (state, epoch, r.offset)
        if prev is None:
            continue
        pstate, pepoch, poffset = prev
        where = (f"offset {poffset}: state {pstate} epoch {pepoch}", f"offset {r.offset}: state {state} epoch {epoch}")
        if epoch < pepoch:
            out.append(Violation("1", f"tiered_epoch of {tid} went down from {pepoch} to {epoch}", tid, where))
        elif state == pstate and epoch == pepoch:
            out.append(Violation("1", f"{tid}: state {state} at epoch {epoch} written twice", tid, where))
        elif state == DISABLED and pstate == DISABLING:
            if epoch != pepoch:
                out.append(Violation("1", f"{tid}: DISABLED at {epoch} completes DISABLING at {pepoch}", tid, where))
        elif state == DISABLED:
            out.append(Violation("1", f"{tid}: DISABLED at {epoch} without DISABLING before it", tid, where))
        elif epoch != pepoch + 1:
            out.append(Violation("1", f"{tid}: state change bumped the epoch {pepoch} -> {epoch}", tid, where))
    return out


def _required_brokers(obs: Observation) -> dict[tuple[str, int], frozenset[int]]:
    """(topic id, epoch) of every DISABLED record -> the brokers that had to acknowledge it, as the log stood then."""
    replicas: dict[str, dict[int, tuple[int, ...]]] = defaultdict(dict)
    unregistered: set[int] = set()
    out: dict[tuple[str, int], frozenset[int]] = {}
    for r in obs.log:
        f = r.fields
        if r.name == "PartitionRecord" or (r.name == "PartitionChangeRecord" and f.get("replicas") is not None):
            replicas[str(f["topic_id"])][f["partition_id"]] = tuple(f["replicas"])
        elif r.name == "RegisterBrokerRecord":
            unregistered.discard(f["broker_id"])
        elif r.name == "UnregisterBrokerRecord":
            unregistered.add(f["broker_id"])
        elif r.name == "TieredStateRecord" and f["tiered_state"] == DISABLED:
            tid = str(f["topic_id"])
            hosts = {b for rs in replicas[tid].values() for b in rs}
            out[(tid, f["tiered_epoch"])] = frozenset(hosts - unregistered)
    return out


def check_acks_before_disabled(obs: Observation) -> list[Violation]:
    out: list[Violation] = []
    acks: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)  # -> (time, broker)
    completed: dict[tuple[str, int], int] = {}
    for e in obs.controller_events:
        key = (e.topic_id, e.tiered_epoch)
        if e.event == "disable.ack":
            acks[key].append((e.time_ms, e.broker_id))
        elif e.event == "disable.completed":
            completed.setdefault(key, e.time_ms)
    for key, required in _required_brokers(obs).items():
        when = completed.get(key)
        if when is None:
            continue  # the controller's log line is missing (a process killed before it was written): nothing to hold
        acked = {b for t, b in acks[key] if t <= when}
        missing = required - acked
        if missing:
            evidence = (*(f"ack from broker {b} at {t}" for t, b in sorted(acks[key])), f"completed at {when}")
            out.append(
                Violation(
                    "2", f"{key[0]} DISABLED at epoch {key[1]} before brokers {sorted(missing)} acked", key[0], evidence
                )
            )
    return out


def _enabled_epochs(obs: Observation) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for r in obs.log:
        if r.name == "TieredStateRecord" and r.fields["tiered_state"] == ENABLED:
            out[str(r.fields["topic_id"])].add(r.fields["tiered_epoch"])
    return out


def check_copy_fence(obs: Observation) -> list[Violation]:
    enabled = _enabled_epochs(obs)
    out = []
    for r in obs.rlmm:
        if r.segment_id is None or r.state not in (COPY_STARTED, COPY_FINISHED):
            continue
        if r.tiered_epoch not in enabled.get(r.topic_id, set()):
            epochs = sorted(enabled.get(r.topic_id, set()))
            out.append(
                Violation(
                    "3",
                    f"segment {r.segment_id} of {r.topic_id} recorded {'copied' if r.state else 'copying'} at epoch "
                    f"{r.tiered_epoch}, where the topic was not ENABLED (ENABLED epochs {epochs})",
                    r.topic_id,
                )
            )
    return out


def _segments(obs: Observation) -> dict[str, dict[str, list[int]]]:
    """topic id -> segment id -> its RLMM states in order."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in obs.rlmm:
        if r.segment_id is not None:
            out[r.topic_id][r.segment_id].append(r.state)
    return out


def _policies_asked(obs: Observation) -> tuple[set[str], set[str]]:
    """Topic ids that ever had a delete-policy disable recorded, and topic ids the log removed."""
    delete_policy = {
        str(r.fields["topic_id"])
        for r in obs.log
        if r.name == "TieredStateRecord" and r.fields["tiered_state"] == DISABLING and r.fields["policy"] == DELETE
    }
    removed = {str(r.fields["topic_id"]) for r in obs.log if r.name == "RemoveTopicRecord"}
    return delete_policy, removed


def _topic_prefix(prefix: str, name: str, topic_id: str) -> str:
    return f"{prefix}{name}-{topic_id}/"


def check_delete_policy(obs: Observation) -> list[Violation]:
    out: list[Violation] = []
    segments = _segments(obs)
    for t in obs.topics:
        if t.state != DISABLED or t.policy != DELETE:
            continue
        where = _topic_prefix(obs.prefix, t.name, t.topic_id)
        left = sorted(k for k in obs.bucket_keys if k.startswith(where))
        if left:
            out.append(
                Violation(
                    "4",
                    f"{t.name} ({t.topic_id}) is DISABLED(delete) but {len(left)} object(s) remain",
                    t.topic_id,
                    tuple(left[:5]),
                )
            )
        alive = sorted(s for s, states in segments[t.topic_id].items() if states[-1] != DELETE_FINISHED)
        if alive:
            out.append(
                Violation(
                    "4",
                    f"{t.name} is DISABLED(delete) but the RLMM keeps {len(alive)} segment(s)",
                    t.topic_id,
                    tuple(alive[:5]),
                )
            )
        for p in t.partitions:
            if p.log_start != p.local_log_start:
                out.append(
                    Violation(
                        "4",
                        f"{t.name}-{p.partition} is DISABLED(delete) with log start {p.log_start} != local log start "
                        f"{p.local_log_start}",
                        t.topic_id,
                    )
                )
    delete_policy, removed = _policies_asked(obs)
    for tid, segs in segments.items():
        if tid in delete_policy or tid in removed:
            continue
        for sid, states in segs.items():
            if COPY_FINISHED in states and any(s in (DELETE_STARTED, DELETE_FINISHED) for s in states):
                out.append(
                    Violation(
                        "4",
                        f"copied segment {sid} of {tid} deleted, with no delete policy or topic deletion",
                        tid,
                        tuple(map(str, states)),
                    )
                )
    return out


def check_prefixes(obs: Observation) -> list[Violation]:
    out: list[Violation] = []
    names = _topic_ids(obs.log)
    prefixes = {_topic_prefix(obs.prefix, name, tid): tid for tid, name in names.items()}
    delete_policy, removed = _policies_asked(obs)
    finished = {sid for segs in _segments(obs).values() for sid, st in segs.items() if COPY_FINISHED in st}
    for m in obs.mutations:
        if m.operation not in _MUTATING_OPS:
            continue
        owner = next((tid for p, tid in prefixes.items() if m.key.startswith(p)), None)
        if m.key in obs.sentinels or owner is None:
            out.append(Violation("5", f"{m.operation} of {m.key!r}, outside every topic's prefix", None, (str(m),)))
            continue
        kept = owner not in delete_policy and owner not in removed
        if m.operation in _DELETES and kept and any(sid in m.key for sid in finished):
            why = f"{m.operation} of {m.key!r}: a copied segment of {owner}, never under a delete policy nor deleted"
            out.append(Violation("5", why, owner, (str(m),)))
    missing = sorted(obs.sentinels - obs.bucket_keys)
    if missing:
        out.append(Violation("5", f"sentinel object(s) outside every topic's prefix are gone: {missing}"))
    return out


def check_controller_epochs(obs: Observation) -> list[Violation]:
    out: list[Violation] = []
    high, at = -1, -1
    for r in obs.log:
        if r.controller_epoch is None:
            continue
        if r.controller_epoch < high:
            out.append(
                Violation(
                    "6",
                    f"record at offset {r.offset} ({r.name}) written at controller epoch "
                    f"{r.controller_epoch} after epoch {high} wrote offset {at}",
                )
            )
        elif r.controller_epoch > high:
            high, at = r.controller_epoch, r.offset
    return out


def check_deposed_refused(obs: Observation) -> list[Violation]:
    """Invariant 6's second half, from outside: every broker that answered a request carrying a controller epoch
    below one the log had committed refused it whole: as STALE_CONTROLLER_EPOCH, or as KAFKA_STORAGE_ERROR when it
    had seen no newer epoch yet and could not read the lease (the store unreachable: it cannot tell, so it admits
    nothing). Acceptance, or a refusal for any other reason, means the fence did not stop it."""
    return [
        Violation(
            "6",
            f"broker {a.broker_id} answered error code {a.error_code} (not STALE_CONTROLLER_EPOCH, "
            f"{STALE_CONTROLLER_EPOCH}) to a DisableRemoteTopic from controller epoch {a.sent_epoch}, sent after "
            f"epoch {a.committed_epoch} had written the metadata log",
        )
        for a in obs.deposed
        if a.error_code is not None and a.error_code not in (STALE_CONTROLLER_EPOCH, KAFKA_STORAGE_ERROR)
    ]


def check_records(obs: Observation) -> list[Violation]:
    """Promise 8: every acknowledged record is read back where the policy keeps it."""
    out: list[Violation] = []
    ends = {(t.topic_id, p.partition): (t, p) for t in obs.topics for p in t.partitions}
    final_ids = {t.topic_id for t in obs.topics}
    copied = _copied_ranges(obs)
    for ack in obs.acks:
        if ack.topic_id not in final_ids:
            continue  # deleted since: nothing is promised about its records
        found = ends.get((ack.topic_id, ack.partition))
        if found is None:
            out.append(
                Violation(
                    "8", f"partition {ack.partition} of {ack.topic_id} acknowledged records, and is gone", ack.topic_id
                )
            )
            continue
        topic, part = found
        deletes_after = [t for t in obs.delete_requests.get(ack.topic_id, ()) if t >= ack.time_ms]
        for i, value in enumerate(ack.values):
            offset = ack.first_offset + i
            where = f"{topic.name}-{ack.partition}@{offset}"
            if offset < part.log_start:
                if not deletes_after:
                    why = "no delete policy was asked after it"
                elif not _in_ranges(copied.get((ack.topic_id, ack.partition), ()), offset):
                    why = "no finished copy held it for a delete policy to remove"
                else:
                    continue
                out.append(
                    Violation(
                        "8",
                        f"{where} acknowledged at {ack.time_ms} is below the log start {part.log_start}, and {why}",
                        ack.topic_id,
                    )
                )
                continue
            if offset >= part.log_end:
                out.append(Violation("8", f"{where} acknowledged, beyond the log end {part.log_end}", ack.topic_id))
                continue
            got = part.records.get(offset, b"<missing>")
            if got != value:
                out.append(Violation("8", f"{where} reads {_short(got)}, acknowledged {_short(value)}", ack.topic_id))
    return out


def _copied_ranges(obs: Observation) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(topic id, partition) -> the offset ranges of every segment whose copy the RLMM recorded finished."""
    started: dict[str, tuple[str, int, int, int]] = {}  # segment id -> (topic id, partition, start, end)
    finished: set[str] = set()
    for r in obs.rlmm:
        if r.segment_id is None:
            continue
        if r.copy_record and r.start_offset is not None and r.end_offset is not None:
            started[r.segment_id] = (r.topic_id, r.partition, r.start_offset, r.end_offset)
        elif r.state == COPY_FINISHED:
            finished.add(r.segment_id)
    out: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for sid in finished & started.keys():
        tid, partition, start, end = started[sid]
        out[(tid, partition)].append((start, end))
    return out


def _in_ranges(ranges: Iterable[tuple[int, int]], offset: int) -> bool:
    return any(start <= offset <= end for start, end in ranges)


def check_offsets_unique(obs: Observation) -> list[Violation]:
    """Promise 8: no offset of a partition acknowledged for two different records (one violation per acknowledged
    batch that reuses offsets, naming the first it collides with)."""
    out: list[Violation] = []
    first: dict[tuple[str, int, int], tuple[bytes, int]] = {}  # (topic id, partition, offset) -> (value, ack time)
    for ack in sorted(obs.acks, key=lambda a: a.time_ms):
        clashes: list[tuple[int, bytes, int]] = []  # (offset, the value acknowledged there before, when)
        for i, value in enumerate(ack.values):
            at = (ack.topic_id, ack.partition, ack.first_offset + i)
            earlier, when = first.setdefault(at, (value, ack.time_ms))
            if earlier != value:
                clashes.append((at[2], earlier, when))
        if not clashes:
            continue
        offset, earlier, when = clashes[0]
        value = ack.values[offset - ack.first_offset]
        out.append(
            Violation(
                "8",
                f"{len(clashes)} offset(s) of {ack.topic_id}-{ack.partition} acknowledged twice, from {offset}: "
                f"{_short(earlier)} at {when}, then {_short(value)} at {ack.time_ms}",
                ack.topic_id,
                tuple(f"offset {o}: acknowledged {_short(v)} at {t}" for o, v, t in clashes[:5]),
            )
        )
    return out


def _short(value: bytes | None) -> str:
    if value is None:
        return "a null value"
    return repr(value[:32]) + ("..." if len(value) > 32 else "")


def check_reads(obs: Observation) -> list[Violation]:
    """Promise 8 as a reader saw it during the run: a record read at an offset is the one acknowledged there (an
    offset handed out twice, or a read of a record that was later replaced, shows as another value)."""
    acked: dict[tuple[str, int, int], bytes] = {}
    for ack in obs.acks:
        for i, value in enumerate(ack.values):
            acked.setdefault((ack.topic_id, ack.partition, ack.first_offset + i), value)
    out: list[Violation] = []
    seen: set[tuple[str, int, int]] = set()
    for r in obs.reads:
        key = (r.topic_id, r.partition, r.offset)
        want = acked.get(key)
        if want is None or r.value == want or key in seen:
            continue
        seen.add(key)
        out.append(
            Violation(
                "8",
                f"{r.topic_id}-{r.partition}@{r.offset} read at {r.time_ms} as {_short(r.value)}, acknowledged as "
                f"{_short(want)}",
                r.topic_id,
            )
        )
    return out


def check_converged(obs: Observation) -> list[Violation]:
    return [Violation("8", f"did not converge: {what}") for what in obs.unconverged]


def check_log_complete(obs: Observation) -> list[Violation]:
    """The checks above need the whole log: a gap would let a violation pass unseen, so it is reported, as an
    observation the run could not complete (:data:`INCOMPLETE`), not as a violation of the cluster's."""
    return [
        Violation(INCOMPLETE, f"metadata log offsets {a}..{b} were never read (a snapshot let them go first)")
        for a, b in obs.log_gaps
    ]


CHECKS = (
    check_log_complete,
    check_epochs,
    check_acks_before_disabled,
    check_copy_fence,
    check_delete_policy,
    check_prefixes,
    check_controller_epochs,
    check_deposed_refused,
    check_records,
    check_offsets_unique,
    check_reads,
    check_converged,
)


def check(obs: Observation) -> list[Violation]:
    return [v for c in CHECKS for v in c(obs)]


def excerpt(history: Sequence[Mapping[str, Any]], violation: Violation, *, limit: int = 30) -> list[Mapping[str, Any]]:
    """The shortest part of the history that shows ``violation``: the events naming its topic id (or, with none,
    every fault and failed operation), the last ``limit`` of them."""
    if violation.topic_id is not None:
        tid = violation.topic_id
        names = {e.get("topic") for e in history if e.get("topic_id") == tid} - {None}
        hits = [e for e in history if e.get("topic_id") == tid or (e.get("topic") in names and e.get("type") == "op")]
    else:
        hits = [e for e in history if e.get("type") in ("fault", "heal") or e.get("ok") is False]
    return hits[-limit:]
