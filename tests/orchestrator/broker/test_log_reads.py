"""Reads over a log's bytes (orchestrator.broker.log_reads): which whole batches a fetch returns, how a window cut
inside a batch is read again, where the offset index says to start, and the timestamp lookups, each checked against
a brute-force scan of the same bytes. Pure: the "segment" is a bytes buffer and ``read`` a slice of it."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.broker import log_reads
from orchestrator.broker.log_reads import (
    Pick,
    find_timestamp,
    first_at_or_after,
    index_entries,
    max_timestamp,
    pick_batches,
    position_before,
    read_batches,
    records_from,
    scan_batches,
    timestamp_search_position,
)
from orchestrator.errors import CorruptMessage
from orchestrator.protocol.record_batch import (
    build_batch,
    decode_batch,
    encode_batch,
    frames,
    with_log_append_time,
)

pytestmark = pytest.mark.unit

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
_INDEX_ENTRY = struct.Struct(">II")


@dataclass(frozen=True)
class Placed:
    """One batch of the test log: where it lies and which offsets it holds."""

    position: int
    size: int
    base_offset: int
    last_offset: int

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True)
class LogBytes:
    data: bytes
    batches: tuple[Placed, ...]
    records: tuple[tuple[int, int, bytes | None], ...]  # (offset, timestamp, value), in offset order

    @property
    def base_offset(self) -> int:
        return self.batches[0].base_offset

    @property
    def end_offset(self) -> int:
        return self.batches[-1].last_offset + 1

    def holding(self, offset: int) -> Placed:
        return next(b for b in self.batches if b.base_offset <= offset <= b.last_offset)

    def boundaries(self) -> set[int]:
        return {b.position for b in self.batches} | {len(self.data)}

    def indexed(self, interval: int) -> list[Placed]:
        """The batches Kafka's offset index lists, as the local log writes it: the first, then one every
        ``interval`` bytes."""
        entries, since = [], interval
        for b in self.batches:
            if since >= interval:
                entries.append(b)
                since = 0
            since += b.size
        return entries

    def index(self, interval: int) -> bytes:
        return b"".join(_INDEX_ENTRY.pack(b.last_offset - self.base_offset, b.position) for b in self.indexed(interval))


def make_log(
    batches: Sequence[Sequence[tuple[int, int]]],
    *,
    base_offset: int = 0,
    log_append_times: Sequence[int | None] = (),
) -> LogBytes:
    """A log of one batch per entry of ``batches``, each a list of (value size, timestamp) records, at offsets from
    ``base_offset``; a batch with an entry in ``log_append_times`` is stamped with that broker time."""
    chunks: list[bytes] = []
    placed: list[Placed] = []
    records: list[tuple[int, int, bytes | None]] = []
    position, offset = 0, base_offset
    for i, spec in enumerate(batches):
        values = [b"%d:" % (offset + j) + b"v" * size for j, (size, _) in enumerate(spec)]
        raw = encode_batch(build_batch(offset, [(None, v, ts, ()) for v, (_, ts) in zip(values, spec, strict=True)]))
        stamp = log_append_times[i] if i < len(log_append_times) else None
        if stamp is not None:
            raw = with_log_append_time(raw, stamp)
        for j, value in enumerate(values):
            records.append((offset + j, stamp if stamp is not None else spec[j][1], value))
        chunks.append(raw)
        placed.append(Placed(position, len(raw), offset, offset + len(spec) - 1))
        position += len(raw)
        offset += len(spec)
    return LogBytes(b"".join(chunks), tuple(placed), tuple(records))


class Reader:
    """``read(position, length)`` over a buffer, remembering every call."""

    def __init__(self, data: bytes, *, limit: int = 200) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []
        self.limit = limit

    def __call__(self, position: int, length: int) -> bytes:
        self.calls.append((position, length))
        if len(self.calls) > self.limit:
            raise Spinning(f"read_batches keeps reading the same bytes: {self.calls[:4]} ... {self.calls[-2:]}")
        return self.data[position : position + length]


class Spinning(Exception):
    """read_batches asked for the same window over and over: it would never return."""


def batch_spans(data: bytes) -> list[tuple[int, int]]:
    return [(position, position + len(raw)) for position, raw in frames(data)]


def uniform(n: int, records_per_batch: int = 1, size: int = 50) -> LogBytes:
    return make_log([[(size, 1_000 + i)] * records_per_batch for i in range(n)])


# --- pick_batches


@pytest.mark.parametrize("offset", [0, 3, 4, 5, 11, 17, 19])
def test_the_first_batch_picked_is_the_one_holding_the_offset_even_when_it_starts_below_it(offset):
    log = uniform(5, records_per_batch=4)
    pick = pick_batches(log.data, offset, max_bytes=10**6)
    holding = log.holding(offset)
    assert (pick.start, pick.end, pick.need) == (holding.position, len(log.data), 0)
    assert records_from(log.data[pick.start : pick.end], offset)[0].offset == offset


@pytest.mark.parametrize("max_bytes", [-1, 0, 1, 60])
def test_at_least_the_first_batch_however_small_max_bytes_is(max_bytes):
    log = make_log([[(5000, 1)], [(10, 2)], [(10, 3)]])
    first = log.batches[0]
    assert pick_batches(log.data, 0, max_bytes) == Pick(0, first.end)
    assert read_batches(Reader(log.data), 0, len(log.data), 0, max_bytes) == log.data[: first.end]


def test_batches_after_the_first_stop_before_max_bytes_and_one_that_fits_exactly_is_taken():
    log = uniform(10)
    size = log.batches[0].size
    assert all(b.size == size for b in log.batches)
    for max_bytes, batches in [(size, 1), (2 * size - 1, 1), (2 * size, 2), (3 * size - 1, 2), (3 * size, 3)]:
        pick = pick_batches(log.data, 2, max_bytes)
        assert (pick.start, pick.end - pick.start) == (log.batches[2].position, batches * size), max_bytes
        assert read_batches(Reader(log.data), 0, len(log.data), 2, max_bytes) == log.data[pick.start : pick.end]


def test_an_offset_above_every_batch_picks_nothing_and_a_read_returns_nothing():
    log = uniform(4)
    assert pick_batches(log.data, 4, 10**6) == Pick(len(log.data), len(log.data))
    assert read_batches(Reader(log.data), 0, len(log.data), 4, 10**6) == b""
    assert read_batches(Reader(b""), 0, 0, 0, 100) == b""


def test_a_window_ending_inside_a_later_batch_returns_only_the_whole_ones():
    log = uniform(4)
    cut = log.batches[2].position + 20
    assert pick_batches(log.data[:cut], 1, 10**6) == Pick(log.batches[1].position, log.batches[2].position)


@pytest.mark.parametrize("inside", [1, 11, 12, 16, 17, 60, 61])
def test_a_window_ending_inside_the_wanted_batch_asks_for_that_batch_whole(inside):
    log = uniform(3, records_per_batch=2)
    wanted = log.batches[1]
    pick = pick_batches(log.data[: wanted.position + inside], 2, 10**6)
    assert pick.start == pick.end == wanted.position and pick.need > 0
    if inside >= 12:  # the batch length is in the window: exactly the batch
        assert pick.need == wanted.size
    else:  # not even that: at least a batch header, then the length is known
        assert pick.need >= 12


# --- read_batches: windows and the bytes they read


def test_a_batch_larger_than_the_window_is_read_again_whole():
    log = make_log([[(40_000, 1)], [(10, 2)]])
    reader = Reader(log.data)
    out = read_batches(reader, 0, len(log.data), 0, 100)
    assert out == log.data[: log.batches[0].end]
    window = 100 + log_reads.WINDOW_SLACK_BYTES
    assert reader.calls == [(0, window), (0, log.batches[0].size)]


def test_a_window_cut_inside_the_first_wanted_batch_after_batches_below_the_offset_reads_it_whole_from_its_start():
    small = [[(100, i)] for i in range(20)]
    log = make_log([*small, [(30_000, 99)], [(10, 100)]])
    wanted = log.batches[20]
    reader = Reader(log.data)
    out = read_batches(reader, 0, len(log.data), wanted.base_offset, 500)
    assert out == log.data[wanted.position : wanted.end]
    assert reader.calls[-1] == (wanted.position, wanted.size)  # read again from the batch's own position, whole
    assert all(position <= wanted.position for position, _ in reader.calls)


def test_reads_never_go_past_the_end_given_and_start_where_told():
    log = uniform(30, size=500)
    start, end = log.batches[3].position, log.batches[20].position
    with mock.patch.object(log_reads, "WINDOW_SLACK_BYTES", 0):
        reader = Reader(log.data)
        out = read_batches(reader, start, end, log.batches[10].base_offset, 600)
    assert out == log.data[log.batches[10].position : log.batches[10].end]
    assert all(start <= position and position + length <= end for position, length in reader.calls)
    # an offset past ``end`` is not read from beyond it
    with mock.patch.object(log_reads, "WINDOW_SLACK_BYTES", 0):
        assert read_batches(Reader(log.data), start, end, log.batches[25].base_offset, 600) == b""


def test_a_log_that_ends_inside_the_wanted_batch_is_corrupt():
    log = uniform(3, size=20_000)
    end = log.batches[1].end - 5  # the segment's size says it ends five bytes short of the batch
    with pytest.raises(CorruptMessage, match="ends inside a record batch"):
        read_batches(Reader(log.data), 0, end, 1, 100)


def test_bytes_that_do_not_frame_as_batches_are_corrupt():
    log = uniform(3)
    bad_magic = bytearray(log.data)
    bad_magic[log.batches[1].position + 16] = 1
    with pytest.raises(CorruptMessage, match="magic"):
        read_batches(Reader(bytes(bad_magic)), 0, len(bad_magic), 2, 10**6)
    short_length = bytearray(log.data)
    struct.pack_into(">i", short_length, log.batches[1].position + 8, 3)
    with pytest.raises(CorruptMessage, match="batch length"):
        read_batches(Reader(bytes(short_length)), 0, len(short_length), 2, 10**6)


def test_a_read_that_returns_less_than_the_batch_it_asked_for_ends_instead_of_asking_forever():
    log = make_log([[(5_000, 1)], [(10, 2)]])
    end = len(log.data)
    shorter = Reader(log.data[: log.batches[0].end - 10])  # the object holds 10 bytes less than its size says
    with pytest.raises(CorruptMessage):
        read_batches(shorter, 0, end, 0, 100)
    assert len(shorter.calls) <= 3


def test_a_corrupt_batch_length_cut_by_the_window_is_corrupt_not_read_forever():
    window = 100 + log_reads.WINDOW_SLACK_BYTES
    below = next(raw for s in range(window - 200, window) if len(raw := _one_batch(s)) == window - 14)
    data = below + struct.pack(">qi", 1, 0) + bytes(60)  # the next "batch" says its length is 0
    with pytest.raises(CorruptMessage):  # as when the whole buffer fits in the window
        read_batches(Reader(data), 0, len(data), 1, 10**6)
    reader = Reader(data)
    with pytest.raises(CorruptMessage):
        read_batches(reader, 0, len(data), 1, 100)


def _one_batch(value_size: int) -> bytes:
    return encode_batch(build_batch(0, [(None, b"x" * value_size, 1, ())]))


# --- the property: random logs, any offset, any max_bytes


batch_specs = st.lists(
    st.lists(st.tuples(st.integers(0, 3_000), st.integers(0, 10**6)), min_size=1, max_size=5),
    min_size=1,
    max_size=25,
)


@PROPERTY
@given(
    specs=batch_specs,
    base_offset=st.integers(0, 10**9),
    slack=st.sampled_from([0, 1, 100, 4096, log_reads.WINDOW_SLACK_BYTES]),
    data=st.data(),
)
def test_random_logs_read_at_any_offset_give_whole_batches_from_the_one_holding_it(specs, base_offset, slack, data):
    log = make_log(specs, base_offset=base_offset)
    offset = data.draw(st.integers(log.base_offset, log.end_offset - 1), label="offset")
    max_bytes = data.draw(st.integers(-1, len(log.data) + 10), label="max_bytes")
    interval = data.draw(st.sampled_from([1, 256, 4096, 10**9]), label="index interval")
    position = position_before(index_entries(log.index(interval), log.base_offset), offset)
    holding = log.holding(offset)
    assert position in log.boundaries() and position <= holding.position  # never past the batch holding it

    with mock.patch.object(log_reads, "WINDOW_SLACK_BYTES", slack):
        reader = Reader(log.data)
        out = read_batches(reader, position, len(log.data), offset, max_bytes)

    start = holding.position
    assert out and log.data[start : start + len(out)] == out  # starts with the batch holding the offset, whole
    assert start + len(out) in log.boundaries()  # ends on a batch boundary: whole batches only
    spans = batch_spans(out)
    assert sum(e - s for s, e in spans) == len(out)
    assert len(spans) == 1 or len(out) <= max_bytes  # more than the first batch only within max_bytes
    decoded = records_from(out, offset)
    assert decoded[0].offset == offset
    assert [(r.offset, r.timestamp_ms, r.value) for r in decoded] == [
        rec for rec in log.records if offset <= rec[0] <= decoded[-1].offset
    ]
    assert all(p >= position and p + n <= len(log.data) for p, n in reader.calls)


@PROPERTY
@given(
    specs=batch_specs,
    slack=st.sampled_from([0, 100, log_reads.WINDOW_SLACK_BYTES]),
    sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=8),
)
def test_reading_on_from_the_log_start_gives_every_record_exactly_once(specs, slack, sizes):
    log = make_log(specs, base_offset=7)
    index = log.index(512)
    offset, seen, reads = log.base_offset, [], 0
    with mock.patch.object(log_reads, "WINDOW_SLACK_BYTES", slack):
        while offset < log.end_offset:
            max_bytes = sizes[reads % len(sizes)]
            position = position_before(index_entries(index, log.base_offset), offset)
            out = read_batches(Reader(log.data), position, len(log.data), offset, max_bytes)
            decoded = records_from(out, offset)
            assert decoded, f"no progress at offset {offset}"
            seen.extend((r.offset, r.timestamp_ms, r.value) for r in decoded)
            offset = decoded[-1].offset + 1
            reads += 1
    assert seen == list(log.records)
    assert reads <= len(log.batches)


# --- the offset index


def test_position_before_is_the_last_indexed_batch_ending_below_the_offset():
    log = make_log([[(50, 1)] * 3 for _ in range(10)], base_offset=100)
    index = log.index(1)  # every batch indexed
    assert position_before(index_entries(index, 100), 100) == 0
    assert position_before(index_entries(index, 100), 102) == 0  # in the first batch
    assert position_before(index_entries(index, 100), 103) == 0  # the first batch ends below: start there, it is whole
    assert position_before(index_entries(index, 100), 104) == log.batches[0].position
    assert position_before(index_entries(index, 100), 107) == log.batches[1].position
    assert position_before(index_entries(index, 100), 10**6) == log.batches[-1].position
    assert position_before(index_entries(b"", 100), 120) == 0
    assert (
        position_before(index_entries(index + b"\x00\x01", 100), 107) == log.batches[1].position
    )  # a torn last entry: ignored


@PROPERTY
@given(specs=batch_specs, interval=st.integers(1, 20_000), data=st.data())
def test_position_in_index_never_points_past_the_batch_holding_the_offset(specs, interval, data):
    log = make_log(specs, base_offset=data.draw(st.integers(0, 2**40)))
    offset = data.draw(st.integers(log.base_offset, log.end_offset + 5))
    position = position_before(index_entries(log.index(interval), log.base_offset), offset)
    assert position in log.boundaries()
    if offset < log.end_offset:
        assert position <= log.holding(offset).position
    indexed_below = [b.position for b in log.indexed(interval) if b.last_offset < offset]
    assert position == max(indexed_below, default=0)  # and as close as the index allows


# --- timestamp lookups against a brute-force scan


def brute_first_at_or_after(log: LogBytes, target: int) -> tuple[int, int] | None:
    return next(((o, t) for o, t, _ in log.records if t >= target), None)


def brute_max_timestamp(log: LogBytes) -> tuple[int, int] | None:
    if not log.records:
        return None
    best = max(t for _, t, _ in log.records)
    return next((o, t) for o, t, _ in log.records if t == best)


def test_timestamp_lookups_on_a_small_log():
    log = make_log([[(1, 100), (1, 200)], [(1, 150), (1, 400)], [(1, 400), (1, 300)], [(1, 500), (1, 100)]])
    assert first_at_or_after(log.data, 0) == (0, 100)
    assert first_at_or_after(log.data, 150) == (1, 200)
    assert first_at_or_after(log.data, 250) == (3, 400)
    assert first_at_or_after(log.data, 450) == (6, 500)
    assert first_at_or_after(log.data, 501) is None
    assert max_timestamp(log.data) == (6, 500)
    assert max_timestamp(b"") is None and first_at_or_after(b"", 0) is None


@PROPERTY
@given(
    specs=st.lists(
        st.lists(st.tuples(st.integers(0, 20), st.integers(-1, 60)), min_size=1, max_size=6),
        min_size=1,
        max_size=12,
    ),
    stamps=st.lists(st.one_of(st.none(), st.integers(0, 60)), max_size=12),
    targets=st.lists(st.integers(-2, 65), min_size=1, max_size=10),
)
def test_timestamp_lookups_agree_with_a_brute_force_scan(specs, stamps, targets):
    log = make_log(specs, base_offset=3, log_append_times=stamps)
    for target in targets:
        assert first_at_or_after(log.data, target) == brute_first_at_or_after(log, target), target
    assert max_timestamp(log.data) == brute_max_timestamp(log)
    for placed in log.batches:  # the batches as decoded say the same as the records we meant
        decoded = decode_batch(log.data[placed.position : placed.end])
        assert [(o, t) for o, t, _ in decoded.absolute_records()] == [
            (o, t) for o, t, _ in log.records if placed.base_offset <= o <= placed.last_offset
        ]


# --- the time index: where a timestamp search starts, and the search from there


def kafka_time_index(log: LogBytes, interval: int) -> list[tuple[int, int]]:
    """The time index entries Kafka writes for ``log`` (absolute offsets): at each offset-index entry, the largest
    timestamp so far with the last offset of the batch that first carried it, when it grew since the last entry."""
    entries: list[tuple[int, int]] = []
    since, top, top_offset = interval, -1, -1
    for b in log.batches:
        batch_max = max(t for o, t, _ in log.records if b.base_offset <= o <= b.last_offset)
        if batch_max > top:
            top, top_offset = batch_max, b.last_offset
        if since >= interval:
            if top >= 0 and (not entries or top > entries[-1][0]):
                entries.append((top, top_offset))
            since = 0
        since += b.size
    return entries


def test_a_search_starts_after_the_last_time_index_entry_older_than_the_target():
    log = make_log([[(1, ts)] for ts in (10, 30, 20, 40, 50, 60)])
    times = [(10, 0), (30, 1), (40, 3), (50, 4), (60, 5)]
    offsets = [(b.last_offset, b.position) for b in log.batches]
    assert timestamp_search_position(times, offsets, 5) == 0
    assert timestamp_search_position(times, offsets, 10) == 0
    # Every record up to offset 3 is older than 45: the search starts at the indexed batch ending there, not before.
    assert timestamp_search_position(times, offsets, 45) == log.batches[3].position
    assert timestamp_search_position(times, offsets, 55) == log.batches[4].position
    sparse = [offsets[0], offsets[5]]  # an offset index with an entry for the first and the last batch only
    assert timestamp_search_position(times, sparse, 55) == 0
    assert timestamp_search_position([], offsets, 45) == 0


@PROPERTY
@given(
    specs=st.lists(
        st.lists(st.tuples(st.integers(0, 30), st.integers(-1, 60)), min_size=1, max_size=4),
        min_size=1,
        max_size=30,
    ),
    interval=st.integers(1, 400),
    targets=st.lists(st.integers(-2, 65), min_size=1, max_size=8),
)
def test_a_search_from_the_time_index_finds_what_a_brute_force_scan_finds_reading_from_near_it(
    specs, interval, targets
):
    log = make_log(specs, base_offset=7)
    times = kafka_time_index(log, interval)
    offsets = [(b.last_offset, b.position) for b in log.indexed(interval)]
    for target in targets:
        position = timestamp_search_position(times, offsets, target)
        read = Reader(log.data)
        found = find_timestamp(read, position, len(log.data), target)
        assert found == brute_first_at_or_after(log, target), target
        if found is not None:  # the search never starts past the batch holding the answer
            assert position <= log.holding(found[0]).position


def test_scanning_reads_windows_of_whole_batches_and_a_batch_longer_than_the_window_whole():
    log = make_log([[(10, 1)], [(900, 2)], [(10, 3)]])
    read = Reader(log.data)
    batches = [bytes(raw) for raw in scan_batches(read, 0, len(log.data), window=200)]
    assert batches == [log.data[b.position : b.end] for b in log.batches]
    assert all(position + length <= len(log.data) for position, length in read.calls)
    assert (log.batches[1].position, log.batches[1].size) in read.calls  # the long one, asked for whole
    with pytest.raises(CorruptMessage):
        list(scan_batches(Reader(log.data), 0, len(log.data) + 5, window=200))
