"""What every command receives (``@click.pass_obj``): the output chosen by ``--output`` and the way to the cluster.

A command sends its requests with ``obj.run(lambda c: c.tiering_status())``. All the requests of one command go
through one :class:`TieredClient` session on one event loop (:mod:`.session`), opened by the first and closed when
the command ends (:class:`~orchestrator.cli.command.LeafCommand`), to ``--bootstrap-server`` (or
``TIEREDCTL_BOOTSTRAP_SERVER``, or the local cluster in ``./var/cluster``), connecting as ``--command-config`` says
(or, for the local cluster, as its own ``client.properties`` says: TLS and the admin's login when the cluster was
started with them; plaintext otherwise). No cluster to
talk to is a usage error (exit status 2); an error of ours raised by a request is exit status 1 (see ``root``). A
local cluster whose record is there but none of whose controllers runs (stopped with ``cluster down``; checked in
/proc by :func:`orchestrator.local.state.is_ours`, with no connection) is a LOCAL_CLUSTER_ERROR that says how to start
it again, not the client's retries ending in BROKER_NOT_AVAILABLE; one whose metadata store does not answer (a
PostgreSQL server paused, a SQLite write lock held by a paused process) is a STORE_UNAVAILABLE that names the store
and what to do (:mod:`orchestrator.local.store_probe`), not NOT_CONTROLLER or a timeout.

The global options may be given before the command (the root group makes the context from them) and after it
(each leaf command replaces the values given there: :meth:`Ctx.with_global_options`). ``TIEREDCTL_REQUEST_TIMEOUT_S``
(seconds), when set, is the request timeout of every request of a command, instead of the one the command asks for
(:func:`request_timeout_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.cli.output import Output
from orchestrator.cli.session import CommandSession
from orchestrator.errors import (
    BrokerNotAvailable,
    KafkaStorageError,
    LocalClusterError,
    NotController,
    RequestTimedOut,
    StoreUnavailable,
)
from orchestrator.local.state import CLIENT_PROPERTIES, LocalClusterState, is_ours
from orchestrator.net.client_properties import read_command_config
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity

if TYPE_CHECKING:  # imported when a command connects (new_client): 'broker start' and 'controller start' never do
    from orchestrator.client import TieredClient

T = TypeVar("T")

DEFAULT_CLUSTER_DIR = Path("./var/cluster")
"""Where ``tieredctl cluster up`` puts a local cluster, and where commands look for one when told nothing."""
DEFAULT_TIMEOUT_S = 30.0
"""A request's timeout, unless the command asks for another for all of its requests."""
REQUEST_TIMEOUT_ENV = "TIEREDCTL_REQUEST_TIMEOUT_S"
"""When set: the request timeout, in seconds, of every request of a command, whatever the command asks for."""
RETRY_WITHIN_TIMEOUTS = 2
"""A request of a command and its retries end within this many request timeouts: one more send after a timeout (to
the controller that took over from a frozen one), and a cluster that answers nothing never holds a command longer."""
UNANSWERED = (NotController, BrokerNotAvailable, RequestTimedOut, KafkaStorageError)
"""What a cluster whose store does not answer ends a request with: the store is checked then."""


def request_timeout_s(asked: float, environ: Mapping[str, str]) -> float:
    """The request timeout of a command that asks for ``asked`` seconds: ``$TIEREDCTL_REQUEST_TIMEOUT_S`` when it is
    set (a number of seconds above 0; anything else is a usage error naming it), else ``asked``."""
    value = environ.get(REQUEST_TIMEOUT_ENV, "").strip()
    if not value:
        return asked
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise click.UsageError(f"{REQUEST_TIMEOUT_ENV}={value!r}: give a number of seconds above 0, such as 10")
    return seconds


def _store_problem(local: LocalClusterState) -> StoreUnavailable | None:
    """What is wrong with the local cluster's store (:func:`orchestrator.local.store_probe.store_problem`), loaded
    only once a request went unanswered: the probe brings the store's code, which no answered command needs."""
    from orchestrator.local.store_probe import store_problem

    return store_problem(local)


def _probing_after(
    timeout_s: float, local: LocalClusterState, request: Callable[[TieredClient], Coroutine[Any, Any, T]]
) -> Callable[[TieredClient], Coroutine[Any, Any, T]]:
    """``request``, whose store is checked once it has gone unanswered for ``timeout_s``: a store that does not
    answer then ends the request with STORE_UNAVAILABLE (the request is cancelled); one that answers lets the request
    go on as it would have (a long ``--wait`` is no problem)."""

    async def watched(client: TieredClient) -> T:
        task = asyncio.ensure_future(request(client))
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            problem = await asyncio.to_thread(_store_problem, local)
            if problem is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, *UNANSWERED):
                    await task
                raise problem
        return await task

    return watched


@dataclass(frozen=True)
class Ctx:
    """The root group's context object (``ctx.obj``), made once per invocation from the global options."""

    output: Output
    bootstrap_server: str | None  # --bootstrap-server or TIEREDCTL_BOOTSTRAP_SERVER
    command_config: str | None = None  # --command-config or TIEREDCTL_COMMAND_CONFIG
    # The command's client session, opened by its first request. Not an option: a context made with other options
    # (dataclasses.replace) gets a new one.
    session: CommandSession = field(default_factory=CommandSession, init=False, repr=False, compare=False)

    @classmethod
    def from_global_options(
        cls, *, output: str = "text", bootstrap_server: str | None = None, command_config: str | None = None
    ) -> Ctx:
        """``output``: one of :data:`~orchestrator.cli.output.OUTPUT_FORMATS`."""
        return cls(output=Output(output), bootstrap_server=bootstrap_server, command_config=command_config)

    def with_global_options(
        self, *, output: str | None = None, bootstrap_server: str | None = None, command_config: str | None = None
    ) -> Ctx:
        """This context with the global options given after the command (None: not given there) replacing these."""
        changes: dict[str, Any] = {}
        if output is not None:
            changes["output"] = Output(output)
        if bootstrap_server is not None:
            changes["bootstrap_server"] = bootstrap_server
        if command_config is not None:
            changes["command_config"] = command_config
        return dataclasses.replace(self, **changes)

    def bootstrap(self) -> str:
        """--bootstrap-server, TIEREDCTL_BOOTSTRAP_SERVER, or the local cluster in the default directory."""
        return self._connection()[0]

    def security(self) -> ClientSecurity:
        """How to connect: --command-config, else the local cluster's client.properties when it is the cluster
        talked to, else plaintext."""
        if self.command_config:
            return read_command_config(Path(self.command_config))
        return self._connection()[1]

    def _connection(self) -> tuple[str, ClientSecurity]:
        if self.bootstrap_server:
            return self.bootstrap_server, PLAINTEXT
        local = LocalClusterState.load_if_present(DEFAULT_CLUSTER_DIR)
        if local is not None:
            if not any(is_ours(p) for p in local.processes if p.role == "controller"):
                raise LocalClusterError(
                    f"the local cluster in {DEFAULT_CLUSTER_DIR} is not running (none of its controllers, at "
                    f"{local.bootstrap_server}, is): 'tieredctl cluster up' starts it again, 'tieredctl cluster "
                    "status' shows its processes"
                )
            properties = DEFAULT_CLUSTER_DIR / CLIENT_PROPERTIES
            return local.bootstrap_server, read_command_config(properties) if properties.exists() else PLAINTEXT
        raise click.UsageError(
            f"no cluster to talk to: no local cluster in {DEFAULT_CLUSTER_DIR} (start one with 'tieredctl cluster "
            "up'); or pass --bootstrap-server HOST:PORT or set TIEREDCTL_BOOTSTRAP_SERVER"
        )

    def run(
        self, request: Callable[[TieredClient], Coroutine[Any, Any, T]], *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> T:
        """Run ``request`` on the command's client session (opened by its first request, with ``timeout_s``: every
        request of a command asks for the same) and return its result. When the local cluster did not answer (no
        active controller, a timeout, its store's error), its metadata store is checked, within a bound: a store
        that does not answer is the error raised (STORE_UNAVAILABLE, naming it and what to do). The store is also
        checked when a request to the local cluster is still unanswered after one request timeout, so a command
        on a cluster whose store is paused ends then, not after the retries' two. ``$TIEREDCTL_REQUEST_TIMEOUT_S``,
        when set, replaces ``timeout_s``."""
        timeout_s = request_timeout_s(timeout_s, os.environ)
        local = self._local_cluster_talked_to()
        watched = request if local is None else _probing_after(timeout_s, local, request)
        try:
            return self.session.run(watched, connect=self.new_client, timeout_s=timeout_s)
        except UNANSWERED as exc:
            problem = _store_problem(local) if local is not None else None
            if problem is not None:
                raise problem from exc
            raise

    def _local_cluster_talked_to(self) -> LocalClusterState | None:
        """The local cluster in the default directory, when it is the cluster this command talks to."""
        local = LocalClusterState.load_if_present(DEFAULT_CLUSTER_DIR)
        if local is None or (self.bootstrap_server and self.bootstrap_server != local.bootstrap_server):
            return None
        return local

    def new_client(self, timeout_s: float) -> TieredClient:
        """The client of a command's session, not connected yet: to the cluster this context names."""
        from orchestrator.client import TieredClient

        retry_within_s = RETRY_WITHIN_TIMEOUTS * timeout_s
        return TieredClient(
            self.bootstrap(), timeout_s=timeout_s, security=self.security(), retry_within_s=retry_within_s
        )
