"""A follower's local log: a leader's batches appended as they are, and a divergent tail truncated (KIP-101)
(orchestrator/broker/local_log.py: append_replicated, truncate_to). The leader here is a PartitionLog too, written by
the produce path; the follower's files are checked byte for byte against it."""

import pytest

from orchestrator.broker.leader_epochs import EpochEntry
from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.errors import CorruptMessage
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit

TID = Uuid.random()


class Clock:
    now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def logs(tmp_path):
    opened = []

    def open_log(name, segment_bytes=600):
        config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100)
        plog = PartitionLog(tmp_path / name / "t-0", topic_id=TID, config=config, clock=Clock())
        opened.append(plog)
        return plog

    yield open_log
    for plog in opened:
        plog.close()


def _produce(plog, values, epoch):
    for value in values:
        plog.append([(None, value, None)], leader_epoch=epoch)


def _replicate(leader, follower):
    """What a follower's fetches bring, fetch after fetch, until it has the leader's log."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_replicated(leader.read_batches(follower.log_end_offset, max_bytes=300))


def _records(plog):
    return [(r.offset, r.value) for r in plog.read(plog.local_log_start_offset, max_bytes=1 << 20)]


def _all_batches(plog):
    return b"".join(p.read_bytes() for p in sorted(plog.directory.glob("*.log")))


def test_a_follower_has_the_leaders_batches_byte_for_byte_with_their_epochs(logs):
    leader, follower = logs("leader"), logs("follower", segment_bytes=400)
    _produce(leader, [b"a%02d" % i for i in range(20)], epoch=0)
    _produce(leader, [b"b%02d" % i for i in range(20)], epoch=3)
    _replicate(leader, follower)
    assert follower.log_end_offset == 40
    assert _all_batches(follower) == _all_batches(leader), "its own segment sizes, the same batches"
    assert len(follower.segments()) != len(leader.segments())
    assert follower.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 20))
    follower.close()
    reopened = PartitionLog(follower.directory, topic_id=TID, config=follower.config, clock=Clock())
    try:
        assert _records(reopened) == _records(leader)
        assert reopened.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 20))
    finally:
        reopened.close()


def test_batches_already_held_are_skipped_and_a_gap_or_a_bad_crc_writes_nothing(logs):
    leader, follower = logs("leader"), logs("follower")
    _produce(leader, [b"x%02d" % i for i in range(10)], epoch=0)
    _replicate(leader, follower)
    assert follower.append_replicated(leader.read_batches(0)) == 0, "a fetch from an older offset adds nothing"
    _produce(leader, [b"y%02d" % i for i in range(5)], epoch=0)
    with pytest.raises(CorruptMessage, match="gap"):
        follower.append_replicated(leader.read_batches(12))
    damaged = bytearray(leader.read_batches(10))
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="CRC"):
        follower.append_replicated(bytes(damaged))
    assert follower.log_end_offset == 14, "the whole batches before the damaged one are written, nothing from it on"


def test_a_divergent_tail_is_truncated_at_a_batch_boundary_and_the_log_goes_on_from_there(logs):
    old_leader, new_leader = logs("old"), logs("new")
    _produce(old_leader, [b"c%02d" % i for i in range(30)], epoch=0)
    _replicate(old_leader, new_leader)
    _produce(old_leader, [b"lost%02d" % i for i in range(7)], epoch=0)  # never replicated: not acknowledged to all
    _produce(new_leader, [b"new%02d" % i for i in range(4)], epoch=1)
    end_of_0 = new_leader.leader_epochs.end_offset_for(0, new_leader.log_end_offset)
    assert end_of_0 == (0, 30)
    assert old_leader.truncate_to(30) is True
    assert old_leader.log_end_offset == 30 and old_leader.leader_epochs.entries == (EpochEntry(0, 0),)
    assert not any(p.stem.isdigit() and int(p.stem) > 30 for p in old_leader.directory.glob("*.snapshot"))
    _replicate(new_leader, old_leader)
    assert _records(old_leader) == _records(new_leader)
    assert old_leader.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 30))
    assert old_leader.truncate_to(34) is False, "nothing past the end"


def test_truncating_inside_a_batch_drops_the_whole_batch_and_producers_are_rebuilt(logs):
    plog = logs("p", segment_bytes=10_000)
    plog.append([(None, b"a", None), (None, b"b", None), (None, b"c", None)], leader_epoch=0)  # offsets 0-2
    plog.append([(None, b"d", None)], leader_epoch=0)
    plog.truncate_to(1)
    assert plog.log_end_offset == 0
    plog.append([(None, b"z", None)], leader_epoch=2)
    assert _records(plog) == [(0, b"z")]


def test_a_follower_whose_log_ends_below_the_leaders_start_starts_again_there_and_catches_up(logs, tmp_path):
    """A replica away while the leader's log start moved past its end (a delete-policy disable, retention) gets
    OFFSET_OUT_OF_RANGE forever unless it starts again at the leader's log start (Kafka's follower does)."""
    from orchestrator.broker.replica_fetcher import ReplicaFetcher

    leader, follower = logs("leader", segment_bytes=300), logs("follower", segment_bytes=300)
    _produce(leader, [b"d%02d" % i for i in range(10)], epoch=0)
    _replicate(leader, follower)
    _produce(leader, [b"e%02d" % i for i in range(30)], epoch=1)
    leader.advance_log_start_offset(leader.closed_segments()[-1].end_offset + 1)
    start = leader.log_start_offset
    assert follower.log_end_offset < start, "the follower's log ends below the leader's start"

    ReplicaFetcher._out_of_range(follower, leader_hw=leader.log_end_offset, leader_start=start)
    assert (follower.log_start_offset, follower.local_log_start_offset, follower.log_end_offset) == (start,) * 3
    assert sorted(int(p.stem) for p in follower.directory.glob("*.log")) == [start]
    assert follower.leader_epochs.entries == ()
    _replicate(leader, follower)
    assert _records(follower) == _records(leader)
    assert follower.leader_epochs.entries == leader.leader_epochs.entries

    follower.close()
    reopened = PartitionLog(follower.directory, topic_id=TID, config=follower.config, clock=Clock())
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (start, leader.log_end_offset)
        assert _records(reopened) == _records(leader)
    finally:
        reopened.close()


def test_a_follower_past_the_leaders_high_watermark_is_cut_back_and_one_inside_is_left_alone(logs):
    from orchestrator.broker.replica_fetcher import ReplicaFetcher

    plog = logs("f", segment_bytes=10_000)
    _produce(plog, [b"x%02d" % i for i in range(8)], epoch=0)
    ReplicaFetcher._out_of_range(plog, leader_hw=8, leader_start=0)
    assert plog.log_end_offset == 8
    ReplicaFetcher._out_of_range(plog, leader_hw=5, leader_start=0)
    assert plog.log_end_offset == 5 and plog.log_start_offset == 0
