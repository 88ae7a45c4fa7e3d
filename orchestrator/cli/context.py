"""What every command receives (``@click.pass_obj``): the renderer chosen by ``--output`` and the way to the cluster.

A command sends its requests with ``obj.run(lambda c: c.tiering_status())``: one :class:`TieredClient` session to
``--bootstrap-server`` (or ``TIEREDCTL_BOOTSTRAP_SERVER``, or the local cluster in ``./var/cluster``). No cluster to
talk to is a usage error (exit status 2); an error of ours raised by a request is exit status 1 (see ``root``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from orchestrator.cli.output import Output
from orchestrator.client import TieredClient
from orchestrator.local.state import LocalClusterState

T = TypeVar("T")

DEFAULT_CLUSTER_DIR = Path("./var/cluster")
"""Where ``tieredctl cluster up`` puts a local cluster, and where commands look for one when told nothing."""


@dataclass(frozen=True)
class Ctx:
    """The root group's context object (``ctx.obj``), made once per invocation from the global options."""

    output: Output
    bootstrap_server: str | None  # --bootstrap-server or TIEREDCTL_BOOTSTRAP_SERVER

    def bootstrap(self) -> str:
        """--bootstrap-server, TIEREDCTL_BOOTSTRAP_SERVER, or the local cluster in the default directory."""
        if self.bootstrap_server:
            return self.bootstrap_server
        local = LocalClusterState.load_if_present(DEFAULT_CLUSTER_DIR)
        if local is not None:
            return local.bootstrap_server
        raise click.UsageError(
            "no cluster to talk to: pass --bootstrap-server HOST:PORT, set TIEREDCTL_BOOTSTRAP_SERVER, "
            "or start a local cluster with 'tieredctl cluster up'"
        )

    def run(self, request: Callable[[TieredClient], Coroutine[Any, Any, T]], *, timeout_s: float = 30.0) -> T:
        """Run ``request`` in one client session and return its result."""

        async def session() -> T:
            async with TieredClient(self.bootstrap(), timeout_s=timeout_s) as client:
                return await request(client)

        return asyncio.run(session())
