"""A broker's tiering round: roll, copy, local retention and remote expiry for every partition it leads, and local
retention for those it follows (a follower's local log start follows what the leader copied).

Invariants:
* Each partition's pass fails alone: its failure goes to ``report`` (the agent logs it and backs the partition off
  on its own :class:`~orchestrator.supervision.RetryBackoff`, which this round reads to skip a partition not due), and
  the other partitions go on.
* The roll and local retention run under the broker's log lock; the copy and remote expiry outside it, so an upload
  or a delete waiting on a slow S3 (or an RLMM write waiting on the controller) holds up no produce, fetch or open of
  any partition (they need the lock).
* Each step runs for a chunk of :data:`TIERING_CHUNK` partitions in ONE worker-thread hop, each partition's steps
  still in order: a hop costs about 80 us of CPU, and one per step per partition made an idle broker of 4,000
  partitions spend over a CPU second a round on hops alone.
* A partition whose inputs did not change since its last pass that ended well is passed only every
  ``idle_rounds`` rounds (:mod:`orchestrator.broker.idle_partitions`): at 20,000 idle partitions a broker spent a
  CPU second every round finding nothing to do.
* What a topic's tiering state and configs add to a partition's fingerprint counts only what can make work for a pass:
  the epoch it was last enabled at (:func:`copy_generation`) and its configs other than the tiering keys (which the
  state mirrors). So a bulk disablement, which gives every topic a new image and new configs, makes no partition due:
  its passes have nothing to do at once (copies are fenced by the handler; local retention, then by the topic's own
  retention, and expiry go by the clock), and under the delete policy the RLMM version moves. A (re-)enable moves the
  generation: due at once.
* The RLMM is refreshed once per round, not once per partition.
* ``on_round`` hears each round that ran to its end, with how many partition passes it ran (the broker's
  ``tieredctl_tiering_rounds_total`` and ``tieredctl_tiering_partition_passes_total``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from orchestrator.broker.data_plane import DataPlane
from orchestrator.broker.hosted_logs import split_by_leadership
from orchestrator.broker.idle_partitions import IdlePartitions
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.partition_dirs import PartitionKey
from orchestrator.broker.remote_log_manager import CopyResult, RemoteLogManager
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import TieredState
from orchestrator.metadata.topic_configs import TIERING_KEYS
from orchestrator.supervision import RetryBackoff

# Partitions per worker-thread hop (:meth:`TieringRound.passes`): the log lock is held for this many partitions'
# rolls, or local retentions, at a time.
TIERING_CHUNK = 64


def copy_generation(tiered_state: TieredState, tiered_epoch: int) -> int:
    """The tiered epoch a topic was last enabled at (-1: never): its own epoch while ENABLED, the one before it while
    DISABLING or DISABLED (leaving ENABLED bumps the epoch by exactly one, and a disablement completes at the epoch
    it bumped to: ``controller/tiering.py``). It moves when copying is turned on, never when it is turned off."""
    return tiered_epoch if tiered_state == TieredState.ENABLED else tiered_epoch - 1


def _each(
    keys: list[PartitionKey], step: Callable[[PartitionKey], object], failed: dict[PartitionKey, Exception]
) -> None:
    """``step`` for each of ``keys`` not failed yet, in a worker thread; what one raises is kept in ``failed`` (the
    caller awaits the hop, so nothing else touches ``failed`` meanwhile) and the others go on."""
    for key in keys:
        if key in failed:
            continue
        try:
            step(key)
        except Exception as exc:
            failed[key] = exc


class TieringRound:
    def __init__(
        self,
        *,
        broker_id: int,
        rlm: RemoteLogManager,
        logs: Mapping[PartitionKey, PartitionLog],
        log_lock: asyncio.Lock,
        image: Callable[[], MetadataImage],
        data_plane: DataPlane,
        retry: RetryBackoff[PartitionKey],
        idle_rounds: int,
        clock: Callable[[], float],
        report: Callable[[PartitionKey, Exception | None], None],
        on_round: Callable[[int], None] = lambda _passes: None,
    ) -> None:
        """``logs`` is the broker's own map of open logs (it changes under ``log_lock``); ``report`` is told each
        partition's outcome (None: its pass ended well)."""
        self.broker_id = broker_id
        self.rlm = rlm
        self._logs = logs
        self._log_lock = log_lock
        self._image = image
        self._data_plane = data_plane
        self._retry = retry
        self._idle: IdlePartitions[PartitionKey] = IdlePartitions(idle_rounds)
        self._clock = clock
        self._report = report
        # topic id -> (its image, its configs, what they add to a fingerprint): worked out once per change of either
        self._topic_parts: dict[Uuid, tuple[TopicImage, Mapping[str, str], tuple[object, ...]]] = {}
        self._on_round = on_round

    async def run(self) -> None:
        """One round over every open log."""
        logs, retry, idle = self._logs, self._retry, self._idle
        led, followed = split_by_leadership(list(logs), self._image(), self.broker_id)
        retry.forget_all_but(set(logs))
        idle.forget_all_but(logs)
        self.rlm.retain_copy_lag(led)
        if not logs:
            self._on_round(0)
            return
        await asyncio.to_thread(self.rlm.rlmm.refresh)
        idle.next_round()
        image = self._image()
        if len(self._topic_parts) > len(image.topics):  # deleted topics' entries go
            self._topic_parts = {t: v for t, v in self._topic_parts.items() if t in image.topics}
        ran = 0
        for passes, keys, leading in ((self.passes, led, True), (self.follower_passes, followed, False)):
            inputs: dict[PartitionKey, tuple[object, ...]] = {}
            for key in keys:
                if retry.due(key, now=self._clock()):
                    read = self._inputs(image, key, leading=leading)
                    if idle.due(key, read):
                        inputs[key] = read
            due = list(inputs)
            ran += len(due)
            for at in range(0, len(due), TIERING_CHUNK):
                for key, failure in (await passes(due[at : at + TIERING_CHUNK])).items():
                    self._report(key, failure)
                    if failure is None:
                        idle.passed(key, inputs[key])
                    else:
                        idle.failed(key)
        self._on_round(ran)

    def _inputs(self, image: MetadataImage, key: PartitionKey, *, leading: bool) -> tuple[object, ...]:
        """What a pass of ``key`` reads (:mod:`orchestrator.broker.idle_partitions`), as it is now: equal to an
        earlier reading when nothing the pass acts on changed since (the clock aside)."""
        plog, topic = self._logs.get(key), image.topics.get(key[0])
        if plog is None or topic is None:
            return (object(),)  # closed, or its topic deleted: the pass looks (and finds nothing to do)
        try:
            high_watermark = self._data_plane.high_watermark(topic, key[1], plog) if leading else -1
        except Exception:  # not read: the pass reads it again, and fails there (reported) if it must
            return (object(),)
        return (
            topic.partitions.get(key[1]),
            self._topic_part(image, topic),
            plog.tiering_inputs(),
            self.rlm.rlmm.partition_version(*key),
            high_watermark,
        )

    def _topic_part(self, image: MetadataImage, topic: TopicImage) -> tuple[object, ...]:
        """What ``topic``'s state and configs add to its partitions' fingerprints (module docstring): the epoch it was
        last enabled at, and its configs but the tiering keys."""
        configs = image.topic_configs(topic.name)
        known = self._topic_parts.get(topic.topic_id)
        if known is not None and known[0] is topic and known[1] is configs:
            return known[2]
        part = (
            copy_generation(topic.tiered_state, topic.tiered_epoch),
            tuple(sorted((k, v) for k, v in configs.items() if k not in TIERING_KEYS)),
        )
        self._topic_parts[topic.topic_id] = (topic, configs, part)
        return part

    async def follower_passes(self, keys: list[PartitionKey]) -> dict[PartitionKey, Exception | None]:
        """Local retention of each of ``keys`` still open, under the log lock, in one hop; what each one raised
        (None: done)."""
        failed: dict[PartitionKey, Exception] = {}
        rlm = self.rlm
        async with self._log_lock:
            still_open = [key for key in keys if key in self._logs]
            await asyncio.to_thread(_each, still_open, lambda k: rlm.apply_local_retention(*k, refresh=False), failed)
        return {key: failed.get(key) for key in keys}

    async def passes(self, keys: list[PartitionKey]) -> dict[PartitionKey, Exception | None]:
        """Each of ``keys``' pass (:meth:`RemoteLogManager.tiering_pass`'s steps), and what failed it (None: it
        ended well, or its log was closed since the round began). A partition whose step raises leaves the pass
        there; a failed copy (:attr:`CopyResult.failure`) still has its local retention and expiry, and fails the
        pass at the end. A never-tiered topic's partition has only the roll and local retention
        (:meth:`RemoteLogManager.local_pass`)."""
        failed: dict[PartitionKey, Exception] = {}
        rlm, logs = self.rlm, self._logs
        high_watermarks: dict[PartitionKey, int] = {}
        async with self._log_lock:
            image = self._image()
            pending: list[PartitionKey] = []
            local: set[PartitionKey] = set()
            for key in keys:
                if key not in logs or (topic := image.topics.get(key[0])) is None:
                    continue  # closed since the round began: its topic was deleted
                if topic.tiered_state == TieredState.NOT_TIERED:  # nothing to copy or expire, ever
                    local.add(key)
                pending.append(key)

            def roll(key: PartitionKey) -> None:
                if key in local:
                    rlm.local_pass(*key)
                else:
                    logs[key].maybe_roll_by_time()

            await asyncio.to_thread(_each, pending, roll, failed)
            for key in pending:
                if key in failed or key in local:
                    continue
                try:
                    high_watermarks[key] = self._data_plane.high_watermark(image.topics[key[0]], key[1], logs[key])
                except Exception as exc:
                    failed[key] = exc
        copies: dict[PartitionKey, CopyResult] = {}

        def copy(key: PartitionKey) -> None:
            copies[key] = rlm.copy_partition(*key, refresh=False, high_watermark=high_watermarks[key])

        await asyncio.to_thread(_each, list(high_watermarks), copy, failed)
        async with self._log_lock:
            retain = [key for key in copies if key in logs]
            await asyncio.to_thread(_each, retain, lambda k: rlm.apply_local_retention(*k, refresh=False), failed)
        # Remote expiry deletes objects and writes RLMM records (S3 and the controller): outside the lock, like the
        # copy; the log's own lock orders its log start move with the partition's reads and appends.
        expire = [key for key in copies if key in logs and key not in failed]
        await asyncio.to_thread(_each, expire, lambda k: rlm.expire_partition(*k, refresh=False), failed)
        for key, copied in copies.items():
            if copied.failure is not None:
                failed.setdefault(key, copied.failure)
        return {key: failed.get(key) for key in keys}
