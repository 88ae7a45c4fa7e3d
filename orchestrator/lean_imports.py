"""What every process of ours loads before anything else: structlog, without the rich modules it would pull in.

structlog looks for rich when it is first imported. With rich installed (the CLI renders its tables with it),
``structlog.dev`` loads ``rich.traceback`` and ``structlog.tracebacks`` loads ``rich.pretty``, and with them
pygments: about 60 ms of CPU in every process that logs, which is every controller, broker, CLI call and scan. A
test run starts about a thousand of them. We never render with those modules: :mod:`orchestrator.logging` gives
the console renderer structlog's plain-text traceback formatter, and services write JSON. So while structlog is
first imported, ``rich`` (or, when rich is loaded already, just those two modules) is hidden from it; afterwards
anyone imports rich as usual.

Each top-level package (``orchestrator``, ``remote_storage``, ``policies``) calls :func:`import_structlog` from its
``__init__``, which runs before any module of that package imports structlog.

Invariants: only which modules structlog loads changes, never what our logs say (the traceback formatter is named,
not defaulted). If structlog is loaded already (a host program imported it first), nothing is done. Whatever is
hidden is visible again when this returns, even if the import fails.
"""

from __future__ import annotations

import importlib
import sys

STRUCTLOG_SKIPS = ("rich.traceback", "rich.pretty")
"""The rich modules structlog would load at import and we never use."""


def import_structlog() -> None:
    """Import structlog once for this process, hiding :data:`STRUCTLOG_SKIPS` (all of rich if it is not loaded)."""
    if "structlog" in sys.modules:
        return
    names = STRUCTLOG_SKIPS if "rich" in sys.modules else ("rich",)
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" marker
    try:
        importlib.import_module("structlog")
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
