"""The admin API as a controller serves it: which request goes where, by table.

Every controller serves it over the Kafka protocol. Any controller answers the reads (:data:`READS`: Metadata,
DescribeConfigs, DescribeCluster) from its image, naming the active controller (the lease holder,
``"<node_id>@<host>:<port>"``). The active controller answers everything else by calling its core
(:data:`CORE_CALLS`). A standby forwards Kafka's admin writes to the active controller
(:mod:`orchestrator.admin_api`), except while the lease still names the standby itself (it is stepping down or
taking its tenure back: the write would come back to it), and answers our own APIs with NOT_CONTROLLER (41), so
clients and the CLI follow a failover by themselves.

Invariants:
* Every call into the core runs on the core's thread; a write wakes the sender (it may have made requests due).
* A write the store refuses as a deposed controller's (StaleControllerEpoch) steps the controller down and is
  answered NOT_CONTROLLER, which clients retry.
* The codec decodes a body by its api's schema, so the table's entries take it as that request's type; the typed
  response goes back to the codec as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, cast

import structlog

from orchestrator.admin_api import envelope, reads
from orchestrator.admin_api.forwarding import FORWARDED, Forwarder
from orchestrator.admin_api.refusals import refusal
from orchestrator.clock import wall_ms
from orchestrator.errors import (
    CoordinatorNotAvailable,
    InvalidRequest,
    NotController,
    StaleControllerEpoch,
    TieredError,
)
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.store import MetadataStore
from orchestrator.net.connection import ConnectionPool
from orchestrator.net.server import Handler
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.settings import ControllerSettings

from . import rlmm_appends
from .core import ControllerCore
from .host import CoreHost
from .lease import LeaseElection, who_is_active

log = structlog.get_logger(__name__)

CoreCall = Callable[[ControllerCore, Any, int], Mapping[str, object]]  # (core, request body, version) -> response
ReadCall = Callable[[MetadataImage, reads.ClusterView, Any, int], Mapping[str, object]]

READS: Mapping[int, ReadCall] = {  # answered by any controller, from its own image
    ApiKey.METADATA: lambda image, view, body, version: reads.metadata(image, body, version, view),
    ApiKey.DESCRIBE_CONFIGS: lambda image, _view, body, version: reads.describe_configs(image, body, version),
    ApiKey.DESCRIBE_CLUSTER: lambda _image, view, body, version: reads.describe_cluster(body, version, view),
}

CORE_CALLS: Mapping[int, CoreCall] = {  # answered by the active controller's core
    ApiKey.CREATE_TOPICS: ControllerCore.create_topics,
    ApiKey.DELETE_TOPICS: ControllerCore.delete_topics,
    ApiKey.CREATE_PARTITIONS: ControllerCore.create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ControllerCore.incremental_alter_configs,
    ApiKey.ALTER_CONFIGS: ControllerCore.alter_configs,
    ApiKey.CREATE_ACLS: ControllerCore.create_acls,
    ApiKey.DESCRIBE_ACLS: ControllerCore.describe_acls,
    ApiKey.DELETE_ACLS: ControllerCore.delete_acls,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ControllerCore.alter_user_scram_credentials,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ControllerCore.describe_user_scram_credentials,
    ApiKey.ALTER_PARTITION: ControllerCore.alter_partition,  # partition leaders' ISR changes
    # Our own APIs, at their only version.
    ApiKey.DESCRIBE_TIERED_STATE: lambda core, body, _version: core.describe_tiered_state(body),
    ApiKey.BROKER_REGISTRATION: lambda core, body, _version: core.broker_registration(body),
    ApiKey.BROKER_HEARTBEAT: lambda core, body, _version: core.broker_heartbeat(body),
    ApiKey.REPORT_COPY_STATES: lambda core, body, _version: core.report_copy_states(body),
    ApiKey.UNREGISTER_BROKER: lambda core, body, _version: core.unregister_broker(body),
}


def call_core(core: ControllerCore, api_key: int, body: Any, version: int) -> Mapping[str, object]:
    """The core's answer to one admin request (:data:`CORE_CALLS`)."""
    call = CORE_CALLS.get(api_key)
    if call is None:  # pragma: no cover - the server routes only the keys it was given handlers for
        raise NotController(f"no handler for api key {api_key}")
    return call(core, body, version)


class AdminEndpoint:
    """The handlers of one controller's admin API (see the module docstring)."""

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        store: MetadataStore,
        follower: MetadataFollower,
        lease: LeaseElection,
        host: CoreHost,
        wrote: Callable[[], None],
    ) -> None:
        """``wrote`` is told of every write the core answered (the sender wakes)."""
        self._settings = settings
        self._store = store
        self._follower = follower
        self._lease = lease
        self._host = host
        self._wrote = wrote
        self._rlmm_appends = rlmm_appends.BrokerRlmmAppends(store)
        self._pool: ConnectionPool | None = None
        self._forwarder: Forwarder | None = None
        self.handlers: Mapping[int, Handler] = {}  # the admin API's handlers, behind the authorization gate

    def serve(self, pool: ConnectionPool, forwarder: Forwarder, guarded: Mapping[int, Handler]) -> None:
        """Start serving: ``pool`` reaches the brokers, ``forwarder`` the active controller, and ``guarded`` are
        :meth:`handler`'s handlers behind the authorization gate (an Envelope's request goes to them)."""
        self._pool, self._forwarder, self.handlers = pool, forwarder, guarded

    @staticmethod
    def api_keys() -> tuple[int, ...]:
        """The api keys :meth:`handler` serves."""
        return (*READS, *FORWARDED, *(k for k in CORE_CALLS if k not in FORWARDED))

    def handler(self, api_key: int) -> Handler:
        async def handle(request: Request) -> Mapping[str, object]:
            core = self._host.active_core()
            body, version = request.body, request.header.api_version
            if api_key in READS:
                return await self._host.on_core(lambda: self._read(core, api_key, body, version))
            if core is None:
                if api_key in FORWARDED and self._forwarder is not None and not await self._lease.holds():
                    return await self._forwarder.forward(request)
                return refusal(api_key, version, body, NotController(self._who_is_active()))
            try:
                answer = await self._host.on_core(lambda: call_core(core, api_key, body, version))
                self._wrote()
                return answer
            except StaleControllerEpoch as exc:
                await self._host.step_down(f"fenced: {exc.message}")
                return refusal(api_key, version, body, NotController(self._who_is_active()))

        return handle

    def current_image(self) -> MetadataImage:
        """The image this controller decides with: the core's when active, the follower's when standby."""
        core = self._host.active_core()
        return core.image if core is not None else self._follower.image

    def _read(self, core: ControllerCore | None, api_key: int, body: Any, version: int) -> Mapping[str, object]:
        """A read any node answers (:mod:`orchestrator.admin_api.reads`): from the core's image when active, from
        the follower's (refreshed) when standby. Runs on the core thread."""
        holder: str | None = self._lease.holder  # the active controller holds the lease: no need to read it
        if core is not None:
            image = core.refresh()
        else:
            image, holder = self._follower.refresh(), reads.live_holder(self._store.current_lease(), wall_ms())
        view = reads.cluster_view(image, holder, cluster_id=self._settings.membership.cluster_id)
        return READS[api_key](image, view, body, version)

    def _who_is_active(self) -> str:
        return who_is_active(self._store.current_lease(), wall_ms())

    async def on_envelope(self, request: Request) -> Mapping[str, object]:
        """A write another node forwarded (:mod:`orchestrator.admin_api.envelope`), served as its client's."""
        try:
            inner = envelope.unwrap(request.body)
        except InvalidRequest as exc:
            log.warning("controller.envelope_refused", sender=request.principal, reason=exc.message)
            return {"response_data": None, "error_code": exc.code}
        handler = self.handlers.get(inner.header.api_key)
        if inner.header.api_key not in FORWARDED or handler is None:
            log.warning("controller.envelope_refused", sender=request.principal, api_key=inner.header.api_key)
            return {"response_data": None, "error_code": InvalidRequest.code}
        return envelope.answer(inner, await handler(inner))

    async def on_append_remote_log_metadata(self, request: Request) -> Mapping[str, object]:
        """A broker's RLMM records (:mod:`.rlmm_appends`), appended by the active controller only."""
        if self._host.active_core() is None:
            return rlmm_appends.refused(NotController(self._who_is_active()))
        body = cast(m.AppendRemoteLogMetadataRequest, request.body)
        return await asyncio.to_thread(self._rlmm_appends.append, body, now_ms=wall_ms())

    async def on_init_producer_id(self, request: Request) -> Mapping[str, object]:
        """InitProducerId, which a client may send to any node it knows (librdkafka sends it to the first it is
        connected to, often its bootstrap controller): passed on to a live broker, which allocates producer ids
        (:mod:`orchestrator.broker.producer_ids`), after this node's gate authorized the client. No live broker
        answering is COORDINATOR_NOT_AVAILABLE, which clients retry."""
        image = self.current_image()
        brokers = sorted((b for b in image.brokers.values() if b.endpoints and not b.fenced), key=lambda b: b.broker_id)
        last: TieredError | None = None
        timeout_s = self._settings.disablement.request_timeout_ms / 1000  # its bound on every call to a broker
        for broker in brokers:
            ep = broker.endpoints[0]
            assert self._pool is not None
            try:
                version = request.header.api_version
                return await self._pool.request(
                    (ep.host, ep.port), ApiKey.INIT_PRODUCER_ID, version, request.body, timeout_s=timeout_s
                )
            except TieredError as exc:
                last = exc
        detail = last.message if last is not None else "no live broker is registered"
        log.warning("controller.init_producer_id_unavailable", detail=detail)
        return {"error_code": CoordinatorNotAvailable.code, "producer_id": -1, "producer_epoch": -1}
