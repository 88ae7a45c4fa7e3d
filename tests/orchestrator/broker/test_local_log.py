import pytest

from orchestrator.broker.local_log import LogConfig, PartitionLog, encode_entry
from orchestrator.errors import InconsistentTopicId, OffsetOutOfRange
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


_OPEN: list[PartitionLog] = []


@pytest.fixture(autouse=True)
def _close_logs():
    yield
    while _OPEN:
        _OPEN.pop().close()


def _log(tmp_path, topic_id=None, clock=None, **cfg):
    config = LogConfig(**{"segment_bytes": 1000, "index_interval_bytes": 100, **cfg})
    log = PartitionLog(tmp_path / "orders-0", topic_id=topic_id or TID, config=config, clock=clock or Clock())
    _OPEN.append(log)
    return log


TID = Uuid.random()


def test_appends_get_dense_offsets_and_roll_by_size(tmp_path):
    log = _log(tmp_path)
    first, last = log.append([(None, b"v%03d" % i, None) for i in range(100)])
    assert (first, last) == (0, 99) and log.log_end_offset == 100
    segs = log.segments()
    assert len(segs) > 3
    assert all(s.size_bytes <= 1000 for s in segs)
    assert [s.base_offset for s in segs[1:]] == [s.end_offset + 1 for s in segs[:-1]]
    assert [r.value for r in log.read(0, max_bytes=10**9)] == [b"v%03d" % i for i in range(100)]


def test_reads_start_at_any_offset_through_the_index(tmp_path):
    log = _log(tmp_path)
    log.append([(b"k", b"x" * (i % 7), None) for i in range(300)])
    for start in (0, 1, 57, 150, 299):
        recs = log.read(start, max_bytes=200)
        assert recs[0].offset == start and recs[0].key == b"k"
        assert [r.offset for r in recs] == list(range(start, start + len(recs)))
    assert log.read(300) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(301)


def test_roll_by_time(tmp_path):
    clock = Clock()
    log = _log(tmp_path, clock=clock, segment_ms=60_000, segment_bytes=10**6)
    log.append([(None, b"a", None)])
    clock.now += 59_999
    assert not log.maybe_roll_by_time()
    clock.now += 1
    assert log.maybe_roll_by_time()
    assert len(log.closed_segments()) == 1


def test_reopen_keeps_everything_and_truncates_a_torn_tail(tmp_path):
    log = _log(tmp_path)
    log.append([(None, b"r%d" % i, None) for i in range(50)])
    active = log.segments()[-1].log_path
    good_size = active.stat().st_size
    with active.open("ab") as f:  # a torn write: half an entry
        f.write(encode_entry(50, 1, None, b"torn")[:9])
    reopened = _log(tmp_path)
    assert reopened.log_end_offset == 50
    assert active.stat().st_size == good_size
    assert [r.value for r in reopened.read(0, max_bytes=10**9)][-1] == b"r49"
    reopened.append([(None, b"next", None)])
    assert reopened.read(50)[0].value == b"next"


def test_a_flipped_byte_in_the_active_segment_truncates_from_that_entry(tmp_path):
    log = _log(tmp_path, segment_bytes=10**6)
    log.append([(None, b"value-%d" % i, None) for i in range(10)])
    path = log.segments()[-1].log_path
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last entry
    path.write_bytes(bytes(data))
    assert _log(tmp_path, segment_bytes=10**6).log_end_offset == 9


def test_a_directory_of_another_topic_id_is_stale_and_refused(tmp_path):
    _log(tmp_path).append([(None, b"x", None)])
    with pytest.raises(InconsistentTopicId, match="stale"):
        _log(tmp_path, topic_id=Uuid.random())


def test_start_offsets_move_forward_and_survive_a_restart(tmp_path):
    log = _log(tmp_path)
    log.append([(None, b"%d" % i, None) for i in range(200)])
    segs = log.closed_segments()
    dropped = log.delete_local_segments_before(segs[2].base_offset)
    assert len(dropped) == 2
    assert log.local_log_start_offset == segs[2].base_offset and log.log_start_offset == 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0)
    log.advance_log_start_offset(log.local_log_start_offset)
    log.advance_log_start_offset(3)  # never backwards
    reopened = _log(tmp_path)
    assert reopened.log_start_offset == segs[2].base_offset == reopened.local_log_start_offset
    assert reopened.read(reopened.local_log_start_offset)[0].offset == segs[2].base_offset
