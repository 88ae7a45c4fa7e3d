"""A broker's RLMM writes go to the active controller (AppendRemoteLogMetadata, our key 10955): the controller side
appends a request's records all or none under the store's copy fence and says why it refuses; the broker side
raises the error the answer names, refuses to write before it is connected or from its own event loop, and a copy
record that landed before its answer was lost is not taken for a failed copy."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.broker.rlmm_appender import ControllerRlmmAppend
from orchestrator.controller.rlmm_appends import BrokerRlmmAppends
from orchestrator.errors import (
    BrokerNotAvailable,
    InvalidRequest,
    NotController,
    StaleTieredEpoch,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.records import SegmentState, TieredState, encode_record
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from tests.support.metadata_records import copy_started, tiered, topic

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


@pytest.fixture
def store() -> Iterator[InMemoryMetadataStore]:
    s = InMemoryMetadataStore()
    yield s
    s.close()


def _enabled_topic(store: InMemoryMetadataStore, epoch: int = 0) -> Uuid:
    lease = store.acquire_lease(holder="c", now_ms=NOW, ttl_ms=10_000)
    assert lease is not None
    tid = Uuid.random()
    store.append(
        [topic("orders", tid), tiered(tid, epoch, TieredState.ENABLED)], controller_epoch=lease.controller_epoch
    )
    return tid


def _disable(store: InMemoryMetadataStore, tid: Uuid, epoch: int) -> None:
    lease = store.current_lease()
    assert lease is not None
    store.append([tiered(tid, epoch, TieredState.DISABLING)], controller_epoch=lease.controller_epoch)


# -- the controller's side ----------------------------------------------------------------------------------------


def test_the_controller_appends_a_requests_records_and_answers_the_last_offset(store):
    tid = _enabled_topic(store)
    records = [copy_started(tid, 0), copy_started(tid, 0, start_offset=100)]
    body = {"broker_id": 1, "records": [encode_record(r) for r in records]}
    answer = BrokerRlmmAppends(store).append(body, now_ms=NOW)
    assert (answer["error_code"], answer["offsets"]) == (0, [0, 1])
    assert [e.record for e in store.read_remote_log_metadata()] == records


class CountingReads(InMemoryMetadataStore):
    """A store that counts the RLMM entries it is asked to read back."""

    read_back = 0

    def read_remote_log_metadata(self, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        for entry in super().read_remote_log_metadata(**kwargs):
            self.read_back += 1
            yield entry


def test_the_controller_folds_what_it_appended_and_reads_back_only_what_others_appended():
    store = CountingReads()
    tid = _enabled_topic(store)  # type: ignore[arg-type]
    appends = BrokerRlmmAppends(store)
    for start in (0, 100, 200):
        body = {"broker_id": 1, "records": [encode_record(copy_started(tid, 0, start_offset=start))]}
        assert appends.append(body, now_ms=NOW)["error_code"] == 0
    assert store.read_back == 0, "its own appends are folded as written, never read back"
    other = copy_started(tid, 0, start_offset=300)
    store.append_remote_log_metadata([other], now_ms=NOW)  # another writer (the controller's core, say)
    body = {"broker_id": 2, "records": [encode_record(other)]}  # the same copy start again, from a broker
    assert appends.append(body, now_ms=NOW)["offsets"] == [-1], "the other's record was read: this one is moot"
    assert store.read_back == 1
    store.close()


def test_a_broker_folds_its_own_appends_as_written_and_reads_back_only_what_other_brokers_appended_before_them():
    store = CountingReads()
    tid = _enabled_topic(store)  # type: ignore[arg-type]
    appends = BrokerRlmmAppends(store)

    def broker(broker_id: int) -> RemoteLogMetadataManager:
        def append(records: Any, *, now_ms: int) -> list[int]:
            body = {"broker_id": broker_id, "records": [encode_record(r) for r in records]}
            return list(appends.append(body, now_ms=now_ms)["offsets"])

        return RemoteLogMetadataManager(store, append=append)

    a, b = broker(1), broker(2)
    a.copy_started(_segment(tid), now_ms=NOW)
    b.copy_started(_segment(tid, start=100), now_ms=NOW)
    b.copy_started(_segment(tid, start=200), now_ms=NOW)
    assert store.read_back == 1, "b read a's record before its own, and only that"
    a.copy_started(_segment(tid, start=300), now_ms=NOW)
    assert store.read_back == 3, "a read b's two records before its own, and only those"
    fresh = RemoteLogMetadataManager(store)
    fresh.refresh()
    b.refresh()
    assert a.segments(tid) == b.segments(tid) == fresh.segments(tid) and len(fresh.segments(tid)) == 4
    store.close()


def test_a_record_that_does_not_decode_or_is_not_an_rlmm_record_is_invalid_request_and_nothing_is_written(store):
    tid = _enabled_topic(store)
    good = encode_record(copy_started(tid, 0))
    for bad in ([good, b"\x00\x01"], [good, encode_record(topic("other", Uuid.random()))], []):
        answer = BrokerRlmmAppends(store).append({"broker_id": 1, "records": bad}, now_ms=NOW)
        assert answer["error_code"] == InvalidRequest.code and answer["offsets"] == [], answer
    assert list(store.read_remote_log_metadata()) == []


def test_a_retried_record_landing_after_its_state_or_a_later_one_is_left_out_and_answered_minus_one(store):
    tid = _enabled_topic(store)
    appends = BrokerRlmmAppends(store)
    seg = _segment(tid)
    rlmm = RemoteLogMetadataManager(
        store,
        append=lambda records, *, now_ms: appends.append(
            {"broker_id": 1, "records": [encode_record(r) for r in records]}, now_ms=now_ms
        )["offsets"],
    )
    rlmm.copy_started(seg, now_ms=NOW)
    rlmm.copy_finished(seg, broker_id=1, now_ms=NOW)
    [started] = rlmm.transition([seg], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=NOW)
    rlmm.transition([seg], SegmentState.DELETE_SEGMENT_FINISHED, broker_id=1, now_ms=NOW)
    before = [e.record for e in store.read_remote_log_metadata()]
    late = [copy_started(tid, 0, segment_id=seg.segment_id), *[e.record for e in store.read_remote_log_metadata()][2:3]]
    answer = appends.append({"broker_id": 1, "records": [encode_record(r) for r in late]}, now_ms=NOW)
    assert (answer["error_code"], answer["offsets"]) == (0, [-1, -1])
    assert [e.record for e in store.read_remote_log_metadata()] == before, "nothing written"
    fresh = copy_started(tid, 0, start_offset=100)  # with a new one beside them: only that one is written
    answer = appends.append({"broker_id": 1, "records": [encode_record(r) for r in (*late, fresh)]}, now_ms=NOW)
    assert answer["offsets"] == [-1, -1, len(before)]
    assert started.segment_id == seg.segment_id


def test_the_copy_fence_refuses_the_whole_request_with_stale_tiered_epoch(store):
    tid = _enabled_topic(store)
    _disable(store, tid, 1)
    body = {"broker_id": 1, "records": [encode_record(copy_started(tid, 0))]}
    answer = BrokerRlmmAppends(store).append(body, now_ms=NOW)
    assert answer["error_code"] == StaleTieredEpoch.code and "error_message" in answer
    assert list(store.read_remote_log_metadata()) == []


# -- the broker's side --------------------------------------------------------------------------------------------


class _Controllers:
    """An AdminClient stand-in: answers every call with ``answer`` (or raises it), recording the requests."""

    def __init__(self, answer: dict[str, Any] | BaseException) -> None:
        self.answer = answer
        self.requests: list[tuple[int, dict[str, Any], bool]] = []

    async def call(self, api_key, versions, body, response, *, timeout_s=None, idempotent=False):
        self.requests.append((api_key, body, idempotent))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own, as the broker's runs beside its worker threads."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=10)
    running.close()


def test_a_write_before_the_broker_is_connected_is_broker_not_available():
    with pytest.raises(BrokerNotAvailable):
        ControllerRlmmAppend(1, request_timeout_ms=500)([copy_started(Uuid.random(), 0)], now_ms=NOW)


def test_the_records_go_encoded_in_one_idempotent_request_and_the_last_offset_comes_back(loop):
    controllers = _Controllers({"error_code": 0, "error_message": None, "offsets": [40, 41]})
    append = ControllerRlmmAppend(7, request_timeout_ms=500)
    append.attach(loop, controllers)  # type: ignore[arg-type]
    records = [copy_started(Uuid.random(), 0), copy_started(Uuid.random(), 0)]
    assert append(records, now_ms=NOW) == [40, 41]
    [(api_key, body, idempotent)] = controllers.requests
    assert (api_key, idempotent) == (10955, True)
    assert body == {"broker_id": 7, "records": [encode_record(r) for r in records]}


@pytest.mark.parametrize("error", [StaleTieredEpoch, InvalidRequest, NotController])
def test_the_error_the_controller_answers_is_raised_as_its_typed_error(loop, error):
    answer = {"error_code": error.code, "error_message": "refused", "offsets": []}
    append = ControllerRlmmAppend(1, request_timeout_ms=500)
    append.attach(loop, _Controllers(answer))  # type: ignore[arg-type]
    with pytest.raises(error, match="refused"):
        append([copy_started(Uuid.random(), 0)], now_ms=NOW)


def test_a_write_cut_short_by_the_broker_stopping_is_broker_not_available(loop):
    append = ControllerRlmmAppend(1, request_timeout_ms=500)
    append.attach(loop, _Controllers(asyncio.CancelledError()))  # type: ignore[arg-type]
    with pytest.raises(BrokerNotAvailable, match="stopping"):
        append([copy_started(Uuid.random(), 0)], now_ms=NOW)


def test_a_write_from_the_event_loops_own_thread_is_refused_instead_of_waiting_for_itself(loop):
    append = ControllerRlmmAppend(1, request_timeout_ms=500)
    append.attach(loop, _Controllers({"error_code": 0, "error_message": None, "offsets": [0]}))  # type: ignore[arg-type]

    async def on_the_loop() -> None:
        append([copy_started(Uuid.random(), 0)], now_ms=NOW)

    with pytest.raises(RuntimeError, match="wait for itself"):
        asyncio.run_coroutine_threadsafe(on_the_loop(), loop).result(timeout=10)


# -- a copy record whose answer was lost --------------------------------------------------------------------------


def _segment(tid: Uuid, start: int = 0) -> RemoteSegment:
    return RemoteSegment("orders", tid, 0, Uuid.random(), start, start + 99, NOW, 4096, tiered_epoch=0)


def test_a_copy_record_that_landed_before_the_retry_met_the_fence_is_not_a_failed_copy(store):
    """The broker's first request was appended but its answer lost (a controller failover); the topic was disabled
    meanwhile, so the retry is refused. The segment is in the RLMM: the copy stands."""
    tid = _enabled_topic(store)

    def landed_then_fenced(records, *, now_ms):
        store.append_remote_log_metadata(records, now_ms=now_ms)
        raise StaleTieredEpoch("the retry met the fence")

    rlmm = RemoteLogMetadataManager(store, append=landed_then_fenced)
    seg = rlmm.copy_started(_segment(tid), now_ms=NOW)
    assert seg.state == SegmentState.COPY_SEGMENT_STARTED
    finished = rlmm.copy_finished(seg, broker_id=1, now_ms=NOW)
    assert finished.state == SegmentState.COPY_SEGMENT_FINISHED


def test_a_copy_record_the_fence_refused_outright_is_still_refused(store):
    tid = _enabled_topic(store)

    def fenced(records, *, now_ms):
        raise StaleTieredEpoch("refused")

    with pytest.raises(StaleTieredEpoch):
        RemoteLogMetadataManager(store, append=fenced).copy_started(_segment(tid), now_ms=NOW)


# -- what the fold makes of retried and failed copies -------------------------------------------------------------


def test_a_repeated_copy_start_after_the_copy_finished_is_moot_and_never_moves_it_back(store):
    tid = _enabled_topic(store)
    rlmm = RemoteLogMetadataManager(store)
    seg = rlmm.copy_started(_segment(tid), now_ms=NOW)
    rlmm.copy_finished(seg, broker_id=1, now_ms=NOW)
    store.append_remote_log_metadata([copy_started(tid, 0, segment_id=seg.segment_id)], now_ms=NOW)  # a late retry
    rlmm.refresh()
    assert rlmm.segments(tid)[0].state == SegmentState.COPY_SEGMENT_FINISHED
    fresh = RemoteLogMetadataManager(store)
    fresh.refresh()
    assert fresh.segments(tid)[0].state == SegmentState.COPY_SEGMENT_FINISHED  # read back the same


def test_a_failed_copy_deleted_without_finishing_does_not_count_as_copied(store):
    """A copy that never finished, cleaned up (its segment deleted), leaves its offsets to be copied again: counting
    it would skip them for good and let local retention delete them as if they were remote."""
    tid = _enabled_topic(store)
    rlmm = RemoteLogMetadataManager(store)
    first = rlmm.copy_started(_segment(tid), now_ms=NOW)
    rlmm.transition([first], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=NOW)
    rlmm.transition([first], SegmentState.DELETE_SEGMENT_FINISHED, broker_id=1, now_ms=NOW)
    assert rlmm.highest_copied_offset(tid, 0) == -1
    again = rlmm.copy_started(_segment(tid), now_ms=NOW)
    rlmm.copy_finished(again, broker_id=1, now_ms=NOW)
    rlmm.transition([again], SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=NOW)  # expired after copied
    assert rlmm.highest_copied_offset(tid, 0) == 99  # a finished copy counts, deleted since or not
