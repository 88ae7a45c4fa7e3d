"""A session with a cluster: the connections every call of :class:`~orchestrator.client.TieredClient` shares.

Admin calls go to the active controller through :class:`~orchestrator.net.admin.AdminClient` (it follows a
failover by itself); data-plane calls go through one :class:`~orchestrator.net.connection.ConnectionPool` to the
brokers that lead partitions. Both take the session's TLS and SASL settings and its timeout.

Invariants:

* One session, one admin client and one pool: ``close()`` (or leaving ``async with``) closes both.
* The cluster metadata is asked of the controller (Metadata, as any Kafka client asks it) and the last answer is
  kept: a node's address is looked up there first and asked again only when the node is not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from orchestrator.client.answers import check
from orchestrator.errors import NotLeaderOrFollower
from orchestrator.net.admin import AdminClient
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity
from orchestrator.net.connection import ConnectionPool
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

DEFAULT_MAX_BATCH_BYTES = 16384  # the values of one record batch, as Kafka's producers' batch.size


class ClientSession:
    """The connections and the metadata of one session; the calls themselves are the classes built on it."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 30.0,
        security: ClientSecurity = PLAINTEXT,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        retry_within_s: float | None = None,
    ) -> None:
        """``retry_within_s``: an admin request and its retries end that long after the first was sent (None: only
        their count bounds them)."""
        self.max_batch_bytes = max_batch_bytes
        self._leaders: dict[str, m.MetadataResponseTopic] = {}  # the data plane's last metadata of each topic
        ssl_context = security.ssl_context()
        self.admin = AdminClient(
            bootstrap, timeout_s=timeout_s, ssl_context=ssl_context, sasl=security.sasl, retry_within_s=retry_within_s
        )
        self.pool = ConnectionPool(ssl_context=ssl_context, sasl=security.sasl)
        self.timeout_s = timeout_s
        self._metadata: m.MetadataResponse | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.admin.close()
        await self.pool.close()

    async def metadata(self, topics: Sequence[str] | None = None) -> m.MetadataResponse:
        requested: list[m.MetadataRequestTopic] | None = None if topics is None else [{"name": t} for t in topics]
        body: m.MetadataRequest = {"topics": requested, "allow_auto_topic_creation": False}
        self._metadata = await self.admin.call(ApiKey.METADATA, (1, 12), body, m.MetadataResponse, idempotent=True)
        return self._metadata

    async def topic(self, name: str) -> m.MetadataResponseTopic:
        md = await self.metadata([name])
        t = md["topics"][0]
        check(t["error_code"], None, f"topic '{name}'")
        return t

    async def node_address(self, node_id: int) -> tuple[str, int]:
        """The address of ``node_id`` from the last metadata, or from fresh metadata when the last does not name it."""
        address = _address_in(self._metadata or await self.metadata(), node_id)
        if address is None:
            address = _address_in(await self.metadata(), node_id)
        if address is None:
            raise NotLeaderOrFollower(f"node {node_id} is not in the cluster metadata")
        return address


def _address_in(md: m.MetadataResponse, node_id: int) -> tuple[str, int] | None:
    return next(((b["host"], b["port"]) for b in md["brokers"] if b["node_id"] == node_id), None)
