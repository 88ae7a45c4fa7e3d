"""The client the CLI, the demo, the benches and the tests hold: one session with a cluster that makes every call.

Its calls live in modules of one job each (:mod:`~orchestrator.client.admin`, :mod:`~orchestrator.client.data_plane`,
:mod:`~orchestrator.client.security`), all on one :class:`~orchestrator.client.session.ClientSession`: whatever
a holder calls, it shares one admin client and one connection pool, closed once.
"""

from __future__ import annotations

from orchestrator.client.admin import AdminCalls
from orchestrator.client.data_plane import DataPlane
from orchestrator.client.security import SecurityCalls


class TieredClient(AdminCalls, DataPlane, SecurityCalls):
    """A session with a cluster: ``async with TieredClient("host:port") as c: await c.create_topic(...)``."""
