"""AppendRemoteLogMetadata (our key 10955): the active controller appends a broker's RLMM records to the store.

Brokers send every remote log metadata record they make here instead of writing the store
(:mod:`orchestrator.broker.rlmm_appender` says why: a paused broker must not hold the store's write lock). This
controller decodes the records, appends them in one call to the store, whose copy fence applies as it always did
(a copy record of a topic not ENABLED at its tiered epoch is refused with STALE_TIERED_EPOCH, nothing of the request
written), and answers the offset of the last one.

Invariants:

* Only the active controller appends: a standby answers NOT_CONTROLLER naming the active one, and the broker's
  AdminClient follows it.
* All of a request's records or none: a record that does not decode as an RLMM record is INVALID_REQUEST before
  anything is written; a refusal of the store (the fence, a store error) leaves the RLMM as it was.
* The append runs on a worker thread of its own, not the core's: RLMM records never wait behind the core's work
  (a bulk disablement), and the core never waits behind a copy's records. The store serializes its writers.
"""

from __future__ import annotations

import structlog

from orchestrator.errors import InvalidRequest, KafkaError, ProtocolError
from orchestrator.metadata.records import decode_record, is_rlmm_type
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m

log = structlog.get_logger(__name__)


def refused(exc: KafkaError) -> m.AppendRemoteLogMetadataResponse:
    return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "last_offset": -1}


def append_for_broker(
    store: MetadataStore, body: m.AppendRemoteLogMetadataRequest, *, now_ms: int
) -> m.AppendRemoteLogMetadataResponse:
    """Append the request's records to ``store`` (blocking: call it from a worker thread)."""
    try:
        records = [decode_record(data, rlmm=True) for data in body["records"]]
    except ProtocolError as exc:
        return refused(InvalidRequest(f"a record from broker {body['broker_id']} does not decode: {exc}"))
    if not records or not all(is_rlmm_type(r.name) for r in records):
        return refused(InvalidRequest("AppendRemoteLogMetadata takes one or more remote log metadata records"))
    try:
        last = store.append_remote_log_metadata(records, now_ms=now_ms)
    except KafkaError as exc:
        if exc.retriable:
            log.warning(
                "controller.rlmm_append_failed", broker_id=body["broker_id"], error=exc.name, detail=exc.message
            )
        return refused(exc)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "last_offset": last}
