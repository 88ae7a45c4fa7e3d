"""structlog configuration, done once per process at its entry point.

Services (controller, broker agents) log JSON lines; the CLI logs readable console lines to stderr. Context
such as ``topic_id``, ``tiered_epoch``, ``broker_id`` or ``request`` is bound per request with
``structlog.contextvars.bound_contextvars(...)`` and lands on every line logged inside that scope. Event names
are stable, dotted identifiers (``disable.ack``, ``metadata.recovered``); the free text goes in fields.

Credentials never reach a log line: the ``redact_secrets`` processor masks any field whose name looks like a
secret (keys, tokens, passwords, session credentials) before rendering.

Exceptions are rendered as plain text in both modes (structlog's ``plain_traceback`` on the console, named rather
than left to structlog's default, which depends on what is installed: see :mod:`orchestrator.lean_imports`).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

_SECRET_KEY = re.compile(r"(secret|password|passwd|token|credential|access_key|session_key|private_key)", re.I)


def redact_secrets(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if _SECRET_KEY.search(key):
            event[key] = "***"
    return event


def configure_logging(
    mode: Literal["service", "cli"], *, level: int = logging.INFO, stream: TextIO | None = None
) -> None:
    """Configure structlog for this process: ``service`` writes JSON lines, ``cli`` console lines on stderr."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    if mode == "service":
        renderer: Any = structlog.processors.JSONRenderer(sort_keys=False)
        processors = [*shared, structlog.processors.format_exc_info, renderer]
    else:
        console = structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
        processors = [*shared, console]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
