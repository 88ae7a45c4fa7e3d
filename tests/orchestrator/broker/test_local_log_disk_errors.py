"""A partition's local log on a failing disk: every OS error leaves it as KAFKA_STORAGE_ERROR naming the log
directory, and a failed operation leaves the log as the disk has it, to be retried once the disk is back.

Faults are real OS errors on real files (a regular file where a directory must be, a directory where a file must
be written or deleted), which work as root too; a half-written entry uses a fake file that writes half and fails.
"""

import errno
import re
from pathlib import Path

import pytest

from orchestrator.broker.local_log import LogConfig, PartitionLog, log_directory_error
from orchestrator.errors import KafkaStorageError, as_wire_error
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit

TID = Uuid.random()


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def open_log(tmp_path):
    opened: list[PartitionLog] = []

    def open_(directory: Path | None = None, **cfg) -> PartitionLog:
        config = LogConfig(**{"segment_bytes": 1000, "index_interval_bytes": 100, **cfg})
        plog = PartitionLog(directory or tmp_path / "orders-0", topic_id=TID, config=config, clock=Clock())
        opened.append(plog)
        return plog

    yield open_
    for plog in opened:
        plog.close()


def _values(plog: PartitionLog, start: int = 0) -> list[bytes]:
    return [r.value for r in plog.read(start, max_bytes=10**9)]


def test_the_storage_error_names_the_directory_the_os_error_and_a_file_other_than_the_directory():
    directory = Path("/data/broker-2/orders-0")
    on_directory = OSError(errno.EROFS, "Read-only file system", str(directory))
    assert log_directory_error(directory, on_directory).message == (
        "log directory /data/broker-2/orders-0: [Errno 30] Read-only file system"
    )
    on_file = OSError(errno.ENOSPC, "No space left on device", str(directory / "00000000000000000042.index"))
    assert log_directory_error(directory, on_file).message == (
        "log directory /data/broker-2/orders-0: [Errno 28] No space left on device (00000000000000000042.index)"
    )
    elsewhere = OSError(errno.ENOTDIR, "Not a directory", "/data/broker-2")
    assert log_directory_error(directory, elsewhere).message.endswith("[Errno 20] Not a directory (/data/broker-2)")
    wire = as_wire_error(log_directory_error(directory, on_directory))
    assert (wire.code, wire.name, wire.retriable) == (56, "KAFKA_STORAGE_ERROR", True)


def test_a_partition_directory_that_cannot_be_created_is_a_storage_error_naming_it(tmp_path, open_log):
    (tmp_path / "data").write_text("a file where the broker's data directory should be")
    directory = tmp_path / "data" / "orders-0"
    with pytest.raises(KafkaStorageError) as caught:
        open_log(directory)
    assert caught.value.message.startswith(f"log directory {directory}: [Errno {errno.ENOTDIR}] Not a directory")
    assert isinstance(caught.value.__cause__, OSError)

    (tmp_path / "data").unlink()  # the disk is back: the same call succeeds
    plog = open_log(directory)
    plog.append([(None, b"first", None)])
    assert _values(plog) == [b"first"]


def test_a_roll_that_cannot_create_the_next_segment_fails_the_append_and_succeeds_once_the_disk_is_back(open_log):
    plog = open_log()
    plog.append([(None, b"x" * 400, None)])
    plog.append([(None, b"y" * 400, None)])  # the next one does not fit: a roll
    next_log = plog.directory / f"{plog.log_end_offset:020d}.log"
    next_log.mkdir()  # the new segment's log file cannot be opened for writing
    with pytest.raises(KafkaStorageError) as caught:
        plog.append([(None, b"z" * 400, None)])
    assert str(plog.directory) in caught.value.message and next_log.name in caught.value.message
    assert plog.log_end_offset == 2

    next_log.rmdir()
    assert plog.append([(None, b"z" * 400, None)]) == (2, 2)
    assert _values(plog) == [b"x" * 400, b"y" * 400, b"z" * 400]
    assert [s.base_offset for s in plog.segments()] == [0, 2]


class _HalfWrites:
    """A segment file on a disk that fills up: the next write puts half its bytes down, then fails."""

    def __init__(self, real) -> None:
        self.real = real

    def write(self, data) -> int:
        self.real.write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", self.real.name)

    def close(self) -> None:
        self.real.close()


def test_a_batch_written_half_way_is_cut_off_and_the_log_stays_readable_and_dense(open_log):
    plog = open_log()
    plog.append([(b"k", b"v0", None)])
    active = plog._segments[-1]
    active._log_file = _HalfWrites(active._log_file)
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        plog.append([(b"k", b"v1", None)])
    assert plog.log_end_offset == 1

    assert plog.append([(b"k", b"v1", None), (b"k", b"v2", None)]) == (1, 2)
    assert _values(plog) == [b"v0", b"v1", b"v2"]
    plog.close()
    reopened = open_log()
    assert reopened.log_end_offset == 3 and _values(reopened) == [b"v0", b"v1", b"v2"]


def test_a_segment_leaves_the_log_only_once_its_files_are_deleted_and_a_second_call_finishes(open_log):
    plog = open_log()
    for i in range(9):  # batches of one record, two or three per segment
        plog.append([(None, b"%d" % i * 300, None)])
    first, second = plog.segments()[:2]
    second.index_path.unlink()
    second.index_path.mkdir()  # cannot be unlinked
    with pytest.raises(KafkaStorageError, match=re.escape(second.index_path.name)):
        plog.delete_local_segments_before(second.end_offset + 1)
    assert not first.log_path.exists()
    assert plog.local_log_start_offset == second.base_offset  # what the disk has: the second segment is still there
    assert _values(plog, plog.local_log_start_offset)[0] == b"%d" % second.base_offset * 300

    second.index_path.rmdir()
    assert [s.base_offset for s in plog.delete_local_segments_before(second.end_offset + 1)] == [second.base_offset]
    assert plog.local_log_start_offset == second.end_offset + 1
    plog.close()
    assert open_log().local_log_start_offset == second.end_offset + 1


def test_start_offsets_that_could_not_be_checkpointed_are_checkpointed_by_the_retry(open_log):
    plog = open_log()
    for i in range(9):
        plog.append([(None, b"%d" % i * 300, None)])
    tmp = plog.directory / "offsets.checkpoint.tmp"
    tmp.mkdir()  # the checkpoint cannot be written
    with pytest.raises(KafkaStorageError, match=r"offsets\.checkpoint\.tmp"):
        plog.advance_log_start_offset(4)
    assert plog.log_start_offset == 4  # moved in memory, not yet on disk

    tmp.rmdir()
    plog.advance_log_start_offset(4)  # the same call again, as a retrying caller makes it
    plog.close()
    reopened = open_log()
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (4, 4)
    assert _values(reopened, 4)[0] == b"4" * 300
