"""The leader-epoch cache and its checkpoint file: Kafka's rules for assigning and truncating, Kafka's text format."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.broker.leader_epochs import (
    CheckpointFormatError,
    EpochEntry,
    LeaderEpochCache,
    checkpoint_text,
    parse_checkpoint,
)

pytestmark = pytest.mark.unit


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(tuple(EpochEntry(e, o) for e, o in entries))


def test_a_batch_of_a_newer_epoch_starts_an_entry_at_its_base_offset_and_others_change_nothing():
    epochs = LeaderEpochCache().assigned(0, 0).assigned(0, 5).assigned(3, 10).assigned(2, 12).assigned(-1, 13)
    assert epochs == cache((0, 0), (3, 10))
    assert epochs.latest_epoch == 3 and LeaderEpochCache().latest_epoch == -1


def test_truncating_from_the_end_forgets_entries_that_start_at_or_past_it():
    epochs = cache((0, 0), (3, 10), (4, 20))
    assert epochs.truncated_from_end(20) == cache((0, 0), (3, 10))
    assert epochs.truncated_from_end(21) == epochs
    assert epochs.truncated_from_end(0) == LeaderEpochCache()


def test_truncating_from_the_start_moves_the_entry_in_effect_to_the_new_start():
    epochs = cache((0, 0), (3, 10), (4, 20))
    assert epochs.truncated_from_start(15) == cache((3, 15), (4, 20))
    assert epochs.truncated_from_start(20) == cache((4, 20))
    assert epochs.truncated_from_start(0) == epochs


def test_a_segments_range_is_cut_at_both_ends_and_an_index_file_keeps_everything_before():
    epochs = cache((0, 0), (3, 10), (4, 20))
    assert epochs.in_range(12, 20) == (EpochEntry(3, 12),)  # a segment 12..19: one epoch, from its base
    assert epochs.in_range(5, 25) == (EpochEntry(0, 5), EpochEntry(3, 10), EpochEntry(4, 20))
    assert epochs.in_range(-1, 20) == (EpochEntry(0, 0), EpochEntry(3, 10))  # Kafka's remote leader-epoch index


def test_the_checkpoint_is_kafkas_text_version_count_then_one_epoch_and_offset_a_line():
    assert checkpoint_text([EpochEntry(0, 0), EpochEntry(3, 150)]) == "0\n2\n0 0\n3 150\n"
    assert checkpoint_text([]) == "0\n0\n"


@given(
    st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62)), unique_by=(lambda t: t[0], lambda t: t[1]))
)
def test_a_checkpoint_reads_back_as_written(pairs):
    entries = LeaderEpochCache(
        tuple(EpochEntry(e, o) for e, o in zip(sorted(p[0] for p in pairs), sorted(p[1] for p in pairs), strict=True))
    )
    assert parse_checkpoint(checkpoint_text(entries.entries)) == entries


@pytest.mark.parametrize(
    "text",
    ["", "0\n1\n", "1\n0\n", "0\n1\n0 0", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\nx 0\n", "0\n2\n3 5\n2 6\n"],
)
def test_a_checkpoint_that_kafka_would_not_write_is_refused(text):
    with pytest.raises(CheckpointFormatError):
        parse_checkpoint(text)
