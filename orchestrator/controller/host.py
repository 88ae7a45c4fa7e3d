"""What the controller process gives the rooms that work for its active core (``admin_dispatch.py``, ``sender.py``,
``snapshot_loop.py``): the core itself, the one thread it runs on, and stepping down.

Invariants:
* The active core changes only on the event loop (taking office, stepping down); a room that awaited anything checks
  that the core it works for is still :meth:`CoreHost.active_core` before it hands the core a result.
* Every call into a core runs on the core's thread (:meth:`CoreHost.on_core`): the core is never used concurrently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from .core import ControllerCore

T = TypeVar("T")


class CoreHost(Protocol):
    def active_core(self) -> ControllerCore | None:
        """The active controller's core; None while this controller is a standby."""
        ...

    async def on_core(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the core's thread."""
        ...

    async def step_down(self, reason: str) -> None:
        """Stop being the active controller (drop the core, cancel its work); a no-op on a standby."""
        ...
