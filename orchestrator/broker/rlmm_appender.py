"""A broker's remote log metadata writes, sent to the active controller, which appends them to the store.

Brokers read the store (the metadata log, the RLMM) but never write it, as KRaft brokers never write the metadata
log: a broker paused (SIGSTOP) or frozen in the middle of a write would otherwise hold the store's write lock (on
SQLite, the whole database) and stop the active controller's lease renewal with it, leaving the cluster without a
controller until it is resumed. So every RLMM record a broker makes (a copy started or finished, a segment's
deletion, a deleted partition's progress) goes out as one AppendRemoteLogMetadata request (our key 10955) and the
active controller appends it under the store's copy fence, all of the request's records or none.

Invariants:

* :class:`ControllerRlmmAppend` is called from worker threads (copies, deletions) and blocks the calling thread
  only: the request runs on the broker's event loop; a call from the loop's own thread is refused (it would wait
  for itself).
* The answer's error is raised as the typed error its code names (STALE_TIERED_EPOCH: the fence refused the records,
  nothing appended), so callers see what they saw when they wrote the store themselves.
* A request that timed out is sent again (to the controller Metadata then names): appending an RLMM record twice is
  harmless, the fold takes a repeated state as moot (:mod:`remote_storage.rlmm`).
* Before the broker has connected to the controllers (:meth:`ControllerRlmmAppend.attach`), a write is refused with
  BROKER_NOT_AVAILABLE, retriable, rather than written another way.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from concurrent.futures import CancelledError

from orchestrator.errors import BrokerNotAvailable, RequestTimedOut, raise_for_code
from orchestrator.metadata.records import MetadataRecord, encode_record
from orchestrator.net.admin import AdminClient
from orchestrator.net.client_security import SaslCredentials
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

# How long a write's retries go on, in request timeouts: past a controller failover (the lease's TTL, then the new
# controller's start). The writer waits two more for the last attempt's answer.
RETRY_WITHIN_TIMEOUTS = 10


def rlmm_write_client(
    controllers: str, ssl_context: ssl.SSLContext | None, sasl: SaslCredentials | None, timeout_s: float
) -> AdminClient:
    """The client a broker's RLMM writes go through: each request's retries go on for
    :data:`RETRY_WITHIN_TIMEOUTS` request timeouts rather than a count of attempts, so a write made while the active
    controller fails over waits for the next one instead of failing the copy or the deletion it records."""
    return AdminClient(
        controllers,
        ssl_context=ssl_context,
        sasl=sasl,
        timeout_s=timeout_s,
        max_attempts=1_000,
        retry_within_s=RETRY_WITHIN_TIMEOUTS * timeout_s,
    )


class ControllerRlmmAppend:
    """An :class:`~remote_storage.rlmm.RlmmAppend` that sends the records to the active controller."""

    def __init__(self, broker_id: int, *, request_timeout_ms: int) -> None:
        self._broker_id = broker_id
        # the whole call's bound: the client's retries (rlmm_write_client), then the last attempt's answer
        self._wait_s = (RETRY_WITHIN_TIMEOUTS + 2) * request_timeout_ms / 1000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._controllers: AdminClient | None = None

    @property
    def wait_ms(self) -> int:
        """The longest a write may take, retries included: a write of this appender unanswered for longer can no
        longer land (the RemoteLogManager waits out twice this before it takes a copy of this process as abandoned)."""
        return int(self._wait_s * 1000)

    def attach(self, loop: asyncio.AbstractEventLoop, controllers: AdminClient) -> None:
        """From now on, send on ``loop`` through ``controllers``: a client of this appender's own, whose retries
        (NOT_CONTROLLER, a controller not reachable) outlast a controller failover (:func:`rlmm_write_client`)."""
        self._loop, self._controllers = loop, controllers

    async def close(self) -> None:
        if self._controllers is not None:
            await self._controllers.close()

    def __call__(self, records: Sequence[MetadataRecord], *, now_ms: int) -> list[int]:
        loop, controllers = self._loop, self._controllers
        if loop is None or controllers is None:
            raise BrokerNotAvailable("this broker is not connected to the controllers yet: no RLMM write is sent")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("an RLMM write from the broker's event loop thread would wait for itself")
        body: m.AppendRemoteLogMetadataRequest = {
            "broker_id": self._broker_id,
            "records": [encode_record(r) for r in records],
        }
        call = controllers.call(
            ApiKey.APPEND_REMOTE_LOG_METADATA,
            (0, 0),
            body,
            m.AppendRemoteLogMetadataResponse,
            idempotent=True,
        )
        future = asyncio.run_coroutine_threadsafe(call, loop)
        try:
            resp = future.result(timeout=self._wait_s)
        except TimeoutError as exc:  # no controller answered in time
            future.cancel()
            raise RequestTimedOut(f"no active controller took the RLMM write within {self._wait_s:.0f} s") from exc
        except CancelledError as exc:  # the broker's loop is stopping: its tasks are cancelled
            raise BrokerNotAvailable("the broker is stopping: its RLMM write was not answered") from exc
        raise_for_code(resp["error_code"], resp["error_message"])
        return resp["offsets"]
