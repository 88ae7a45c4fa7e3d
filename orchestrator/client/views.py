"""The client's views of DescribeTieredState: a tiered topic's state and disablement, and a deleted topic's remote
data still being deleted, read from the controller's answer by pure functions.

Disabling a topic and deleting a deleted topic's remote data are the same machine (a broker is asked, and asked
again with backoff until it answers; a fenced broker waits): so a broker that still owes either job is one view,
:class:`BrokerProgressView`, its attempts, last error, next attempt, fencing and stall as the controller reports
them. A deletion's entry names the partitions given to the broker and carries no last-attempt time, fencing, stall
or count of attempts without progress: those read as never, not fenced, not stalled and 0.

Invariant: what ``tiering status --output json`` prints from these views is a user contract (README, "tiering
status --output json", and topic deletion's DELETED entries). The keys each list prints, and their order, are
spelt out below (``*_KEYS``) rather than derived from the fields, so that a field added to a view never changes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.client.answers import check
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.protocol import messages as m

# A broker pending a disablement, in a topic's ``pending_brokers``.
PENDING_BROKER_KEYS = (
    "broker_id",
    "attempts",
    "last_error",
    "last_attempt_ms",
    "fenced",
    "stalled",
    "next_attempt_ms",
    "attempts_without_progress",
)
# A broker deleting a deleted topic's remote data: in its ``pending_brokers``, and in ``remote_deletion.brokers``.
DELETION_PENDING_KEYS = ("broker_id", "attempts", "last_error", "fenced")
DELETING_BROKER_KEYS = ("broker_id", "partitions", "attempts", "last_error", "next_attempt_ms")


@dataclass(frozen=True)
class BrokerProgressView:
    """A broker that still owes a remote-data job (a topic's disablement, or a deleted topic's partitions), as the
    controller's queue reports it."""

    broker_id: int
    attempts: int  # requests sent for this job (a disablement: for this epoch)
    last_error: str | None  # the last error it answered (or the request's failure) with its cause, until progress
    next_attempt_ms: int = -1  # when it is asked next (ms since the epoch); -1 while in flight or fenced
    last_attempt_ms: int = -1  # ms since the epoch, -1 never
    fenced: bool = False
    stalled: bool = False
    attempts_without_progress: int = 0  # consecutive attempts that made no progress: the backoff's attempt number
    partitions: tuple[int, ...] = ()  # a deletion: the partitions given to this broker; a disablement: ()

    def as_json(self, keys: Sequence[str]) -> dict[str, Any]:
        """The fields named by ``keys`` (one of the ``*_KEYS`` contracts), in that order."""
        return {key: _plain(getattr(self, key)) for key in keys}


@dataclass(frozen=True)
class OwedPartitionView:
    """A partition of a delete-policy topic whose remote segments are not all deleted in the RLMM yet."""

    partition: int
    leader: int  # -1: no live leader
    assigned_broker: int  # who deletes them: the leader, or the live broker a leaderless partition was given; -1 none
    segments_remaining: int
    bytes_remaining: int

    @property
    def leaderless(self) -> bool:
        return self.leader < 0 or self.leader != self.assigned_broker

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "leader": self.leader,
            "assigned_broker": self.assigned_broker,
            "segments_remaining": self.segments_remaining,
            "bytes_remaining": self.bytes_remaining,
            "leaderless": self.leaderless,
        }


@dataclass(frozen=True)
class PartitionCopyView:
    """A partition whose copy to remote storage is in flight or failed its last pass, as its leader last reported."""

    partition: int
    broker_id: int
    in_flight_since_ms: int = -1  # ms since the epoch, -1: no upload in flight
    in_flight: str | None = None  # the segment and the object it goes to
    stalled: bool = False  # in flight for the broker's copy stall threshold or longer
    last_error: str | None = None  # what failed the last copy pass, until a pass ends without an error
    last_error_ms: int = -1
    failed_passes: int = 0

    def cause(self, now_ms: int) -> str:
        """What holds the copy up, in words: the upload in flight and for how long, then the last pass's error."""
        parts = []
        if self.in_flight_since_ms >= 0:
            seconds = max(0, now_ms - self.in_flight_since_ms) // 1000
            parts.append(
                f"{self.in_flight or 'an upload'} in flight for {seconds} s{' (STALLED)' if self.stalled else ''}"
            )
        if self.last_error:
            parts.append(f"last copy pass failed ({_passes(self.failed_passes)} in a row): {self.last_error}")
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "broker_id": self.broker_id,
            "in_flight": self.in_flight,
            "in_flight_since_ms": self.in_flight_since_ms,
            "stalled": self.stalled,
            "last_error": self.last_error,
            "last_error_ms": self.last_error_ms,
            "failed_passes": self.failed_passes,
        }


def _passes(n: int) -> str:
    return f"{n} pass{'es' if n != 1 else ''}"


@dataclass(frozen=True)
class TieringStatus:
    topic: str
    topic_id: Uuid
    state: TieredState
    tiered_epoch: int
    policy: DisablePolicy
    partition_count: int
    pending_brokers: tuple[BrokerProgressView, ...]
    acknowledged_brokers: int = 0
    segments_deleted: int = 0
    segments_remaining: int = 0
    owed_partitions: tuple[OwedPartitionView, ...] = ()  # delete policy: partitions whose remote data is still owed
    copies: tuple[PartitionCopyView, ...] = ()  # partitions whose copy to remote storage is in flight or failing

    @property
    def required_brokers(self) -> int:
        """The brokers that owe an acknowledgement of this epoch: those that gave it and those still pending."""
        return self.acknowledged_brokers + len(self.pending_brokers)

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "topic_id": str(self.topic_id),
            "state": self.state.name,
            "tiered_epoch": self.tiered_epoch,
            "policy": self.policy.name.lower() if self.policy != DisablePolicy.NONE else None,
            "partitions": self.partition_count,
            "acknowledged_brokers": self.acknowledged_brokers,
            "segments_deleted": self.segments_deleted,
            "segments_remaining": self.segments_remaining,
            "pending_brokers": [p.as_json(PENDING_BROKER_KEYS) for p in self.pending_brokers],
            "owed_partitions": [o.as_json() for o in self.owed_partitions],
            "copies": [c.as_json() for c in self.copies],
        }


@dataclass(frozen=True)
class RemoteDeletionStatus:
    """A deleted topic whose remote data is still being deleted (KIP-405 partition deletion)."""

    topic: str
    topic_id: Uuid
    partitions_remaining: tuple[int, ...]
    segments_remaining: int
    bytes_remaining: int
    brokers: tuple[BrokerProgressView, ...]

    def as_json(self) -> dict[str, Any]:
        """An entry of ``tiering status --output json`` beside the topics': state DELETED, its brokers as pending."""
        return {
            "topic": self.topic,
            "topic_id": str(self.topic_id),
            "state": "DELETED",
            "tiered_epoch": None,
            "policy": None,
            "pending_brokers": [b.as_json(DELETION_PENDING_KEYS) for b in self.brokers],
            "remote_deletion": {
                "partitions_remaining": list(self.partitions_remaining),
                "segments_remaining": self.segments_remaining,
                "bytes_remaining": self.bytes_remaining,
                "brokers": [b.as_json(DELETING_BROKER_KEYS) for b in self.brokers],
            },
        }


def tiering_statuses(resp: m.DescribeTieredStateResponse) -> list[TieringStatus]:
    """The topics of a DescribeTieredState answer; a topic's error is raised (UNKNOWN_TOPIC_OR_PARTITION...)."""
    check(resp["error_code"], None, "describing tiered state")
    out = []
    for t in resp["topics"]:
        check(t["error_code"], t.get("error_message"), f"topic '{t['name']}'")
        status = TieringStatus(
            topic=t["name"],
            topic_id=t["topic_id"],
            state=TieredState(t["tiered_state"]),
            tiered_epoch=t["tiered_epoch"],
            policy=DisablePolicy(t["policy"]),
            partition_count=t["partition_count"],
            pending_brokers=tuple(broker_progress(p) for p in t["pending_brokers"]),
            acknowledged_brokers=t["acknowledged_brokers"],
            segments_deleted=t["segments_deleted"],
            segments_remaining=t["segments_remaining"],
            owed_partitions=tuple(owed_partition(o) for o in t.get("owed_partitions") or ()),
            copies=tuple(partition_copy(c) for c in t.get("copies") or ()),
        )
        out.append(status)
    return out


def remote_deletions(resp: m.DescribeTieredStateResponse) -> list[RemoteDeletionStatus]:
    """The deleted topics of a DescribeTieredState answer whose remote data is still being deleted."""
    check(resp["error_code"], None, "describing tiered state")
    return [
        RemoteDeletionStatus(
            topic=d["name"],
            topic_id=d["topic_id"],
            partitions_remaining=tuple(d["partitions_remaining"]),
            segments_remaining=d["segments_remaining"],
            bytes_remaining=d["bytes_remaining"],
            brokers=tuple(broker_progress(b) for b in d["brokers"]),
        )
        for d in resp.get("deleting_topics") or ()
    ]


def broker_progress(entry: Mapping[str, Any]) -> BrokerProgressView:
    """A pending broker of a topic, or a broker deleting a deleted topic's partitions: the fields a deletion's entry
    does not carry read as the view's defaults."""
    return BrokerProgressView(
        broker_id=entry["broker_id"],
        attempts=entry["attempts"],
        last_error=entry["last_error"],
        next_attempt_ms=entry["next_attempt_ms"],
        last_attempt_ms=entry.get("last_attempt_ms", -1),
        fenced=entry.get("fenced", False),
        stalled=entry.get("stalled", False),
        attempts_without_progress=entry.get("attempts_without_progress", 0),
        partitions=tuple(entry.get("partitions", ())),
    )


def owed_partition(entry: m.OwedPartition) -> OwedPartitionView:
    return OwedPartitionView(
        partition=entry["partition_id"],
        leader=entry["leader"],
        assigned_broker=entry["assigned_broker"],
        segments_remaining=entry["segments_remaining"],
        bytes_remaining=entry["bytes_remaining"],
    )


def _plain(value: Any) -> Any:
    """A tuple as the list JSON prints it; anything else as it is."""
    return list(value) if isinstance(value, tuple) else value


def partition_copy(entry: m.PartitionCopy) -> PartitionCopyView:
    return PartitionCopyView(
        partition=entry["partition_id"],
        broker_id=entry["broker_id"],
        in_flight_since_ms=entry["in_flight_since_ms"],
        in_flight=entry["in_flight"],
        stalled=entry["stalled"],
        last_error=entry["last_error"],
        last_error_ms=entry["last_error_ms"],
        failed_passes=entry["failed_passes"],
    )
