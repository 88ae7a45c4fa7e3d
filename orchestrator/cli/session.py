"""One command, one session: the event loop and the :class:`~orchestrator.client.TieredClient` a command's requests
share, from the first request to the end of the command.

A command of several steps (``tiering disable --wait``: the change, then the polls until DISABLED) sends them all
through one client, so it connects to the cluster once (its connections, the active controller it found, the
versions it negotiated are kept), and its steps run on one event loop (``asyncio.Runner``), so the connections
that loop owns stay usable between steps.

Invariants:
* Nothing is opened before the first request: a command that sends none (``--help``, a usage error) connects to
  nothing and starts no event loop.
* :meth:`CommandSession.close` closes the client, then the loop (cancelling what is left on it), and may be called
  any number of times; :class:`orchestrator.cli.command.LeafCommand` calls it when the command ends, however it
  ends.
* The session's requests share the client's timeout, fixed when it opens: a later request that asks for another
  one is a programming error (:class:`ValueError`), never silently given the wrong timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the client is imported by the command that connects: 'broker start' never loads it
    from orchestrator.client import TieredClient

T = TypeVar("T")

Connect = Callable[[float], "TieredClient"]
"""Makes the session's client (not connected yet) with the given request timeout in seconds."""


class CommandSession:
    """The event loop and client of one command, opened by its first request."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._client: TieredClient | None = None
        self._timeout_s: float | None = None

    @property
    def is_open(self) -> bool:
        return self._runner is not None

    def run(
        self, request: Callable[[TieredClient], Coroutine[Any, Any, T]], *, connect: Connect, timeout_s: float
    ) -> T:
        """``request`` on the session's client, opening the session (``connect(timeout_s)``) if this is the first."""
        client = self._client if self._client is not None else self._open(connect, timeout_s)
        if timeout_s != self._timeout_s:
            raise ValueError(
                f"this command's session has a request timeout of {self._timeout_s}s, not {timeout_s}s: the steps "
                "of one command share one client"
            )
        assert self._runner is not None
        return self._runner.run(request(client))

    def _open(self, connect: Connect, timeout_s: float) -> TieredClient:
        runner = asyncio.Runner()

        async def enter() -> TieredClient:  # made on the loop it will run on
            return await connect(timeout_s).__aenter__()

        try:
            client = runner.run(enter())
        except BaseException:  # no cluster to talk to, say: nothing stays open
            runner.close()
            raise
        self._runner, self._client, self._timeout_s = runner, client, timeout_s
        return client

    def close(self) -> None:
        """Close the client and the event loop, if they were opened."""
        runner, client = self._runner, self._client
        self._runner = self._client = self._timeout_s = None
        if runner is None:
            return
        try:
            if client is not None:
                runner.run(client.__aexit__(None, None, None))
        finally:
            runner.close()
