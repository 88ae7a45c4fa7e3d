"""A broker whose data directory turns read-only halts, as a Kafka broker whose only log directory fails does, and
recovers every acknowledged record once started on the disk that is back; on real processes (controller, brokers,
the embedded S3).

The fault is a real read-only file system: a bind mount of the broker's data directory onto itself, remounted
read-only (``mount --bind D D``; ``mount -o remount,ro,bind D``), as root. Files the broker opened before keep
writing to the underlying mount; every new open, create or delete in the directory fails with EROFS. The test
fails (never skips) when mounting is not permitted, and always unmounts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.disk import DiskFaultRefused, ReadOnlyMount
from chaos.io_errors import IoErrors, build_library, preloaded
from orchestrator.broker.log_dir_failure import EXIT_LOG_DIR_FAILED
from orchestrator.errors import LocalClusterError, TieredError
from orchestrator.local import cluster as lc
from orchestrator.local import processes
from orchestrator.local.state import is_ours
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECORD = b"r" * 200  # 60 of them fill about three 4 KiB segments (the live cluster's segment.bytes)


def read_only(directory: Path) -> ReadOnlyMount:
    """The fault (chaos.disk), failing the test when it cannot be made."""
    try:
        return ReadOnlyMount(directory)
    except DiskFaultRefused as exc:
        pytest.fail(f"{exc}; this test needs root")


def _log_events(path: str, event: str) -> list[dict[str, Any]]:
    found = []
    for line in Path(path).read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


def _highest_copied_offset(live: LiveCluster, topic_id: Any, partition: int) -> int:
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.refresh()
        return rlmm.highest_copied_offset(topic_id, partition)


def _partition_led_by(live: LiveCluster, topic: str, broker_id: int) -> int:
    partitions = live.call(lambda c: c.topic(topic))["partitions"]
    led = [p["partition_index"] for p in partitions if p["leader_id"] == broker_id]
    assert led, f"broker {broker_id} leads no partition of {topic}: {partitions}"
    return led[0]


@pytest.fixture
def live(tmp_path):
    cluster = LiveCluster(tmp_path / "cluster", brokers=2, controllers=1)
    try:
        yield cluster
    finally:
        cluster.close()


def _values(live: LiveCluster, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
    async def read(c: Any) -> list[tuple[int, bytes | None]]:
        return [(r.offset, r.value) async for r in c.consume(topic, partition)]

    return live.call(read)


def _failures(path: str) -> list[dict[str, Any]]:
    return _log_events(path, "log_dir.failed")


def test_a_read_only_data_directory_halts_the_broker_which_recovers_every_acknowledged_record_once_the_disk_is_back(
    live,
):
    # A tiered topic whose local segments are kept (local.retention.ms=-1): every record is on this disk.
    tiered = {"remote.storage.enable": "true", "local.retention.ms": "-1"}
    live.call(lambda c: c.create_topic("kept", partitions=2, configs=tiered))
    kept_id = live.call(lambda c: c.topic("kept"))["topic_id"]
    broker_id = live.call(lambda c: c.topic("kept"))["partitions"][0]["leader_id"]
    kept = _partition_led_by(live, "kept", broker_id)
    live.call(lambda c: c.produce("kept", [RECORD] * 60, partition=kept))
    wait_until("a first segment copied", lambda: _highest_copied_offset(live, kept_id, kept) >= 0, 60)
    broker = live.process("broker", broker_id)
    data_dir = live.dir / "data" / f"broker-{broker_id}"
    acknowledged = {offset: RECORD for offset in range(60)}

    mount = read_only(data_dir)
    try:
        # The open segment takes a few more batches (its file was open before the disk turned read-only); the
        # roll cannot create the next segment's files: the broker halts, and that batch is never acknowledged.
        values = [(b"after %d " % i).ljust(len(RECORD), b".") for i in range(60)]  # three segments: a roll

        def on_ack(base: int, records: int) -> None:
            acknowledged.update({base + i: values[base - 60 + i] for i in range(records)})

        with pytest.raises(Exception):  # noqa: B017 - the connection dies with the broker, whatever the client says
            live.call(lambda c: c.produce("kept", values, partition=kept, on_ack=on_ack))
        wait_until("the broker to halt", lambda: not is_ours(broker), 30)
        assert _exit_status(broker) == EXIT_LOG_DIR_FAILED
        [failed] = _failures(broker.log)
        assert failed["directory"] == str(data_dir / f"kept-{kept}") and failed["exit_status"] == EXIT_LOG_DIR_FAILED
        assert failed["error"] == "[Errno 30] Read-only file system" and str(data_dir) in failed["action"]

        # Started again on the disk that still fails, it halts the same way as soon as it writes to it.
        try:
            again = lc.restart(live.dir, "broker", broker_id)
        except LocalClusterError:  # it wrote to the disk before it was ready
            again = live.process("broker", broker_id)
        if is_ours(again):
            with pytest.raises(Exception):  # noqa: B017 - as above
                live.call(lambda c: c.produce("kept", [b"on the failed disk"], partition=kept))
        wait_until("the restarted broker to halt", lambda: not is_ours(again), 60)
        assert _exit_status(again) == EXIT_LOG_DIR_FAILED
        assert [f["error"] for f in _failures(again.log)][-1] == "[Errno 30] Read-only file system"
    except BaseException:
        mount.release()
        raise
    mount.release()

    # The disk is back: the broker starts, and every acknowledged record is read back at its offset (what no one
    # acknowledged may or may not be there, as in Kafka, but nothing comes between or after out of order).
    lc.restart(live.dir, "broker", broker_id)
    end = _every_acknowledged_record_read_back(live, kept, acknowledged)
    assert live.call(lambda c: c.produce("kept", [RECORD] * 60, partition=kept)) == (end, end + 59)
    wait_until(
        "segments written after the disk came back to be copied",
        lambda: _highest_copied_offset(live, kept_id, kept) >= end,
        60,
    )


def _every_acknowledged_record_read_back(live: LiveCluster, partition: int, acknowledged: dict[int, bytes]) -> int:
    """Once the partition of "kept" is served again: its offsets run from 0 without a hole and every acknowledged
    record is at its offset (what no one acknowledged may or may not be there, as in Kafka). Returns its end."""
    read = wait_until("the partition to be served again", lambda: _read_or_none(live, "kept", partition), 60)
    assert [offset for offset, _ in read] == list(range(len(read)))
    assert {offset: value for offset, value in read if offset in acknowledged} == acknowledged
    return len(read)


def _read_or_none(live: LiveCluster, topic: str, partition: int) -> list[tuple[int, bytes | None]] | None:
    try:
        return _values(live, topic, partition) or None
    except TieredError:
        return None


def _exit_status(p: Any) -> int | None:
    """The exit status of a process this test process started (lc.up and lc.restart keep them to reap)."""
    child = processes._CHILDREN.get(p.pid)
    return None if child is None else child.wait(timeout=10)


def test_a_data_directory_failing_with_io_errors_halts_the_broker_which_recovers_every_acknowledged_record_after(
    tmp_path,
):
    """The same with a disk that answers EIO to every file operation under the broker's data directory (the chaos
    suite's preload library, chaos/io_errors.py: no root needed): the next produce cannot append, the broker halts
    with KAFKA_STORAGE_ERROR's cause in its log and nothing of that batch acknowledged, a restart on the still
    failing disk halts again, and once the disk answers every acknowledged record is read back at its offset."""
    library = build_library(tmp_path / "native")
    with preloaded(library, tmp_path / "cluster" / "data"):
        live = LiveCluster(tmp_path / "cluster", brokers=2, controllers=1)
    try:
        tiered = {"remote.storage.enable": "true", "local.retention.ms": "-1"}
        live.call(lambda c: c.create_topic("kept", partitions=2, configs=tiered))
        broker_id = live.call(lambda c: c.topic("kept"))["partitions"][0]["leader_id"]
        kept = _partition_led_by(live, "kept", broker_id)
        live.call(lambda c: c.produce("kept", [RECORD] * 60, partition=kept))
        broker = live.process("broker", broker_id)
        data_dir = live.dir / "data" / f"broker-{broker_id}"
        acknowledged = {offset: RECORD for offset in range(60)}

        fault = IoErrors(data_dir)
        try:
            values = [(b"after %d " % i).ljust(len(RECORD), b".") for i in range(20)]

            def on_ack(base: int, records: int) -> None:
                acknowledged.update({base + i: values[base - 60 + i] for i in range(records)})

            with pytest.raises(Exception):  # noqa: B017 - the connection dies with the broker, whatever it says
                live.call(lambda c: c.produce("kept", values, partition=kept, on_ack=on_ack))
            wait_until("the broker to halt", lambda: not is_ours(broker), 30)
            assert _exit_status(broker) == EXIT_LOG_DIR_FAILED
            assert len(acknowledged) == 60, "nothing written to the failing disk was acknowledged"
            failed = _failures(broker.log)[-1]
            assert failed["error"] == "[Errno 5] Input/output error" and str(data_dir) in failed["action"]

            with preloaded(library, live.dir / "data"):
                try:
                    again = lc.restart(live.dir, "broker", broker_id)
                except LocalClusterError:  # it read or wrote its disk before it was ready
                    again = live.process("broker", broker_id)
            wait_until("the restarted broker to halt", lambda: not is_ours(again), 60)
            assert _exit_status(again) == EXIT_LOG_DIR_FAILED, Path(again.log).read_text()[-3000:]
        finally:
            fault.release()

        with preloaded(library, live.dir / "data"):  # the library stays, switched off: the disk answers again
            lc.restart(live.dir, "broker", broker_id)
        end = _every_acknowledged_record_read_back(live, kept, acknowledged)
        assert live.call(lambda c: c.produce("kept", [RECORD] * 10, partition=kept)) == (end, end + 9)
    finally:
        live.close()
