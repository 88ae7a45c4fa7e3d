"""What a partition's leader knows of its followers, and the high watermark it derives (Kafka's replica state and
``Partition.maybeIncrementLeaderHW``). Pure: no I/O, the clock is passed in; used on the event loop only.

A follower tells its leader how far it has the log by the offset it fetches from (a Fetch with its replica id): it
holds every offset below it. From that the leader keeps, per follower and leader term (the partition's leader
epoch), the follower's log end offset and when it was last caught up:

* a fetch at or past the leader's log end offset catches it up now; one at or past the log end offset the leader had
  at the follower's previous fetch catches it up as of that fetch (a follower that keeps pace with a busy producer is
  never exactly at the end when it asks, Kafka's rule for ``lastCaughtUpTimeMs``);
* a new term forgets every follower: what they fetched from the previous leader says nothing of this log.

The high watermark is the offset below which every in-sync replica (the image's ISR, the leader included) has the
log: the least of their log end offsets. It never moves back (a member that has not fetched in this term yet holds
it where it was), never passes the leader's log end offset, and never sits below the log start offset. With the
leader alone in the ISR (replication factor 1, or every follower dropped out) it is the leader's log end offset.

A follower keeps the high watermark its leader last sent, cut to its own log end offset, so that when it becomes
leader it starts from there (never from zero, never past what it holds).

Invariants: per partition the high watermark only grows; it is at most the log end offset given with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.ids import Uuid

PartitionKey = tuple[Uuid, int]


@dataclass(frozen=True, slots=True)
class FollowerState:
    log_end_offset: int
    caught_up_ms: int  # -1: never caught up in this term
    last_fetch_ms: int
    leader_end_at_last_fetch: int


@dataclass(slots=True)
class _Partition:
    leader_epoch: int
    high_watermark: int
    followers: dict[int, FollowerState]


class ReplicaStates:
    """The followers and high watermark of each partition this broker leads or follows."""

    def __init__(self) -> None:
        self._partitions: dict[PartitionKey, _Partition] = {}

    def _term(self, key: PartitionKey, leader_epoch: int) -> _Partition:
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = _Partition(leader_epoch, -1, {})
        elif part.leader_epoch != leader_epoch:
            part.leader_epoch = leader_epoch
            part.followers = {}
        return part

    def follower_fetched(
        self, key: PartitionKey, *, leader_epoch: int, follower: int, fetch_offset: int, leader_end: int, now_ms: int
    ) -> FollowerState:
        """A follower's fetch at ``fetch_offset`` reached the leader, whose log ends at ``leader_end``."""
        part = self._term(key, leader_epoch)
        before = part.followers.get(follower)
        caught_up = before.caught_up_ms if before is not None else -1
        if fetch_offset >= leader_end:
            caught_up = now_ms
        elif before is not None and fetch_offset >= before.leader_end_at_last_fetch:
            caught_up = max(caught_up, before.last_fetch_ms)
        state = FollowerState(fetch_offset, caught_up, now_ms, leader_end)
        part.followers[follower] = state
        return state

    def high_watermark(
        self,
        key: PartitionKey,
        *,
        leader_epoch: int,
        leader: int,
        isr: Sequence[int],
        leader_end: int,
        log_start: int,
    ) -> int:
        """The partition's high watermark as its leader sees it now (moved forward if the ISR allows)."""
        part = self._term(key, leader_epoch)
        ends = [leader_end]
        for member in isr:
            if member == leader:
                continue
            state = part.followers.get(member)
            ends.append(state.log_end_offset if state is not None else part.high_watermark)
        candidate = min(ends)
        part.high_watermark = min(max(part.high_watermark, candidate, log_start), leader_end)
        return part.high_watermark

    def follower_high_watermark(self, key: PartitionKey, *, leader_epoch: int, leader_hw: int, log_end: int) -> int:
        """Keep what a follower's leader said the high watermark is (cut to the follower's own log end)."""
        part = self._term(key, leader_epoch)
        part.high_watermark = min(max(part.high_watermark, leader_hw), log_end)
        return part.high_watermark

    def truncated(self, key: PartitionKey, log_end: int) -> None:
        """The log was cut back to ``log_end``: the high watermark cannot stay past it."""
        part = self._partitions.get(key)
        if part is not None:
            part.high_watermark = min(part.high_watermark, log_end)

    def stored_high_watermark(self, key: PartitionKey) -> int:
        """The high watermark as last derived or received (-1: none yet)."""
        part = self._partitions.get(key)
        return part.high_watermark if part is not None else -1

    def followers(self, key: PartitionKey) -> dict[int, FollowerState]:
        part = self._partitions.get(key)
        return dict(part.followers) if part is not None else {}

    def out_of_sync(
        self, key: PartitionKey, *, leader: int, isr: Iterable[int], now_ms: int, lag_max_ms: int, since_ms: int
    ) -> list[int]:
        """ISR members other than the leader not caught up within ``lag_max_ms`` (``replica.lag.time.max.ms``).
        A member never heard of in this term counts from ``since_ms`` (when this broker began leading)."""
        part = self._partitions.get(key)
        followers = part.followers if part is not None else {}
        lagging = []
        for member in isr:
            if member == leader:
                continue
            state = followers.get(member)
            caught_up = state.caught_up_ms if state is not None and state.caught_up_ms >= 0 else since_ms
            if now_ms - caught_up > lag_max_ms:
                lagging.append(member)
        return lagging

    def caught_up(
        self,
        key: PartitionKey,
        *,
        replicas: Iterable[int],
        isr: Iterable[int],
        high_watermark: int,
        now_ms: int,
        lag_max_ms: int,
    ) -> list[int]:
        """Replicas outside the ISR whose log reaches the high watermark and that fetched within ``lag_max_ms``:
        ready to join it. A replica heard of no longer (dead, frozen, cut off) never joins on what it fetched before:
        Kafka grows the ISR only on a follower's fetch. Judged on its last fetch alone, a follower that died at the
        high watermark was taken back in each round after it was dropped for its lag, and dropped again, while it
        was not there at all."""
        part = self._partitions.get(key)
        if part is None:
            return []
        members = set(isr)
        return [
            r
            for r in replicas
            if r not in members
            and (state := part.followers.get(r)) is not None
            and state.log_end_offset >= high_watermark
            and now_ms - state.last_fetch_ms <= lag_max_ms
        ]

    def forget_all_but(self, keys: Iterable[PartitionKey]) -> None:
        keep = set(keys)
        for key in [k for k in self._partitions if k not in keep]:
            del self._partitions[key]
