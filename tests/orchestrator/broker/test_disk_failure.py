"""A broker whose data directory turns read-only, on real processes (controller, brokers, moto's S3 server).

The fault is a real read-only file system: a bind mount of the broker's data directory onto itself, remounted
read-only (``mount --bind D D``; ``mount -o remount,ro,bind D``), as root. Files the broker opened before keep
writing to the underlying mount; every new open, create or delete in the directory fails with EROFS. The test
fails (never skips) when mounting is not permitted, and always unmounts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import KafkaStorageError
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECORD = b"r" * 200  # 60 of them fill about three 4 KiB segments (the live cluster's segment.bytes)


class ReadOnlyBindMount:
    """``directory`` made read-only in place until :meth:`release` (idempotent; call it in a finally)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.mounted = False
        _run_or_fail(["mount", "--bind", str(directory), str(directory)])
        self.mounted = True
        try:
            _run_or_fail(["mount", "-o", "remount,ro,bind", str(directory)])
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if not self.mounted:
            return
        if subprocess.run(["umount", str(self.directory)], capture_output=True, check=False).returncode != 0:
            _run_or_fail(["umount", "-l", str(self.directory)])  # busy: detach now, the kernel finishes later
        self.mounted = False


def _run_or_fail(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}; this test needs root")


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


def test_a_read_only_data_directory_is_a_storage_error_the_broker_survives_and_recovers_from(live):
    # A tiered topic whose local segments are kept (local.retention.ms=-1) until the disk has failed.
    tiered = {"remote.storage.enable": "true", "local.retention.ms": "-1"}
    live.call(lambda c: c.create_topic("kept", partitions=2, configs=tiered))
    kept_id = live.call(lambda c: c.topic("kept"))["topic_id"]
    broker_id = live.call(lambda c: c.topic("kept"))["partitions"][0]["leader_id"]
    kept = _partition_led_by(live, "kept", broker_id)
    live.call(lambda c: c.produce("kept", [RECORD] * 60, partition=kept))
    wait_until("a first segment copied", lambda: _highest_copied_offset(live, kept_id, kept) >= 0, 60)
    broker = live.process("broker", broker_id)
    data_dir = live.dir / "data" / f"broker-{broker_id}"
    assert (data_dir / f"kept-{kept}").is_dir()

    mount = ReadOnlyBindMount(data_dir)
    try:
        # Local retention now wants the copied segments gone: the tiering loop cannot delete them.
        live.call(lambda c: c.alter_configs("kept", {"local.retention.ms": "0"}))
        # A new partition led by this broker cannot get its directory: the client sees why, not "no leader".
        live.call(lambda c: c.create_topic("fresh", partitions=2))
        fresh = _partition_led_by(live, "fresh", broker_id)
        fresh_dir = data_dir / f"fresh-{fresh}"
        with pytest.raises(KafkaStorageError) as refused:
            live.call(lambda c: c.produce("fresh", [b"while read-only"], partition=fresh))
        assert f"log directory {fresh_dir}: [Errno 30] Read-only file system" in refused.value.message

        def loop_failure(loop: str, needle: str) -> list[dict[str, Any]]:
            return [
                e
                for e in _log_events(broker.log, "broker.loop_failed")
                if e.get("loop") == loop and needle in e.get("detail", "") and "Read-only file system" in e["detail"]
            ]

        (opening, *_) = wait_until("the metadata loop's failure", lambda: loop_failure("metadata", str(fresh_dir)), 30)
        assert opening["error"] == "KAFKA_STORAGE_ERROR" and opening["cause"].startswith("OSError: [Errno 30]")
        (tiering, *_) = wait_until("the tiering loop's failure", lambda: loop_failure("tiering", str(data_dir)), 30)
        assert tiering["error"] == "KAFKA_STORAGE_ERROR" and tiering["partition"] == kept
        assert tiering["cause"].startswith("OSError: [Errno 30] Read-only file system")
        os.kill(broker.pid, 0)  # still alive (raises if the process is gone)
        assert not fresh_dir.exists()
        copied_while_read_only = _highest_copied_offset(live, kept_id, kept)
    finally:
        mount.release()

    # The disk is back: no restart, the loops pick up where they failed.
    wait_until("the metadata loop to create the new partition's directory", fresh_dir.is_dir, 60)
    assert live.call(lambda c: c.produce("fresh", [b"after"], partition=fresh)) == (0, 0)
    assert copied_while_read_only < 59  # offset 59 was in the active segment, never closed before the disk came back
    live.call(lambda c: c.produce("kept", [RECORD] * 60, partition=kept))
    wait_until(
        "segments written after the disk came back to be copied",
        lambda: _highest_copied_offset(live, kept_id, kept) >= 60,
        60,
    )

    def tiering_recovered() -> list[dict[str, Any]]:
        recovered = _log_events(broker.log, "broker.loop_recovered")
        return [e for e in recovered if e.get("loop") == "tiering" and e.get("partition") == kept]

    wait_until("the tiering loop to report its recovery", tiering_recovered, 60)
    assert not (data_dir / f"kept-{kept}" / f"{0:020d}.log").exists()  # local retention caught up as well
    os.kill(broker.pid, 0)
