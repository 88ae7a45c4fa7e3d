"""An answer's error code, raised as its typed Kafka error: the one place the client reads an error code.

Invariant: a non-zero code is raised as ``for_code(code)`` with what was being done and, when the server sent one,
its message; code 0 passes. Callers (and the CLI's exit status) never compare error codes themselves.
"""

from __future__ import annotations

from orchestrator.errors import for_code


def check(code: int, message: str | None, what: str) -> None:
    """Raise the Kafka error of ``code`` (none for 0), saying ``what`` failed and the server's ``message``."""
    if code:
        raise for_code(code)(f"{what}: {message}" if message else what)
