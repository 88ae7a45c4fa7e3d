"""What a broker reports of its copies to remote storage (``RemoteLogManager.copy_states``, sent to the controller for
``tiering status``): the upload in flight since its start, stalled past the threshold, and the error of a failed
copy pass; and an S3 endpoint that accepts connections and never answers (a paused S3) ends in that error within the
S3 client's timeouts, not in a copy that hangs. Real SQLite store and segment files; moto's S3 server, or a socket
that never answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.broker.remote_log_manager import DEFAULT_COPY_STALL_THRESHOLD_MS, PartitionCopyState
from orchestrator.broker.remote_storage_setup import remote_storage
from orchestrator.errors import SettingsError
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.settings import RemoteStorageManagerSettings, S3Settings
from remote_storage.retry import S3_MAX_ATTEMPTS
from remote_storage.s3 import make_s3_client
from tests.support.broker_harness import BrokerUnderTest, ControllerWriter
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[ControllerWriter]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    yield ControllerWriter(store)
    store.close()


def _broker(
    tmp_path: Path, s3_client: object, bucket: str, clock: FakeClock, *, s3_max_attempts: int = S3_MAX_ATTEMPTS
) -> BrokerUnderTest:
    files = {"data_dir": tmp_path / "broker-1", "store_path": tmp_path / "metadata.db"}
    return BrokerUnderTest(
        broker_id=1, **files, s3_client=s3_client, bucket=bucket, now_ms=clock, s3_max_attempts=s3_max_attempts
    )


def test_an_upload_in_flight_is_reported_from_its_start_with_its_object_and_stalled_past_the_threshold(
    tmp_path: Path, writer: ControllerWriter, s3_client, bucket: str
) -> None:
    clock = FakeClock()
    broker = _broker(tmp_path, s3_client, bucket, clock)
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 20)
        broker.log(tid).roll()
        segments = broker.log(tid).closed_segments()
        segment = segments[0]
        seen: list[PartitionCopyState | None] = []

        def during_upload(**_kwargs: object) -> None:  # in the copying thread, as each object goes up
            if not seen:
                clock.ms += DEFAULT_COPY_STALL_THRESHOLD_MS - 1  # not stalled yet
                seen.append(broker.rlm.copy_states().get((tid, 0)))
                clock.ms += 1
                seen.append(broker.rlm.copy_states().get((tid, 0)))

        s3_client.meta.events.register("before-send.s3.PutObject", during_upload)
        try:
            assert broker.rlm.copy_partition(tid, 0).copied == len(segments)
        finally:
            s3_client.meta.events.unregister("before-send.s3.PutObject", during_upload)

        first, second = seen
        assert first is not None and second is not None
        assert first.in_flight_since_ms == T0 and not first.stalled
        assert first.in_flight is not None
        assert first.in_flight.startswith(f"upload of segment {segment.base_offset}-{segment.end_offset} of orders-0 ")
        assert f" to s3://{bucket}/tiered/orders-{tid}/" in first.in_flight and first.in_flight.endswith(".log")
        assert second.stalled and second.in_flight_since_ms == T0
        assert broker.rlm.copy_states() == {}, "nothing in flight, nothing failed: nothing to report"
    finally:
        broker.close()


def test_a_failed_copy_pass_is_reported_with_its_error_until_a_pass_ends_without_one(
    tmp_path: Path, writer: ControllerWriter, s3_client, bucket: str
) -> None:
    clock = FakeClock()
    broker = _broker(tmp_path, s3_client, bucket, clock)
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 20)
        faults = FaultInjector(s3_client)
        for attempt in (1, 2):
            faults.fail("PutObject", *["internal"] * S3_MAX_ATTEMPTS)  # every attempt of the pass's upload
            clock.ms += 1000
            assert broker.tier(tid) == 0
            state = broker.rlm.copy_states()[(tid, 0)]
            assert state.failed_passes == attempt and state.last_error_ms == clock.ms
            assert state.last_error is not None and state.last_error.startswith("RemoteStorageError: ")
            assert state.in_flight_since_ms == -1 and state.in_flight is None and not state.stalled
        assert broker.rlm.copy_partition(tid, 0).failure is None  # S3 answers again
        assert broker.rlm.copy_states() == {}, "a pass that ended without an error clears the last one"
    finally:
        broker.close()


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An address that accepts TCP connections (the kernel's backlog) and never answers: a paused S3 server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_the_s3_client_takes_its_timeouts_from_the_s3_settings() -> None:
    settings = S3Settings(endpoint_url="http://127.0.0.1:9", connect_timeout_s=0.5, read_timeout_s=1.5)
    config = remote_storage(settings, RemoteStorageManagerSettings()).rsm.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (0.5, 1.5)
    default = remote_storage(S3Settings(endpoint_url="http://127.0.0.1:9"), RemoteStorageManagerSettings())
    assert (default.rsm.client.meta.config.connect_timeout, default.rsm.client.meta.config.read_timeout) == (5, 30)


def test_every_s3_call_is_tried_as_many_times_as_the_s3_settings_say(
    tmp_path: Path, writer: ControllerWriter, s3_client, bucket: str
) -> None:
    """``[s3] max_attempts`` reaches the store (the retry layer's 8 by default), and a call that fails every try
    is tried exactly that many times, then ends the copy pass in its error."""
    assert S3Settings().max_attempts == S3_MAX_ATTEMPTS
    assert remote_storage(S3Settings(max_attempts=3), RemoteStorageManagerSettings()).rsm.max_attempts == 3
    with pytest.raises(SettingsError, match=r"\[s3\] max_attempts must be >= 1, got 0"):
        S3Settings(max_attempts=0)
    clock = FakeClock()
    broker = _broker(tmp_path, s3_client, bucket, clock, s3_max_attempts=2)
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 20)
        faults = FaultInjector(s3_client)
        faults.fail("PutObject", "internal", "internal", "internal")  # more failures than the pass will try
        assert broker.tier(tid) == 0
        assert faults.calls["PutObject"] == 2, "tried twice, not the default eight times"
        state = broker.rlm.copy_states()[(tid, 0)]
        assert state.failed_passes == 1 and state.last_error is not None and "InternalError" in state.last_error
    finally:
        broker.close()


def test_an_s3_that_never_answers_ends_the_copy_pass_in_an_error_within_the_client_timeouts(
    tmp_path: Path, writer: ControllerWriter, silent_endpoint: str
) -> None:
    clock = FakeClock()
    hung = make_s3_client(endpoint_url=silent_endpoint, connect_timeout=0.2, read_timeout=0.2)
    broker = _broker(tmp_path, hung, "tiered-storage", clock, s3_max_attempts=2)  # each try waits out a timeout
    try:
        tid = writer.create_topic("orders")
        broker.produce(tid, 20)
        assert broker.tier(tid) == 0
        state = broker.rlm.copy_states()[(tid, 0)]
        assert state.failed_passes == 1 and state.in_flight is None
        assert state.last_error is not None and "timeout" in state.last_error.lower(), state.last_error
    finally:
        broker.close()
