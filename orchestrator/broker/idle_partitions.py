"""Which partitions a tiering round passes: an idle partition is passed every few rounds, not every round.

A tiering pass (roll, copy, local retention, remote expiry) reads a partition's inputs: its log's offsets and
segments, its partition in the image (leader, replicas, ISR, epochs), its topic's tiering state and configs, what
the RLMM holds of it, and, for a partition this broker leads, its high watermark. The caller reads them into a
``fingerprint`` (a tuple, compared with ``==``; image objects are copy-on-write, so an unchanged partition compares
by identity at once), counting of the topic's tiering only what can make work for a pass
(:mod:`orchestrator.broker.tiering_round`: turning copying off does not). A pass that saw a fingerprint and ended
well is recorded with it; the next round passes the partition again only if its fingerprint differs, or
``every_rounds`` rounds went by since its last pass.

What is left for the later rounds is only what the clock alone makes due on an unchanged partition (a roll by
``segment.ms``, retention by time, the clean-up of an abandoned copy) and what turning a topic's tiering off changes
(local retention then goes by the topic's own retention: due by the clock, like any retention). Each waits at most
``every_rounds`` rounds (Kafka checks retention every ``log.retention.check.interval.ms``, five minutes by default).
Anything else a pass acts on changes the fingerprint and is passed the next round.

Invariants:
* A partition never seen, or whose last pass failed (:meth:`IdlePartitions.failed`), is due: a failure is retried
  under the loop's own backoff, never held back here.
* The fingerprint recorded is the one read *before* the pass, so a change made while it ran (an append, the pass's
  own roll or copy) differs from it and is passed the next round.
* Pure bookkeeping: no clock, no I/O; rounds are counted by the caller (:meth:`IdlePartitions.next_round`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_IDLE_ROUNDS = 10


class IdlePartitions(Generic[K]):
    def __init__(self, every_rounds: int = DEFAULT_IDLE_ROUNDS) -> None:
        if every_rounds < 1:
            raise ValueError(f"every_rounds must be >= 1, got {every_rounds}")
        self.every_rounds = every_rounds
        self.round = 0
        self._passed: dict[K, tuple[tuple[object, ...], int]] = {}  # key -> (fingerprint, round of its pass)

    def next_round(self) -> int:
        self.round += 1
        return self.round

    def due(self, key: K, fingerprint: tuple[object, ...]) -> bool:
        """Whether this round passes ``key``, whose inputs read ``fingerprint`` now."""
        last = self._passed.get(key)
        return last is None or self.round - last[1] >= self.every_rounds or last[0] != fingerprint

    def passed(self, key: K, fingerprint: tuple[object, ...]) -> None:
        """``key``'s pass this round, which read ``fingerprint`` before it ran, ended well."""
        self._passed[key] = (fingerprint, self.round)

    def failed(self, key: K) -> None:
        """``key``'s pass failed (or was not run to its end): it is due again whatever its fingerprint."""
        self._passed.pop(key, None)

    def forget_all_but(self, keys: Iterable[K]) -> None:
        keep = set(keys)
        for key in [k for k in self._passed if k not in keep]:
            del self._passed[key]
