"""A failed disk halts the broker (orchestrator.broker.log_dir_failure): a device failure of a partition's files is
logged once and halts once, whatever thread reports it; any other OS error is left to the partition. The halt is
injected here; tests/orchestrator/broker/test_disk_failure.py halts a real broker on a real read-only disk."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_dir_failure import EXIT_LOG_DIR_FAILED, LogDirFailureChannel, is_device_failure
from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit


class Halts:
    def __init__(self) -> None:
        self.statuses: list[int] = []

    def __call__(self, status: int) -> None:
        self.statuses.append(status)


@pytest.mark.parametrize(
    ("code", "device"),
    [
        (errno.EIO, True),
        (errno.EROFS, True),
        (errno.ENOSPC, True),
        (errno.EDQUOT, True),
        (errno.ENOENT, False),
        (errno.EISDIR, False),
        (errno.ENOTDIR, False),
        (errno.EEXIST, False),
        (None, False),
    ],
)
def test_only_a_disk_that_failed_or_refuses_writes_is_a_device_failure(code: int | None, device: bool) -> None:
    exc = OSError(code, "x") if code is not None else OSError("no errno")
    assert is_device_failure(exc) is device


def test_the_first_device_failure_is_logged_and_halts_once_whatever_thread_reports_it(tmp_path: Path) -> None:
    halts = Halts()
    channel = LogDirFailureChannel(tmp_path, halt=halts)
    barrier = threading.Barrier(8)

    def report(i: int) -> None:
        barrier.wait()
        channel.report(tmp_path / f"t-{i}", OSError(errno.EIO, "Input/output error", str(tmp_path / f"t-{i}/x")))

    with capture_logs() as logs:
        threads = [threading.Thread(target=report, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert halts.statuses == [EXIT_LOG_DIR_FAILED] == [74]
    [failed] = [e for e in logs if e["event"] == "log_dir.failed"]
    assert failed["log_level"] == "critical" and failed["error"] == "[Errno 5] Input/output error"
    assert failed["data_dir"] == str(tmp_path) and failed["directory"].startswith(str(tmp_path / "t-"))
    assert "start the broker again" in failed["action"]
    assert channel.failed is not None and channel.failed[0] == Path(failed["directory"])


def test_an_os_error_that_is_not_the_disks_neither_logs_nor_halts(tmp_path: Path) -> None:
    halts = Halts()
    channel = LogDirFailureChannel(tmp_path, halt=halts)
    with capture_logs() as logs:
        channel.report(tmp_path / "t-0", FileNotFoundError(errno.ENOENT, "No such file or directory"))
    assert halts.statuses == [] and logs == [] and channel.failed is None


class _FullDisk:
    """A segment file on a disk that fills up: the next write puts half its bytes down, then fails."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, data: Any) -> int:
        self.real.write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", self.real.name)

    def close(self) -> None:
        self.real.close()


def _log(directory: Path, channel: LogDirFailureChannel) -> PartitionLog:
    config = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    return PartitionLog(directory, topic_id=Uuid.random(), config=config, clock=lambda: 1, on_failure=channel.report)


def test_an_append_on_a_full_disk_reports_the_failure_before_its_storage_error_leaves(tmp_path: Path) -> None:
    halts = Halts()
    channel = LogDirFailureChannel(tmp_path, halt=halts)
    plog = _log(tmp_path / "orders-0", channel)
    plog.append([(b"k", b"v0", None)])
    active = plog._segments[-1]
    active._log_file = _FullDisk(active._log_file)  # type: ignore[assignment]
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        plog.append([(b"k", b"v1", None)])
    assert halts.statuses == [EXIT_LOG_DIR_FAILED]
    assert channel.failed is not None and channel.failed[0] == tmp_path / "orders-0"
    assert plog.log_end_offset == 1  # the half-written batch was never given its offset
    plog.close()


def test_a_file_in_the_way_of_a_roll_is_the_partitions_storage_error_and_no_halt(tmp_path: Path) -> None:
    halts = Halts()
    plog = _log(tmp_path / "orders-0", LogDirFailureChannel(tmp_path, halt=halts))
    plog.append([(None, b"x" * 400, None)])
    plog.append([(None, b"y" * 400, None)])
    (plog.directory / f"{plog.log_end_offset:020d}.log").mkdir()  # the next segment's file cannot be opened
    with pytest.raises(KafkaStorageError):
        plog.append([(None, b"z" * 400, None)])
    assert halts.statuses == []
    plog.close()
