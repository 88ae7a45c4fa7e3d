"""Admin writes sent to a node that is not the active controller go on to the active controller (KIP-590).

Kafka clients send CreateTopics, DeleteTopics and CreatePartitions to the node Metadata names as the controller,
but AlterConfigs and IncrementalAlterConfigs to any node, and a client holding an old Metadata answer sends to the
controller it knew. So every broker and every standby controller forwards these writes, as Kafka's brokers have
forwarded them to the KRaft controller since KIP-590, and a client never needs to know who is active.

Invariants:
* **Same request, same version, same client.** The request goes on as the client sent it (decoded and re-encoded
  at the client's version) inside an Envelope that names the client's principal and host
  (:mod:`orchestrator.admin_api.envelope`), so the controller authorizes the client; the controller's answer comes
  back as it is, so the client reads exactly what the controller would have told it directly.
* **It follows a failover.** The forwarder's :class:`~orchestrator.net.admin.AdminClient` follows NOT_CONTROLLER
  and lost connections to whichever controller Metadata then names, within its attempts.
* **Nothing is applied twice by us.** A forward that timed out may have been applied, so it is not re-sent: the
  client gets REQUEST_TIMED_OUT on every entry and decides (Kafka's clients retry it).
* **Every failure is an answer.** When no controller can be reached within the attempts the client gets the
  request's own response with the error on every entry (NOT_CONTROLLER or BROKER_NOT_AVAILABLE, both retriable;
  :mod:`orchestrator.admin_api.refusals`); ``admin.forward_failed`` is logged with the API and the error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from orchestrator.errors import ProtocolError, TieredError, as_wire_error, for_code
from orchestrator.net.admin import AdminClient
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request

from . import envelope
from .refusals import refusal

log = structlog.get_logger(__name__)

FORWARDED = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_ACLS,
        ApiKey.DESCRIBE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    }
)
"""The admin requests a node that is not the active controller forwards to it: the writes, and the reads of ACLs
and SCRAM users (answered from the controller's image, which has every acknowledged change)."""

FORWARD_TIMEOUT_S = 10.0  # one forwarded request's wait for the controller's answer (a topic's records: one append)


class Forwarder:
    """Forwards the writes of :data:`FORWARDED` to the active controller, through ``controllers``."""

    def __init__(self, controllers: AdminClient, *, timeout_s: float = FORWARD_TIMEOUT_S) -> None:
        self._controllers = controllers
        self._timeout_s = timeout_s

    async def forward(self, request: Request) -> dict[str, Any]:
        api_key, version = request.header.api_key, request.header.api_version
        if api_key not in FORWARDED:
            raise ValueError(f"{request.schema.name} is not forwarded to the controller")
        wrapped: Mapping[str, object] = envelope.wrap(request)
        try:
            answer = await self._controllers.send_to_controller(
                ApiKey.ENVELOPE, (0, 0), wrapped, timeout_s=self._timeout_s
            )
            if answer["error_code"] != 0:
                raise for_code(int(answer["error_code"]))("the controller refused the forwarded request")
            return envelope.inner_response(request, answer)
        except (
            TieredError,
            ProtocolError,
        ) as exc:  # every attempt failed, or the one sent timed out: the client decides
            wire = as_wire_error(exc)
            log.warning(
                "admin.forward_failed",
                api=request.schema.name,
                api_version=version,
                client_id=request.header.client_id,
                error=wire.name,
                detail=wire.message,
            )
            return refusal(api_key, version, request.body, wire)

    async def close(self) -> None:
        await self._controllers.close()
