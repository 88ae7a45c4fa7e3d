"""A real :class:`~orchestrator.client.TieredClient` whose admin requests are answered in this process by a stand-in
for the active controller: the client's own calls and answer reading, with no network and no server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from orchestrator.client import TieredClient

T = TypeVar("T")


class StandInController:
    """Put in place of ``TieredClient.admin``: a subclass answers :meth:`call` as the active controller would."""

    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, Any], response: Any, **options: Any
    ) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def run_with(controller: StandInController, request: Callable[[TieredClient], Awaitable[T]]) -> T:
    """``request`` run in one client session whose admin requests ``controller`` answers."""

    async def session() -> T:
        async with TieredClient("controller.invalid:9093") as client:
            client.admin = controller  # type: ignore[assignment]
            return await request(client)

    return asyncio.run(session())
