"""A partition's leader-epoch cache, and its checkpoint file in Kafka's ``leader-epoch-checkpoint`` format. Pure.

Owner: Kafka's (``storage/.../internals/epoch/LeaderEpochFileCache.java`` and
``server-common/.../checkpoint/LeaderEpochCheckpointFile.java``). The cache says, for each leader epoch the
partition's log has records of, the first offset written in it: ``(epoch, start offset)`` entries, both ascending.
The file is text, one item a line::

    0                 the format version
    2                 how many entries
    0 0               "<epoch> <start offset>", one line per entry
    3 150

How the cache changes, as Kafka's does:

* :meth:`LeaderEpochCache.assigned`: a batch appended in an epoch above the latest one starts an entry at its base
  offset; a batch without an epoch (-1, what a tool writes) or in an epoch already known changes nothing.
* :meth:`~LeaderEpochCache.truncated_from_end`: a log cut back to ``end`` (a torn tail dropped on open) forgets the
  entries that start at or past it.
* :meth:`~LeaderEpochCache.truncated_from_start`: a log start offset moved forward drops the entries wholly below
  it and moves the one in effect there to start at it.

What a remote segment carries (Kafka's RemoteLogManager): its ``.indexes`` hold the cache cut at the segment's end
(every entry from the log's oldest known epoch up to the segment's last offset: a follower restores its whole cache
from it), and its metadata the entries cut to the segment on both ends (:meth:`~LeaderEpochCache.in_range`).

Invariants: epochs and start offsets strictly ascend; :func:`parse_checkpoint` reads exactly what
:func:`checkpoint_text` writes and refuses anything else (a file that does not parse is rebuilt by the caller).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0


class CheckpointFormatError(ValueError):
    """A leader-epoch checkpoint's text that does not follow the format."""


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class LeaderEpochCache:
    """The ``(epoch, start offset)`` entries of one partition, ascending."""

    entries: tuple[EpochEntry, ...] = ()

    def __post_init__(self) -> None:
        for before, after in zip(self.entries, self.entries[1:], strict=False):
            if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
                raise ValueError(f"leader epoch entries must strictly ascend, got {before} then {after}")

    @property
    def latest_epoch(self) -> int:
        """The latest epoch known, -1 when none."""
        return self.entries[-1].epoch if self.entries else -1

    def assigned(self, epoch: int, start_offset: int) -> LeaderEpochCache:
        """The cache after a batch of ``epoch`` was appended at ``start_offset``."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return self
        kept = tuple(e for e in self.entries if e.start_offset < start_offset)
        return LeaderEpochCache((*kept, EpochEntry(epoch, start_offset)))

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` of the largest epoch at or below ``epoch`` here, its end being where the next
        epoch starts (the log end offset for the latest): what a leader answers a follower that last fetched in
        ``epoch`` (Kafka's ``endOffsetFor``). Below the first entry: ``epoch`` and the first entry's start. Above
        every entry, or for -1 or an empty cache: ``(-1, -1)`` (undefined)."""
        if epoch < 0 or not self.entries:
            return -1, -1
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = next((e for e in self.entries if e.epoch > epoch), None)
        if higher is None:
            return -1, -1
        floor = [e for e in self.entries if e.epoch <= epoch]
        return (floor[-1].epoch if floor else epoch), higher.start_offset

    def end_offset_as_leader(self, asked: int, *, leader_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """:meth:`end_offset_for` as the partition's leader at ``leader_epoch`` answers it: its own epoch counts as
        begun at the log end offset even before its first batch (Kafka writes that entry on becoming leader), so the
        epoch before it ends there rather than being undefined."""
        return self.assigned(leader_epoch, log_end_offset).end_offset_for(asked, log_end_offset)

    def truncated_from_end(self, end_offset: int) -> LeaderEpochCache:
        """Without the entries that start at or after ``end_offset``."""
        kept = tuple(e for e in self.entries if e.start_offset < end_offset)
        return self if len(kept) == len(self.entries) else LeaderEpochCache(kept)

    def truncated_from_start(self, start_offset: int) -> LeaderEpochCache:
        """Without the entries wholly below ``start_offset``; the one in effect there now starts at it."""
        below = [e for e in self.entries if e.start_offset <= start_offset]
        if not below:
            return self
        rest = self.entries[len(below) :]
        return LeaderEpochCache((EpochEntry(below[-1].epoch, start_offset), *rest))

    def in_range(self, start_offset: int, end_offset: int) -> tuple[EpochEntry, ...]:
        """The entries of offsets ``[start_offset, end_offset)`` (Kafka's ``epochEntriesInRange``): cut at the end,
        then at the start unless ``start_offset`` is negative."""
        cut = self.truncated_from_end(end_offset)
        return cut.entries if start_offset < 0 else cut.truncated_from_start(start_offset).entries


def checkpoint_text(entries: Iterable[EpochEntry]) -> str:
    """The checkpoint file's contents for ``entries``."""
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items)), *(f"{e.epoch} {e.start_offset}" for e in items)]
    return "".join(line + "\n" for line in lines)


def parse_checkpoint(text: str) -> LeaderEpochCache:
    """The cache a checkpoint file holds; :class:`CheckpointFormatError` for anything :func:`checkpoint_text` would
    not write."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "":
        raise CheckpointFormatError("a leader-epoch checkpoint is a version line, a count line, entries, a newline")
    version, count, *body = lines[:-1]
    if version != str(CHECKPOINT_VERSION):
        raise CheckpointFormatError(f"unknown leader-epoch checkpoint version {version!r}")
    if not count.isdigit() or int(count) != len(body):
        raise CheckpointFormatError(f"the count line says {count!r}, {len(body)} entries follow")
    entries = []
    for line in body:
        parts = line.split(" ")
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise CheckpointFormatError(f"a leader-epoch entry is '<epoch> <start offset>', got {line!r}")
        entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    try:
        return LeaderEpochCache(tuple(entries))
    except ValueError as exc:
        raise CheckpointFormatError(str(exc)) from exc
