"""Client traffic that runs beside a chaos run's workload, through every fault: produces and reads, judged by the
checker as every other acknowledged record is.

:class:`Traffic` is a thread that, every :data:`INTERVAL_S` while the run drives its operations, picks a live topic
of the metadata log read so far (its name, id and partitions) and either produces a small acks=all batch to one of
its partitions or reads one partition from its log start. Every batch acknowledged is kept as an
:class:`~chaos.checker.Ack` beside the workload's own (so promise 8 holds it readable until a policy removes it),
and every record read is kept as a :class:`~chaos.checker.Read`: the checker holds a record read at an offset to
the value acknowledged there (an offset handed out twice shows as two values). A read, and a produce's
acknowledged batches, count only when the topic's name named the same topic id before and after it (a topic deleted
and created again under its name meanwhile is another topic, and a produce by name may have gone to it: such batches
are counted as ``topic unsure``, not judged).

Invariants: values are unique (``traffic:<seed>:<n>:<i>``) and a function of the seed and a counter, never stored;
a request that fails or times out is counted, not an error of the run (faults make them fail); the thread stops
within one request timeout of :meth:`Traffic.stop`; it never touches a topic outside the scenario's names.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from chaos import checker as ck
from chaos.history import History
from chaos.log_tail import LogTail
from chaos.operations import ack_recorder
from chaos.rig import Rig
from orchestrator.clock import wall_ms
from orchestrator.errors import TieredError

INTERVAL_S = 0.3
REQUEST_TIMEOUT_S = 5.0
RECORDS_PER_BATCH = 3
MAX_READ = 200  # records per read: a partition's head is enough to see an offset reused
PRODUCED, FAILED, READ = "traffic batches acked", "traffic requests failed", "traffic records read"
UNATTRIBUTED = "traffic batches acked, topic unsure"
ROWS = (PRODUCED, UNATTRIBUTED, READ, FAILED)


class LiveTopics:
    """The topics of ``names`` the metadata log created and did not remove, kept up to date from the records read so
    far: each :meth:`update` folds only the records added since the last one (the log only grows)."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names
        self._by_id: dict[str, tuple[str, set[int]]] = {}  # topic id -> (name, partitions)
        self._folded = 0  # how many records of the log are folded in

    def update(self, log: Sequence[ck.LogRecord]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """name -> (topic id, partitions) of every live topic with a partition, once ``log`` is folded in."""
        new = log[self._folded :]  # one slice: the tail thread may append meanwhile
        self._folded += len(new)
        for r in new:
            if r.name == "TopicRecord" and r.fields["name"] in self._names:
                self._by_id[str(r.fields["topic_id"])] = (r.fields["name"], set())
            elif r.name == "PartitionRecord" and str(r.fields["topic_id"]) in self._by_id:
                self._by_id[str(r.fields["topic_id"])][1].add(int(r.fields["partition_id"]))
            elif r.name == "RemoveTopicRecord":
                self._by_id.pop(str(r.fields["topic_id"]), None)
        return {name: (tid, tuple(sorted(parts))) for tid, (name, parts) in self._by_id.items() if parts}


def live_topics(log: Sequence[ck.LogRecord], names: frozenset[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (topic id, partitions) of every topic of ``names`` the log created and did not remove."""
    return LiveTopics(names).update(log)


class Traffic:
    def __init__(self, rig: Rig, history: History, tail: LogTail, acks: list[ck.Ack]) -> None:
        self.rig = rig
        self.history = history
        self.tail = tail
        self.acks = acks  # the run's list: the workload's acknowledged batches and these
        self.reads: list[ck.Read] = []
        self.counts: Counter[str] = Counter(dict.fromkeys(ROWS, 0))
        self._rng = random.Random(rig.scenario.seed)
        self._topics = LiveTopics(frozenset(rig.scenario.topic_names))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-traffic", daemon=True)
        self._n = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=REQUEST_TIMEOUT_S * 3)

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            topics = self._topics.update(self.tail.records)
            if not topics:
                continue
            name = self._rng.choice(sorted(topics))
            tid, partitions = topics[name]
            partition = self._rng.choice(partitions)
            try:
                if self._rng.random() < 0.6:
                    self._produce(name, tid, partition)
                else:
                    self._read(name, tid, partition)
            except (TieredError, OSError, TimeoutError):
                self.counts[FAILED] += 1

    def _produce(self, name: str, tid: str, partition: int) -> None:
        self._n += 1
        values = [f"traffic:{self.rig.scenario.seed}:{self._n}:{i}".encode() for i in range(RECORDS_PER_BATCH)]
        # kept (by _keep) under the id the name had before and after the produce: the partition it named is that one's
        record = ack_recorder(self.acks, self.history, values, index=-1, topic=name, tid=tid, partition=partition)

        answered: list[tuple[int, int]] = []  # (base offset, records) of each batch acknowledged

        async def produce(c: Any) -> None:
            if str((await c.topic(name))["topic_id"]) != tid:
                return  # deleted and created again since the log was read: not the topic picked
            try:
                await c.produce(name, values, partition=partition, on_ack=lambda b, n: answered.append((b, n)))
            finally:
                if answered:
                    await self._keep(c, name, tid, answered, record)

        self.rig.call(produce, timeout_s=REQUEST_TIMEOUT_S)

    async def _keep(
        self, c: Any, name: str, tid: str, answered: list[tuple[int, int]], record: Callable[[int, int], None]
    ) -> None:
        """Keep the acknowledged batches as acknowledged by ``tid`` if the name still names it: it did before the
        produce too, and a deleted topic id never comes back, so the produce went to it. If the name moved (the topic
        was deleted and created again meanwhile) or cannot be looked up, the batches may be the new topic's: they
        are counted under :data:`UNATTRIBUTED`, not judged."""
        try:
            same = str((await c.topic(name))["topic_id"]) == tid
        except (TieredError, OSError, TimeoutError):
            same = False
        for base, records in answered:
            if same:
                record(base, records)
            self.counts[PRODUCED if same else UNATTRIBUTED] += 1

    def _read(self, name: str, tid: str, partition: int) -> None:
        async def read(c: Any) -> list[tuple[int, bytes | None]]:
            if str((await c.topic(name))["topic_id"]) != tid:
                return []
            got = [(r.offset, r.value) async for r in c.consume(name, partition, max_records=MAX_READ)]
            if str((await c.topic(name))["topic_id"]) != tid:
                return []  # the name moved to another topic during the read: what was read is not judged
            return got

        records = self.rig.call(read, timeout_s=REQUEST_TIMEOUT_S)
        at = wall_ms()
        self.reads.extend(ck.Read(tid, partition, offset, value, at) for offset, value in records)
        self.counts[READ] += len(records)
