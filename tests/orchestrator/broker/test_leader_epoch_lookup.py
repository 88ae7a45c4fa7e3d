"""OffsetsForLeaderEpoch's lookup in the leader-epoch cache (Kafka's ``LeaderEpochFileCache.endOffsetFor``).

A follower asks the leader where the last epoch it holds ends in the leader's log, and truncates to that offset
before it fetches: the examples pin Kafka's answers case by case, and the properties check them against a
brute-force reading of the log offset by offset, and that a follower holding a prefix of the leader's log is never
told to cut into it.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.broker.leader_epochs import EpochEntry, LeaderEpochCache

pytestmark = pytest.mark.unit

UNDEFINED = (-1, -1)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(tuple(EpochEntry(e, o) for e, o in entries))


LOG = cache((2, 10), (4, 20), (7, 30))  # offsets 10-19 in epoch 2, 20-29 in 4, 30 up to the log end in 7
LOG_END = 50


@pytest.mark.parametrize(
    ("requested", "answer"),
    [
        (7, (7, LOG_END)),  # the latest epoch ends at the log end offset
        (4, (4, 30)),  # an epoch ends where the next one starts
        (2, (2, 20)),
        (5, (4, 30)),  # an epoch the log lacks: the largest one below it, ending where the next known one starts
        (3, (2, 20)),
        (6, (4, 30)),
        (1, (1, 10)),  # below the first entry: the epoch asked for, ending where the first known epoch starts
        (0, (0, 10)),
        (8, UNDEFINED),  # above the latest: unknown
        (-1, UNDEFINED),  # a follower without epochs
    ],
)
def test_each_epoch_ends_where_kafkas_cache_says(requested: int, answer: tuple[int, int]) -> None:
    assert LOG.end_offset_for(requested, LOG_END) == answer


def test_an_empty_cache_knows_no_epoch() -> None:
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(3, 17) == UNDEFINED


def test_a_single_epoch_ends_at_the_log_end_and_anything_below_ends_at_its_start() -> None:
    only = cache((3, 5))
    assert only.end_offset_for(3, 9) == (3, 9)
    assert only.end_offset_for(2, 9) == (2, 5)
    assert only.end_offset_for(4, 9) == UNDEFINED


@st.composite
def logs(draw: st.DrawFn) -> tuple[LeaderEpochCache, int]:
    """A cache of 1-6 entries with epochs and start offsets ascending, and a log end offset past the last start."""
    epochs = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=6)))
    starts = sorted(draw(st.sets(st.integers(0, 120), min_size=len(epochs), max_size=len(epochs))))
    log_end = starts[-1] + draw(st.integers(1, 30))
    return LeaderEpochCache(tuple(EpochEntry(e, o) for e, o in zip(epochs, starts, strict=True))), log_end


def epoch_of_each_offset(epochs: LeaderEpochCache, log_end: int) -> dict[int, int]:
    """The epoch every offset from the first entry's start to the log end was written in."""
    out: dict[int, int] = {}
    bounds = [*(e.start_offset for e in epochs.entries[1:]), log_end]
    for entry, end in zip(epochs.entries, bounds, strict=True):
        out.update(dict.fromkeys(range(entry.start_offset, end), entry.epoch))
    return out


@given(logs(), st.integers(-1, 45))
def test_the_answer_is_what_reading_the_log_offset_by_offset_gives(
    log: tuple[LeaderEpochCache, int], asked: int
) -> None:
    epochs, log_end = log
    written = epoch_of_each_offset(epochs, log_end)
    if asked < 0 or asked > epochs.latest_epoch:
        expected = UNDEFINED
    else:
        # where the epoch asked for ends: the first offset written in a later epoch, else the log end
        end = min((o for o, e in written.items() if e > asked), default=log_end)
        held = [e for e in written.values() if e <= asked]
        expected = (max(held) if held else asked, end)
    assert epochs.end_offset_for(asked, log_end) == expected


@given(logs(), st.data())
def test_a_follower_holding_a_prefix_of_the_leaders_log_is_never_told_to_cut_into_it(
    log: tuple[LeaderEpochCache, int], data: st.DataObject
) -> None:
    leader, log_end = log
    copied = data.draw(st.integers(leader.entries[0].start_offset + 1, log_end), label="follower's log end")
    follower = leader.truncated_from_end(copied)
    epoch, end = leader.end_offset_for(follower.latest_epoch, log_end)
    assert epoch == follower.latest_epoch
    assert end >= copied, "the follower would truncate records it shares with the leader"
    assert end == log_end or end in {e.start_offset for e in leader.entries}
