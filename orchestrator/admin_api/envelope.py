"""KIP-590's Envelope: a write forwarded to the active controller carries the client's principal and host with it,
so the controller authorizes (and audits) the client, not the node that forwarded it.

The forwarding node puts the client's request, as the client framed it (header and body at the client's version,
without the size prefix), into ``RequestData``; the principal as ``User:<name>`` in UTF-8 into ``RequestPrincipal``
(our own serialization: only our own nodes send and read it); the client's IP address, packed, into
``ClientHostAddress``. The controller answers the inner request as if the client had sent it directly, and returns
the framed inner response (without the size prefix) in ``ResponseData``.

Invariants:
* Only the cluster's own principals may send an Envelope (:mod:`orchestrator.admin_api.authorization`); only the
  writes of :data:`~orchestrator.admin_api.forwarding.FORWARDED` travel in one, never an Envelope in an Envelope.
* An inner answer that says NOT_CONTROLLER on every entry makes the Envelope's own error NOT_CONTROLLER, so the
  forwarder follows the failover as it would for a direct request (nothing was applied).
* Pure: bytes in, bytes out.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

from orchestrator.errors import InvalidRequest, NotController, ProtocolError
from orchestrator.net.admin import carries_not_controller
from orchestrator.protocol.framing import Request, decode_request, decode_response, encode_request, encode_response

_SIZE_PREFIX = 4


def wrap(request: Request) -> dict[str, Any]:
    """The Envelope request body carrying ``request`` from its client."""
    header = request.header
    framed = encode_request(
        header.api_key, header.api_version, header.correlation_id, request.body, client_id=header.client_id
    )
    return {
        "request_data": framed[_SIZE_PREFIX:],
        "request_principal": request.principal.encode(),
        "client_host_address": _packed(request.client_host),
    }


def unwrap(envelope: Mapping[str, Any]) -> Request:
    """The client's request inside an Envelope, with the client's principal and host; InvalidRequest when the
    envelope is malformed."""
    try:
        inner = decode_request(bytes(envelope["request_data"]))
        principal = bytes(envelope["request_principal"] or b"").decode()
    except (ProtocolError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the forwarded request does not decode: {exc}") from exc
    if not principal.startswith("User:"):
        raise InvalidRequest(f"the forwarded principal {principal!r} is not User:<name>")
    return dataclasses.replace(
        inner, principal=principal, client_host=_unpacked(bytes(envelope["client_host_address"]))
    )


def answer(inner: Request, body: Mapping[str, object]) -> dict[str, Any]:
    """The Envelope response body carrying the controller's answer ``body`` to ``inner``."""
    error = NotController.code if carries_not_controller(body) else 0
    return {"response_data": encode_response(inner.header, body)[_SIZE_PREFIX:], "error_code": error}


def inner_response(request: Request, envelope_response: Mapping[str, Any]) -> dict[str, Any]:
    """The controller's answer to ``request`` out of the Envelope response (whose error_code was 0)."""
    data = envelope_response.get("response_data")
    if data is None:
        raise ProtocolError("an Envelope response without error carries no response")
    _, body = decode_response(bytes(data), request.header.api_key, request.header.api_version)
    return body


def _packed(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def _unpacked(address: bytes) -> str:
    try:
        return str(ipaddress.ip_address(address)) if address else ""
    except ValueError:
        return ""
