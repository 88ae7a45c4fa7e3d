"""AppendRemoteLogMetadata (our key 10955): the active controller appends a broker's RLMM records to the store.

Brokers send every remote log metadata record they make here instead of writing the store
(:mod:`orchestrator.broker.rlmm_appender` says why: a paused broker must not hold the store's write lock). This
controller decodes the records, appends them in one call to the store, whose copy fence applies as it always did
(a copy record of a topic not ENABLED at its tiered epoch is refused with STALE_TIERED_EPOCH, nothing of the request
written), and answers each record's RLMM offset.

Invariants:

* Only the active controller appends: a standby answers NOT_CONTROLLER naming the active one, and the broker's
  client follows it.
* All of a request's records or none: a record that does not decode as an RLMM record is INVALID_REQUEST before
  anything is written; a refusal of the store (the fence, a store error) leaves the RLMM as it was.
* No record that would move nothing is written: a broker sends a write again when its answer was lost (a
  controller killed between appending and answering, or slow to answer), and the first one may land after the
  state it sets, or a later one, is in the RLMM. The appends are made one at a time against this endpoint's fold
  of the RLMM, and such a record is left out (its offset answered as -1), so the RLMM, and the
  ``__remote_log_metadata`` topic Kafka's consumers read (whose RLMM refuses a state going back), never hold one.
* The append runs on a worker thread, not the core's: RLMM records never wait behind the core's work (a bulk
  disablement), and the core never waits behind a copy's records.
"""

from __future__ import annotations

import threading

import structlog

from orchestrator.errors import InvalidRequest, KafkaError, ProtocolError
from orchestrator.metadata.records import decode_record, is_rlmm_type
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m
from remote_storage.rlmm import RlmmFold

log = structlog.get_logger(__name__)


def refused(exc: KafkaError) -> m.AppendRemoteLogMetadataResponse:
    return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "offsets": []}


class BrokerRlmmAppends:
    """The active controller's appends of brokers' RLMM records: one at a time, each leaving out what would move
    nothing (see the module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._view = RlmmFold(store)  # this endpoint's own fold: the core's belongs to the core thread
        self._lock = threading.Lock()

    def append(self, body: m.AppendRemoteLogMetadataRequest, *, now_ms: int) -> m.AppendRemoteLogMetadataResponse:
        """Append the request's records (blocking: call it from a worker thread)."""
        broker = body["broker_id"]
        try:
            records = [decode_record(data, rlmm=True) for data in body["records"]]
        except ProtocolError as exc:
            return refused(InvalidRequest(f"a record from broker {broker} does not decode: {exc}"))
        if not records or not all(is_rlmm_type(r.name) for r in records):
            return refused(InvalidRequest("AppendRemoteLogMetadata takes one or more remote log metadata records"))
        try:
            with self._lock:
                self._view.refresh()
                moot = self._view.moot(records)
                kept = [r for r, left_out in zip(records, moot, strict=True) if not left_out]
                last = self._store.append_remote_log_metadata(kept, now_ms=now_ms) if kept else -1
                # Folded as written: the next append's refresh then reads only what others appended since.
                self._view.fold_written(range(last - len(kept) + 1, last + 1), kept)
        except KafkaError as exc:
            log.warning("controller.rlmm_append_refused", broker_id=broker, error=exc.name, detail=exc.message)
            return refused(exc)
        if len(kept) < len(records):
            log.info("controller.rlmm_records_moot", broker_id=broker, left_out=len(records) - len(kept))
        assigned = iter(range(last - len(kept) + 1, last + 1))
        offsets = [-1 if left_out else next(assigned) for left_out in moot]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "offsets": offsets}
