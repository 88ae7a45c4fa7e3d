"""The active controller's snapshot loop: every ``SNAPSHOT_CHECK_S`` it asks whether a snapshot of the core's image
is due (:mod:`orchestrator.controller.snapshots`, ``[snapshots]`` settings) and writes it.

Invariants:
* A snapshot is serialized and written on a thread and a store connection of its own: a large image delays neither
  the core's requests nor a lease renewal. The image is read from the core as it is (immutable).
* The write is fenced by the controller epoch: a fenced write (StaleControllerEpoch) steps the controller down,
  like a fenced append. Any other failure is logged as ``controller.loop_failed`` and retried after the loop
  backoff (the wait logged is the wait slept); the loop never ends quietly.
* The loop runs for one core, while it is the active one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import TypeVar

from orchestrator.clock import wall_ms
from orchestrator.errors import StaleControllerEpoch
from orchestrator.metadata.store import MetadataStore
from orchestrator.settings import SnapshotSettings
from orchestrator.supervision import log_loop_failure, log_loop_recovered, loop_backoff_s

from .core import ControllerCore
from .host import CoreHost
from .snapshots import SnapshotWriter

T = TypeVar("T")
SNAPSHOT_CHECK_S = 0.5  # how often the active controller checks whether a snapshot is due


class SnapshotLoop:
    def __init__(self, store: MetadataStore, settings: SnapshotSettings, *, host: CoreHost) -> None:
        """``store``: a connection of the loop's own."""
        self.store = store
        self._settings = settings
        self._host = host
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")

    async def _on_snapshot(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def run(self, core: ControllerCore) -> None:
        """Write a snapshot of the core's image whenever one is due, while ``core`` is the active one."""
        failures = 0
        pause_s = SNAPSHOT_CHECK_S
        writer: SnapshotWriter | None = None
        while self._host.active_core() is core:
            await asyncio.sleep(pause_s)
            try:
                if writer is None:
                    resume = functools.partial(SnapshotWriter.resume, self.store, self._settings, now_ms=wall_ms)
                    writer = await self._on_snapshot(resume)
                image = core.image  # immutable: read here, serialized on the snapshot thread
                if self._host.active_core() is core and writer.due(image):
                    write = functools.partial(writer.write, image, controller_epoch=core.controller_epoch)
                    await self._on_snapshot(write)
            except StaleControllerEpoch as exc:
                await asyncio.shield(self._host.step_down(f"fenced: {exc.message}"))
                return
            except Exception as exc:
                failures += 1
                pause_s = loop_backoff_s(failures)  # the wait logged is the wait slept
                log_loop_failure("controller", "snapshots", exc, attempt=failures, retry_in_s=pause_s)
                continue
            if failures:
                log_loop_recovered("controller", "snapshots", failed_attempts=failures)
                failures = 0
            pause_s = SNAPSHOT_CHECK_S

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.store.close()
