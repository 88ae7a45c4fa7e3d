"""Fault injection into a real boto3 client through botocore's ``before-send`` event (no patched functions).

A :class:`FaultInjector` answers the first N calls of an operation with a fault instead of sending them:
``slowdown`` (503 SlowDown), ``internal`` (500 InternalError) or ``reset`` (the connection closed mid-request).
Every call that reaches the hook is counted, so a test can assert how many attempts were made.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError

_BODIES = {
    "slowdown": (503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"),
    "internal": (500, b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>"),
}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class FaultInjector:
    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.faults_served: Counter[str] = Counter()
        self._plan: dict[str, deque[str]] = defaultdict(deque)
        client.meta.events.register("before-send.s3", self._before_send)

    def fail(self, operation: str, *kinds: str) -> None:
        """Answer the next calls of ``operation`` (e.g. ``PutObject``) with these faults, in order."""
        self._plan[operation].extend(kinds)

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        op = kwargs["event_name"].rsplit(".", 1)[-1]
        self.calls[op] += 1
        plan = self._plan.get(op)
        if not plan:
            return None
        kind = plan.popleft()
        self.faults_served[op] += 1
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        status, body = _BODIES[kind]
        return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, _Raw(body))
