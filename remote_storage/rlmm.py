"""The remote log metadata manager (RLMM): segment states kept in the metadata store, folded in memory.

Records are Kafka's RLMM records plus ``tieredEpoch`` (KIP-950; our tagged field 10950, see
``orchestrator/metadata/records.py``), made at version 0: RemoteLogSegmentMetadataRecord starts a
segment at COPY_SEGMENT_STARTED; RemoteLogSegmentMetadataUpdateRecord moves it to COPY_SEGMENT_FINISHED,
DELETE_SEGMENT_STARTED or DELETE_SEGMENT_FINISHED; RemotePartitionDeleteMetadataRecord marks a partition's
remote data deleted. The store appends them atomically per call and applies the copy fence (ARCHITECTURE §4
invariant 3): a copy record whose tiered epoch is not the topic's ENABLED epoch is refused with
StaleTieredEpoch, and nothing of that call is written.

The fold (:class:`RlmmFold`) reads records from any :class:`RlmmLog`: the store's RLMM log, or records read from
a Kafka cluster's ``__remote_log_metadata`` (:class:`RecordedRlmm`, the scan's Kafka source), so both are folded
by the same rules; :class:`RemoteLogMetadataManager` is the fold of a store, with the writes. The values it folds
into (:class:`RemoteSegment`, :class:`RemotePartition`) are in :mod:`remote_storage.rlmm_values`, re-exported here.

This manager tails the store from the last offset it folded, so every process (several brokers, the
controller, the scan's export) sees the same states without re-reading the whole RLMM. States only move forward:
STARTED -> FINISHED -> DELETE_STARTED -> DELETE_FINISHED; an update that would move a segment backwards is
refused before it is written. Two writers can still race (two brokers deleting one leaderless partition: each checked
the state before the other appended), so the fold also never moves a segment back or to where it is already: such a
record is moot, and :meth:`RemoteLogMetadataManager.transition` reports only the segments its own records moved. A
segment is thus counted as moved (e.g. deleted, in the metrics) by exactly one writer, the one first in the log.

Custom metadata (Aiven's, :mod:`remote_storage.segment_format.custom_metadata`): the RemoteStorageManager may
return a blob with a copy, which the COPY_SEGMENT_FINISHED record carries as Kafka's ``CustomMetadata`` and which
the fold keeps, raw, as :attr:`RemoteSegment.custom_metadata`. When it records an object prefix or key, the
segment's objects are there, not under the configured prefix: :meth:`RemoteSegment.object_keys` is where every
reader and deleter finds them, and :meth:`RemoteSegment.objects_topic_prefix` the one prefix a delete of them may
touch (the topic's own prefix within the prefix the segment was recorded under).

Partition deletion (KIP-405, a deleted topic's remote data): RemotePartitionDeleteMetadataRecord moves a
partition DELETE_PARTITION_MARKED -> STARTED -> FINISHED, never back. Once a partition is marked, this manager
refuses every copy record of it (COPY_SEGMENT_STARTED or FINISHED: StaleTieredEpoch, nothing written), in addition
to the store's fence, which refuses copy records of a topic id the metadata log no longer has (the controller
writes the topic's removal and its partitions' marks in one store transaction:
:meth:`RlmmFold.partition_delete_records` makes the marks, and the store's ``append`` takes them with the
removal). So a copy in flight when its topic is deleted cannot land; the copier deletes what it uploaded
(``orchestrator/broker/remote_log_manager.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Protocol

from orchestrator.errors import InvalidRequest, StaleTieredEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState, SegmentState, make_record
from orchestrator.metadata.store import LogEntry, MetadataStore
from remote_storage.rlmm_values import RemotePartition as RemotePartition  # the fold's values, importable from here
from remote_storage.rlmm_values import RemoteSegment as RemoteSegment
from remote_storage.rlmm_values import epoch_ends

_ORDER = {
    SegmentState.COPY_SEGMENT_STARTED: 0,
    SegmentState.COPY_SEGMENT_FINISHED: 1,
    SegmentState.DELETE_SEGMENT_STARTED: 2,
    SegmentState.DELETE_SEGMENT_FINISHED: 3,
}


_COPY_STATES = frozenset({SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED})
_PARTITION_ORDER = {
    PartitionDeleteState.DELETE_PARTITION_MARKED: 0,
    PartitionDeleteState.DELETE_PARTITION_STARTED: 1,
    PartitionDeleteState.DELETE_PARTITION_FINISHED: 2,
}


def _segment_id_fields(seg: RemoteSegment) -> dict[str, object]:
    return {
        "topic_id_partition": {"name": seg.topic, "id": seg.topic_id, "partition": seg.partition},
        "id": seg.segment_id,
    }


def copy_started_record(seg: RemoteSegment, *, now_ms: int) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataRecord",
        remote_log_segment_id=_segment_id_fields(seg),
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        broker_id=seg.broker_id,
        max_timestamp_ms=seg.max_timestamp_ms,
        event_timestamp_ms=now_ms,
        segment_leader_epochs=[{"leader_epoch": epoch, "offset": offset} for epoch, offset in seg.epochs],
        segment_size_in_bytes=seg.size_bytes,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_STARTED),
        tiered_epoch=seg.tiered_epoch,
        txn_index_empty=True,  # we serve no transactions: no segment has a transaction index
    )


def update_record(
    seg: RemoteSegment, state: SegmentState, *, broker_id: int, now_ms: int, custom_metadata: bytes | None = None
) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        remote_log_segment_id=_segment_id_fields(seg),
        broker_id=broker_id,
        event_timestamp_ms=now_ms,
        custom_metadata=custom_metadata,
        remote_log_segment_state=int(state),
        tiered_epoch=seg.tiered_epoch,
    )


class RlmmLog(Protocol):
    """Where RLMM records are read from, in order: the store's RLMM log, or records read from elsewhere (Kafka's
    ``__remote_log_metadata``, :class:`RecordedRlmm`)."""

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]: ...


class RecordedRlmm:
    """RLMM records already read (from Kafka's metadata topic: each topic-partition's records in their offset order),
    as an :class:`RlmmLog` numbered from 0 in the order given."""

    def __init__(self, records: Iterable[MetadataRecord]) -> None:
        self._entries = [LogEntry(offset, record) for offset, record in enumerate(records)]

    def read_remote_log_metadata(self, *, topic_id: Uuid | None = None, from_offset: int = 0) -> Iterator[LogEntry]:
        for entry in self._entries[from_offset:]:
            if topic_id is None or _record_topic_id(entry.record) == topic_id:
                yield entry


def _record_topic_id(record: MetadataRecord) -> Uuid:
    f = record.fields
    tip = f["topic_id_partition"] if "topic_id_partition" in f else f["remote_log_segment_id"]["topic_id_partition"]
    topic_id: Uuid = tip["id"]
    return topic_id


class RlmmFold:
    """The segment and partition-delete states folded from an :class:`RlmmLog` (see the module docstring for the
    rules); reading only. :class:`RemoteLogMetadataManager` adds the writes, to the store."""

    def __init__(self, log: RlmmLog) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._next_offset = 0
        self._segments: dict[Uuid, RemoteSegment] = {}
        self._by_partition: dict[tuple[Uuid, int], dict[Uuid, RemoteSegment]] = {}
        self._partition_deletes: dict[tuple[Uuid, int], PartitionDeleteState] = {}
        self._partitions_of: dict[Uuid, set[int]] = {}  # topic id -> partitions with segments or a delete state
        self._topic_names: dict[Uuid, str] = {}
        self._moot: set[int] = set()  # offsets of update records that moved nothing (lost a race; rare)
        self._copied_end: dict[tuple[Uuid, int], int] = {}  # per partition: the highest end of a finished copy
        # per partition and leader epoch: the highest offset of that epoch a finished copy held (Kafka's
        # highestOffsetForEpoch), for a leader to resume in its own epoch lineage
        self._copied_by_epoch: dict[tuple[Uuid, int], dict[int, int]] = {}
        self._changes = 0  # records folded that changed a partition's entries
        self._changed_at: dict[tuple[Uuid, int], int] = {}  # per partition: the count when it last changed

    # -- folding ----------------------------------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The offset after the last RLMM record folded (0: none yet): it moves exactly when the RLMM changed."""
        with self._lock:
            return self._next_offset

    def refresh(self) -> None:
        """Fold every RLMM record appended since the last refresh (by any process)."""
        with self._lock:
            for entry in self._log.read_remote_log_metadata(from_offset=self._next_offset):
                self._fold(entry.offset, entry.record)
                self._next_offset = entry.offset + 1

    def fold_written(self, offsets: Sequence[int], records: Sequence[MetadataRecord]) -> bool:
        """Fold ``records``, just appended one after the other at ``offsets``, as written instead of reading them
        back: what others appended before them (since the last record folded) is read from the log first, up to
        the first of them. Folds nothing when ``offsets`` are not consecutive (a record left out as moot) or were
        folded already (a refresh read them); a refresh then reads whatever is new. Whether they were folded."""
        with self._lock:
            first = offsets[0] if offsets else -1
            if first < self._next_offset or list(offsets) != list(range(first, first + len(offsets))):
                return False
            if first > self._next_offset:
                for entry in self._log.read_remote_log_metadata(from_offset=self._next_offset):
                    if entry.offset >= first:
                        break
                    self._fold(entry.offset, entry.record)
                    self._next_offset = entry.offset + 1
                if self._next_offset != first:  # the log does not hold everything before them (cannot happen)
                    return False
            for offset, record in zip(offsets, records, strict=True):
                self._fold(offset, record)
            self._next_offset = offsets[-1] + 1
            return True

    def _changed(self, key: tuple[Uuid, int]) -> None:
        self._changes += 1
        self._changed_at[key] = self._changes

    def _put(self, seg: RemoteSegment) -> None:
        self._changed((seg.topic_id, seg.partition))
        self._segments[seg.segment_id] = seg
        self._partitions_of.setdefault(seg.topic_id, set()).add(seg.partition)
        self._topic_names.setdefault(seg.topic_id, seg.topic)
        self._by_partition.setdefault((seg.topic_id, seg.partition), {})[seg.segment_id] = seg

    def _fold(self, offset: int, record: MetadataRecord) -> None:
        f = record.fields
        if record.name == "RemoteLogSegmentMetadataRecord":
            sid = f["remote_log_segment_id"]
            tp = sid["topic_id_partition"]
            if sid["id"] in self._segments:  # a repeated copy start (a retried append): never back to STARTED
                self._moot.add(offset)
                return
            self._put(
                RemoteSegment(
                    topic=tp["name"],
                    topic_id=tp["id"],
                    partition=tp["partition"],
                    segment_id=sid["id"],
                    start_offset=f["start_offset"],
                    end_offset=f["end_offset"],
                    max_timestamp_ms=f["max_timestamp_ms"],
                    size_bytes=f["segment_size_in_bytes"],
                    tiered_epoch=f["tiered_epoch"],
                    state=SegmentState(f["remote_log_segment_state"]),
                    broker_id=f["broker_id"],
                    event_timestamp_ms=f["event_timestamp_ms"],
                    leader_epoch=(f["segment_leader_epochs"] or [{"leader_epoch": 0}])[0]["leader_epoch"],
                    leader_epochs=tuple((e["leader_epoch"], e["offset"]) for e in f["segment_leader_epochs"] or ()),
                )
            )
        elif record.name == "RemoteLogSegmentMetadataUpdateRecord":
            seg = self._segments.get(f["remote_log_segment_id"]["id"])
            moved_to = SegmentState(f["remote_log_segment_state"])
            if seg is not None and _ORDER[moved_to] > _ORDER[seg.state]:
                moved = replace(seg, state=moved_to, event_timestamp_ms=f["event_timestamp_ms"])
                if moved_to == SegmentState.COPY_SEGMENT_FINISHED and f["custom_metadata"] is not None:
                    moved = replace(moved, custom_metadata=f["custom_metadata"])
                if moved_to == SegmentState.COPY_SEGMENT_FINISHED:
                    moved = replace(moved, copy_finished=True)
                    key = (seg.topic_id, seg.partition)
                    self._copied_end[key] = max(self._copied_end.get(key, -1), seg.end_offset)
                    by_epoch = self._copied_by_epoch.setdefault(key, {})
                    for epoch, last in epoch_ends(seg):
                        by_epoch[epoch] = max(by_epoch.get(epoch, -1), last)
                self._put(moved)
            else:  # a writer that lost a race, or an unknown segment: states never go back (see the docstring)
                self._moot.add(offset)
        elif record.name == "RemotePartitionDeleteMetadataRecord":
            tp = f["topic_id_partition"]
            key = (tp["id"], tp["partition"])
            state = PartitionDeleteState(f["remote_partition_delete_state"])
            current = self._partition_deletes.get(key)
            if current is None or _PARTITION_ORDER[state] > _PARTITION_ORDER[current]:  # never back (replays too)
                self._partition_deletes[key] = state
                self._changed(key)
            self._partitions_of.setdefault(tp["id"], set()).add(tp["partition"])
            self._topic_names.setdefault(tp["id"], tp["name"])

    def moot(self, records: Sequence[MetadataRecord]) -> list[bool]:
        """Whether each record would move nothing if appended now, after the ones before it: the start of a copy
        the RLMM already has, a segment update to a state the segment is at or past, a partition deletion state
        the partition is at or past (a retried append landing late). Call :meth:`refresh` first."""
        segments: dict[Uuid, SegmentState] = {}
        partitions: dict[tuple[Uuid, int], PartitionDeleteState] = {}
        out = []
        with self._lock:
            for record in records:
                f = record.fields
                moot = False
                if record.name == "RemoteLogSegmentMetadataRecord":
                    sid = f["remote_log_segment_id"]["id"]
                    moot = sid in segments or sid in self._segments
                    if not moot:
                        segments[sid] = SegmentState.COPY_SEGMENT_STARTED
                elif record.name == "RemoteLogSegmentMetadataUpdateRecord":
                    sid = f["remote_log_segment_id"]["id"]
                    known = self._segments.get(sid)
                    current = segments.get(sid, known.state if known is not None else None)
                    state = SegmentState(f["remote_log_segment_state"])
                    moot = current is not None and _ORDER[state] <= _ORDER[current]
                    if not moot:
                        segments[sid] = state
                elif record.name == "RemotePartitionDeleteMetadataRecord":
                    tp = f["topic_id_partition"]
                    key = (tp["id"], tp["partition"])
                    current_p = partitions.get(key, self._partition_deletes.get(key))
                    state_p = PartitionDeleteState(f["remote_partition_delete_state"])
                    moot = current_p is not None and _PARTITION_ORDER[state_p] <= _PARTITION_ORDER[current_p]
                    if not moot:
                        partitions[key] = state_p
                out.append(moot)
        return out

    # -- reading ----------------------------------------------------------------------------------------------

    def segments(
        self, topic_id: Uuid, partition: int | None = None, *, states: Iterable[SegmentState] | None = None
    ) -> list[RemoteSegment]:
        """Segments of a topic id (or one partition), by partition and start offset, optionally by state."""
        wanted = None if states is None else frozenset(states)
        with self._lock:
            if partition is None:
                pools = [v for (tid, _), v in self._by_partition.items() if tid == topic_id]
            else:
                pools = [self._by_partition.get((topic_id, partition), {})]
            out = [s for pool in pools for s in pool.values() if wanted is None or s.state in wanted]
        return sorted(out, key=lambda s: (s.partition, s.start_offset, s.end_offset))

    def live_segments(self, topic_id: Uuid, partition: int | None = None) -> list[RemoteSegment]:
        return self.segments(topic_id, partition, states=[SegmentState.COPY_SEGMENT_FINISHED])

    def partition_version(self, topic_id: Uuid, partition: int) -> int:
        """A number that moves whenever a folded record changes what this RLMM holds of the partition (a segment, its
        state, the partition's delete state), and only then; 0: never changed."""
        with self._lock:
            return self._changed_at.get((topic_id, partition), 0)

    def highest_copied_offset(self, topic_id: Uuid, partition: int) -> int:
        """The end offset of the last finished copy of this partition, or -1: of every segment that reached
        COPY_SEGMENT_FINISHED, deleted since or not. A segment deleted without ever finishing (a failed copy cleaned
        up) does not count, so its offsets are copied again rather than skipped (and then left to local retention
        as if they were remote)."""
        with self._lock:
            return self._copied_end.get((topic_id, partition), -1)

    def highest_copied_offset_in_lineage(
        self, topic_id: Uuid, partition: int, lineage: Sequence[tuple[int, int]], log_end_offset: int
    ) -> int:
        """Where a leader whose log has ``lineage`` (its leader-epoch entries: (epoch, start offset), ascending)
        resumes copying: the highest offset a finished copy holds in the latest of its epochs that any copy has, cut
        to where that epoch ends in its own log (Kafka's findHighestRemoteOffset), so a leader elected without a
        predecessor's divergent tail (unclean election) copies its own records over those offsets rather than skip
        them. With no epoch of the lineage copied (an empty or truncated lineage): :meth:`highest_copied_offset`."""
        with self._lock:
            by_epoch = dict(self._copied_by_epoch.get((topic_id, partition), {}))
            overall = self._copied_end.get((topic_id, partition), -1)
        return highest_in_lineage(by_epoch, lineage, log_end_offset, overall)

    def partition_delete_state(self, topic_id: Uuid, partition: int) -> PartitionDeleteState | None:
        with self._lock:
            return self._partition_deletes.get((topic_id, partition))

    def topic_ids(self) -> set[Uuid]:
        """Every topic id the RLMM has a segment or a partition-delete state of."""
        with self._lock:
            return set(self._partitions_of)

    def topic_name(self, topic_id: Uuid) -> str | None:
        with self._lock:
            return self._topic_names.get(topic_id)

    def deletion_finished(self, topic_id: Uuid) -> bool:
        """Whether every partition of ``topic_id`` the RLMM knows is DELETE_PARTITION_FINISHED (cheap: no segment is
        read). False for a topic id the RLMM does not know."""
        finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
        with self._lock:
            partitions = self._partitions_of.get(topic_id) or set()
            return bool(partitions) and all(self._partition_deletes.get((topic_id, p)) == finished for p in partitions)

    def remote_partitions(self, topic_id: Uuid) -> list[RemotePartition]:
        """Each partition of ``topic_id`` the RLMM knows (a segment or a delete state), by id."""
        with self._lock:
            name = self._topic_names.get(topic_id, "")
            out = []
            for p in sorted(self._partitions_of.get(topic_id) or ()):
                left = [s for s in self._by_partition.get((topic_id, p), {}).values() if not s.deleted]
                out.append(
                    RemotePartition(
                        name,
                        topic_id,
                        p,
                        self._partition_deletes.get((topic_id, p)),
                        len(left),
                        sum(s.size_bytes for s in left),
                    )
                )
            return out

    def partition_delete_records(
        self,
        topic: str,
        topic_id: Uuid,
        partitions: Iterable[int],
        state: PartitionDeleteState,
        *,
        broker_id: int,
        now_ms: int,
    ) -> list[MetadataRecord]:
        """The RemotePartitionDeleteMetadataRecords that move these partitions to ``state``, as far as this fold has
        read: none for a partition already there or further (a partition's deletion state never goes back)."""
        records = []
        for partition in sorted(set(partitions)):
            with self._lock:
                current = self._partition_deletes.get((topic_id, partition))
            if current is not None and _PARTITION_ORDER[current] >= _PARTITION_ORDER[state]:
                continue
            records.append(
                make_record(
                    "RemotePartitionDeleteMetadataRecord",
                    topic_id_partition={"name": topic, "id": topic_id, "partition": partition},
                    broker_id=broker_id,
                    event_timestamp_ms=now_ms,
                    remote_partition_delete_state=int(state),
                )
            )
        return records


class RlmmAppend(Protocol):
    """Where the writes go: appends ``records`` atomically (under the store's copy fence) and returns each one's
    RLMM offset (-1: left out, it would have moved nothing). The store's own append by default; a broker's goes
    through the active controller (:mod:`orchestrator.broker.rlmm_appender`), so no broker ever holds the store's
    write lock."""

    def __call__(self, records: Sequence[MetadataRecord], *, now_ms: int) -> list[int]: ...


class RemoteLogMetadataManager(RlmmFold):
    """The RLMM of a metadata store: its fold (:class:`RlmmFold`), and the writes, appended (by ``append``, the
    store's own by default) and folded."""

    def __init__(self, store: MetadataStore, *, append: RlmmAppend | None = None) -> None:
        super().__init__(store)
        self._store = store
        self._append_with = append

    # -- writing ----------------------------------------------------------------------------------------------

    def _append(self, records: Sequence[MetadataRecord], *, now_ms: int) -> list[bool]:
        """Append ``records`` and fold them; return, per record, whether it took effect (False: moot, see the
        module docstring). They are folded as written instead of read back and decoded again (what others appended
        before them is read first: :meth:`fold_written`); when some were left out as moot, or another thread
        refreshed meanwhile, a refresh reads whatever is new, ours included."""
        if not records:
            self.refresh()
            return []
        if self._append_with is not None:
            offsets = self._append_with(records, now_ms=now_ms)
        else:
            last = self._store.append_remote_log_metadata(records, now_ms=now_ms)
            offsets = list(range(last - len(records) + 1, last + 1))
        self.fold_written(offsets, records)
        self.refresh()
        with self._lock:
            return [offset >= 0 and offset not in self._moot for offset in offsets]

    def copy_started(self, seg: RemoteSegment, *, now_ms: int) -> RemoteSegment:
        """Record a copy about to start; refused (StaleTieredEpoch) unless the topic is ENABLED at its epoch and the
        partition is not marked for deletion."""
        self.refresh()
        self._check_not_deleting(seg, SegmentState.COPY_SEGMENT_STARTED)
        started = SegmentState.COPY_SEGMENT_STARTED
        self._append_copy_record(seg, copy_started_record(seg, now_ms=now_ms), started, now_ms=now_ms)
        return self._segments[seg.segment_id]

    def _append_copy_record(
        self, seg: RemoteSegment, record: MetadataRecord, state: SegmentState, *, now_ms: int
    ) -> None:
        """Append a copy record of ``seg`` (this writer is the only one of its segment id). A refusal after the
        record already landed (the writer's first request was appended but its answer lost, and the retry met the
        fence: a controller failover during a disablement) is no refusal: the segment is in the RLMM at ``state``,
        so the copy must not be undone as if it had failed."""
        try:
            self._append([record], now_ms=now_ms)
        except StaleTieredEpoch:
            self.refresh()
            with self._lock:
                landed = self._segments.get(seg.segment_id)
            if landed is None or _ORDER[landed.state] < _ORDER[state]:
                raise

    def copy_finished(self, seg: RemoteSegment, *, broker_id: int, now_ms: int) -> RemoteSegment:
        """Record a copy finished, with the custom metadata ``seg`` carries (the RemoteStorageManager's); the same
        refusals as :meth:`transition`. Returns the segment as the RLMM now has it."""
        self.refresh()
        current = self._segments.get(seg.segment_id)
        if current is None:
            raise InvalidRequest(f"unknown remote segment {seg.segment_id}")
        self._check_not_deleting(current, SegmentState.COPY_SEGMENT_FINISHED)
        if current.state != SegmentState.COPY_SEGMENT_STARTED:
            raise InvalidRequest(f"segment {seg.segment_id} is {current.state.name}; its copy cannot finish")
        finished = SegmentState.COPY_SEGMENT_FINISHED
        record = update_record(
            current, finished, broker_id=broker_id, now_ms=now_ms, custom_metadata=seg.custom_metadata
        )
        self._append_copy_record(current, record, finished, now_ms=now_ms)
        return self._segments[seg.segment_id]

    def transition(
        self, segments: Iterable[RemoteSegment], state: SegmentState, *, broker_id: int, now_ms: int
    ) -> list[RemoteSegment]:
        """Move these segments to ``state`` in one atomic append; segments already there are skipped. Return the
        segments this call moved (as they were before): not those already there (or, for a deletion state, further),
        nor those another writer moved first while this call was deciding. Moving a segment back to a copy state is
        refused (InvalidRequest), nothing written."""
        self.refresh()
        records = []
        moving = []
        for seg in segments:
            current = self._segments.get(seg.segment_id)
            if current is None:
                raise InvalidRequest(f"unknown remote segment {seg.segment_id}")
            if state in _COPY_STATES:
                self._check_not_deleting(current, state)
            if _ORDER[current.state] > _ORDER[state]:
                if state in _COPY_STATES:
                    raise InvalidRequest(
                        f"segment {seg.segment_id} is {current.state.name}; cannot go back to {state.name}"
                    )
                continue  # further along its deletion already (another deleter): nothing left to do
            if current.state != state:
                records.append(update_record(current, state, broker_id=broker_id, now_ms=now_ms))
                moving.append(current)
        took = self._append(records, now_ms=now_ms)
        return [seg for seg, moved in zip(moving, took, strict=True) if moved]

    def _check_not_deleting(self, seg: RemoteSegment, state: SegmentState) -> None:
        """The zombie-upload fence: no copy record for a partition whose remote data is marked for deletion."""
        with self._lock:
            deleting = self._partition_deletes.get((seg.topic_id, seg.partition))
        if deleting is not None:
            raise StaleTieredEpoch(
                f"{state.name} for segment {seg.segment_id} of {seg.topic}-{seg.partition} (topic {seg.topic_id}) "
                f"refused: the partition's remote data is {deleting.name} (its topic was deleted)"
            )

    def mark_partition_delete(
        self, topic: str, topic_id: Uuid, partition: int, state: PartitionDeleteState, *, broker_id: int, now_ms: int
    ) -> None:
        """One partition's deletion state; a partition already there (or further) is skipped."""
        self.mark_partitions_delete(topic, topic_id, [partition], state, broker_id=broker_id, now_ms=now_ms)

    def mark_partitions_delete(
        self,
        topic: str,
        topic_id: Uuid,
        partitions: Iterable[int],
        state: PartitionDeleteState,
        *,
        broker_id: int,
        now_ms: int,
    ) -> None:
        """Move these partitions to ``state`` in one atomic append; partitions already there or further are
        skipped (a partition's deletion state never goes back)."""
        self.refresh()
        records = self.partition_delete_records(topic, topic_id, partitions, state, broker_id=broker_id, now_ms=now_ms)
        self._append(records, now_ms=now_ms)


def highest_in_lineage(
    copied_by_epoch: dict[int, int], lineage: Sequence[tuple[int, int]], log_end_offset: int, overall: int
) -> int:
    """Pure: see :meth:`RlmmFold.highest_copied_offset_in_lineage`."""
    if not lineage:
        return overall
    ends = [start for _, start in lineage[1:]] + [log_end_offset]
    for (epoch, _), end in reversed(list(zip(lineage, ends, strict=True))):
        copied = copied_by_epoch.get(epoch)
        if copied is not None:
            return min(copied, end - 1)
    return overall
