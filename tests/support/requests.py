"""Requests as a server's handler receives them, built from a partial body (the codec fills in the defaults)."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.protocol.codec import compiled
from orchestrator.protocol.framing import Request, RequestHeader
from orchestrator.protocol.schema import request_schema


def data_request(api_key: int, version: int, body: dict[str, Any], *, principal: str | None = None) -> Request:
    schema = request_schema(api_key)
    assert schema is not None
    full = compiled(schema, version).normalize(body)
    request = Request(header=RequestHeader(api_key, version, 1, "test"), body=full, schema=schema)
    if principal is not None:
        request = dataclasses.replace(request, principal=principal)
    return request
