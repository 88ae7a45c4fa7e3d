"""Reading a log's bytes: which record batches a fetch returns, and offset lookups by timestamp. Pure.

The bytes are a segment file's, or a window of one, local or remote alike: whole record batches one after the other
(:mod:`orchestrator.protocol.record_batch`), each with its absolute offsets, as Kafka stores them.

Invariants:

* A fetch returns whole batches, never part of one, starting with the batch that holds the fetch offset (so the
  first batch may begin below it; a Kafka client skips the records below its offset), and at least that batch
  whatever ``max_bytes`` says (KIP-74), then as many following batches as fit in ``max_bytes``.
* When a window ends inside the batch a fetch must start with, :func:`pick_batches` says how many bytes from that
  batch's position are needed instead of returning less: the caller reads again, so nothing is ever skipped.
* A timestamp lookup answers the first record (in offset order) whose timestamp is at least the target, as Kafka's
  ListOffsets does; the max-timestamp lookup the first record carrying the largest timestamp. With a segment's time
  index (Kafka's: ``timestamp:int64 | relativeOffset:uint32``, the largest timestamp so far and the offset that
  first carried it), the search starts after the last entry older than the target, since every record up to that
  entry's offset is older too (:func:`timestamp_search_position`); :func:`find_timestamp` then reads whole batches
  from there in windows, so a lookup reads about one index interval, not the segment.
* Bytes that do not frame as batches are CorruptMessage (the caller decides what that means for a segment).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from orchestrator.errors import CorruptMessage
from orchestrator.protocol.record_batch import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    batch_header,
    decode_batch,
    frames,
    records_at_or_after,
)

_INDEX = struct.Struct(">II")  # an offset index entry: relative offset, position
_TIME_INDEX = struct.Struct(">qI")  # a time index entry: timestamp, relative offset
SEARCH_WINDOW_BYTES = 16 * 1024  # what a timestamp search reads at a time (its start is an index interval away)
WINDOW_SLACK_BYTES = 16 * 1024  # read past max_bytes: the index points up to index.interval.bytes before the offset


@dataclass(frozen=True, slots=True)
class Record:
    """A record of a log with its absolute offset and timestamp (for tools and tests; fetches serve bytes)."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Pick:
    """The byte range of a window to return (``start``..``end``, empty when nothing there is at or above the
    offset), or ``need`` > 0: the window cut the first wanted batch short; read ``need`` bytes from ``start``."""

    start: int
    end: int
    need: int = 0


def pick_batches(data: bytes | memoryview, offset: int, max_bytes: int) -> Pick:
    """The batches of ``data`` a fetch at ``offset`` returns within ``max_bytes`` (see the module's invariants)."""
    view = memoryview(data)
    start = end = -1
    consumed = 0
    for position, raw in frames(view):
        consumed = position + len(raw)
        header = batch_header(raw)
        if start < 0:
            if header.last_offset >= offset:
                start, end = position, consumed
        elif consumed - start > max_bytes:
            break
        else:
            end = consumed
    if start >= 0:
        return Pick(start, end)
    rest = len(view) - consumed
    if rest == 0:
        return Pick(consumed, consumed)
    # Every whole batch lies below the offset and the window ends inside the next one: it must be read whole.
    if rest < LOG_OVERHEAD:
        return Pick(consumed, consumed, need=RECORD_BATCH_OVERHEAD)
    length = int.from_bytes(view[consumed + 8 : consumed + 12], "big", signed=True)
    if length < MIN_BATCH_LENGTH:
        raise CorruptMessage(f"record batch at byte {consumed}: batch length {length} is below {MIN_BATCH_LENGTH}")
    return Pick(consumed, consumed, need=LOG_OVERHEAD + length)


def read_batches(read: Callable[[int, int], bytes], position: int, end: int, offset: int, max_bytes: int) -> bytes:
    """The batches a fetch at ``offset`` returns from the bytes ``position``..``end`` of a segment (local or remote),
    read with ``read(position, length)`` in windows of about ``max_bytes``; a batch a window cut short is read again
    whole. Empty when no batch from ``position`` on reaches ``offset``. Every round reads further or reads more, and
    bytes that end before ``end`` says, or a batch length no batch has, are CORRUPT_MESSAGE: never a loop."""
    window = max(max_bytes, RECORD_BATCH_OVERHEAD) + WINDOW_SLACK_BYTES
    length = window
    while position < end:
        asked = min(length, end - position)
        data = read(position, asked)
        if len(data) < asked:
            raise CorruptMessage(
                f"the log holds {position + len(data)} bytes where {end} were recorded (read at byte {position})"
            )
        pick = pick_batches(data, offset, max_bytes)
        if pick.end > pick.start:
            return bytes(data[pick.start : pick.end])
        if pick.need:
            if position + pick.start + pick.need > end:
                raise CorruptMessage(f"the log ends inside a record batch at byte {position + pick.start}")
            if pick.start == 0 and pick.need <= len(data):
                raise CorruptMessage(f"no whole record batch can be read at byte {position}")
            length = pick.need
        else:
            length = window
        position += pick.start  # every whole batch so far lies below the offset
    return b""


def position_before(entries: Sequence[tuple[int, int]], offset: int) -> int:
    """Where to start reading for ``offset`` in a segment whose offset index is ``entries`` (Kafka's: the last offset
    of a batch and the batch's position, ascending): the position of the last entry whose batch ends below
    ``offset``, else 0. It never points past the batch holding ``offset``."""
    j = bisect.bisect_left(entries, offset, key=lambda entry: entry[0]) - 1
    return entries[j][1] if j >= 0 else 0


def index_entries(index: bytes, base_offset: int) -> list[tuple[int, int]]:
    """An offset index file's bytes (relative offset, position; a torn last entry ignored) as absolute entries."""
    whole = len(index) - len(index) % _INDEX.size
    return [(base_offset + relative, position) for relative, position in _INDEX.iter_unpack(index[:whole])]


def time_index_entries(index: bytes, base_offset: int) -> list[tuple[int, int]]:
    """A time index file's bytes (timestamp, relative offset; a torn last entry ignored) as ``(timestamp, absolute
    offset)`` entries."""
    whole = len(index) - len(index) % _TIME_INDEX.size
    return [(timestamp, base_offset + relative) for timestamp, relative in _TIME_INDEX.iter_unpack(index[:whole])]


def timestamp_search_position(
    time_entries: Sequence[tuple[int, int]], offset_entries: Sequence[tuple[int, int]], timestamp_ms: int
) -> int:
    """Where the search for the first record whose timestamp is at least ``timestamp_ms`` may start in a segment
    with these indexes: before the batch after the last time-index entry older than ``timestamp_ms`` (every record
    up to that entry's offset is older), else 0."""
    j = bisect.bisect_left(time_entries, timestamp_ms, key=lambda entry: entry[0]) - 1
    return position_before(offset_entries, time_entries[j][1] + 1) if j >= 0 else 0


def scan_batches(
    read: Callable[[int, int], bytes], position: int, end: int, *, window: int = SEARCH_WINDOW_BYTES
) -> Iterator[memoryview]:
    """Every whole batch of a segment's bytes ``position``..``end``, read with ``read(position, length)`` about
    ``window`` bytes at a time (a batch longer than the window is read whole). Bytes that end before ``end`` says,
    or a batch that runs past it, are CORRUPT_MESSAGE."""
    length = window
    while position < end:
        asked = min(length, end - position)
        data = read(position, asked)
        if len(data) < asked:
            raise CorruptMessage(f"the log holds {position + len(data)} bytes where {end} were recorded")
        view = memoryview(data)
        consumed = 0
        for at, raw in frames(view):
            yield raw
            consumed = at + len(raw)
        if consumed:
            position, length = position + consumed, window
            continue
        if len(view) < LOG_OVERHEAD or asked < length:
            raise CorruptMessage(f"the log ends inside a record batch at byte {position}")
        length = LOG_OVERHEAD + int.from_bytes(view[8:12], "big", signed=True)
        if length <= len(view):
            raise CorruptMessage(f"no whole record batch can be read at byte {position}")


def find_timestamp(
    read: Callable[[int, int], bytes], position: int, end: int, timestamp_ms: int
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record whose timestamp is at least ``timestamp_ms`` in the batches of
    ``position``..``end`` (read as :func:`scan_batches` reads them); None when none there is."""
    for raw in scan_batches(read, position, end):
        found = first_at_or_after(raw, timestamp_ms)
        if found is not None:
            return found
    return None


def records_from(data: bytes | memoryview, offset: int) -> list[Record]:
    """Every record of the whole batches in ``data`` at or above ``offset``, decoded (control batches left out)."""
    return [Record(at, timestamp, r.key, r.value) for at, timestamp, r in records_at_or_after(data, offset)]


def first_at_or_after(data: bytes | memoryview, timestamp_ms: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of ``data`` whose timestamp is at least ``timestamp_ms``."""
    for _, raw in frames(data):
        if batch_header(raw).max_timestamp < timestamp_ms:
            continue
        batch = decode_batch(raw)
        for at, timestamp, _ in batch.absolute_records():
            if timestamp >= timestamp_ms:
                return at, timestamp
    return None


def max_timestamp(data: bytes | memoryview) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of ``data`` with the largest timestamp, None when empty."""
    best: memoryview | None = None
    best_ts = -1
    for _, raw in frames(data):
        header = batch_header(raw)
        if best is None or header.max_timestamp > best_ts:
            best, best_ts = raw, header.max_timestamp
    if best is None:
        return None
    return first_at_or_after(best, best_ts)
