"""Kafka request/response framing: a 4-byte big-endian size, a header, a body.

Request header v1 (non-flexible request versions) or v2 (flexible); response header v0 or v1 likewise, except
that an ApiVersions response always uses header v0, as in Kafka (a client must be able to read it before it
knows which versions the server speaks).

A reader bounds every frame by ``max_frame_bytes`` before allocating, and turns a negative or oversized size,
a truncated frame, an unknown api key or version into :class:`ProtocolError` (:class:`UnsupportedRequest` for
the last two, carrying what could be read of the header so a server can still answer it).

Bytes after a request's body are ignored, as Kafka's broker ignores them (it parses the body from the frame's
buffer and never checks that the buffer was used up); :attr:`Request.trailing_bytes` says how many there were.
Real clients send such frames: librdkafka asks Metadata v9+ for every topic with the 4-byte placeholder it
reserves for the topic count left in place (a compact null, 0x00, then three zero bytes), so Kafka reads the
null topic list and the next bytes as the booleans and the tag buffer, and never looks at the last three bytes.
A response must be used up exactly: a reply longer than its schema is a bug of the peer, not a client quirk.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import ConnectionClosed, ProtocolError
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import MessageSchema, request_schema, response_schema, schema

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_KEY_VERSION_CORR = struct.Struct(">hhi")


class UnsupportedRequest(ProtocolError):
    """A well-framed request whose api key or version this server does not implement."""

    name, retriable = "UNSUPPORTED_REQUEST", False

    def __init__(self, message: str, *, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: dict[str, Any]
    schema: MessageSchema
    trailing_bytes: int = 0  # bytes after the body, ignored (see the module docstring)
    # Who sent it, as the server authenticated the connection (orchestrator.net.server), and from where.
    principal: str = "User:ANONYMOUS"
    client_host: str = ""


def request_header_version(req: MessageSchema, version: int) -> int:
    return 2 if version in req.flexible_versions else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    resp = response_schema(api_key)
    return 1 if resp is not None and version in resp.flexible_versions else 0


def frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: Mapping[str, object],
    *,
    client_id: str | None = "tieredctl",
) -> bytes:
    """A whole framed request (size prefix included)."""
    req = request_schema(api_key)
    if req is None:
        raise ProtocolError(f"unknown api key {api_key}")
    req.check_version(api_version)
    out = bytearray(4)
    header = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    codec.encode_into(schema("RequestHeader"), request_header_version(req, api_version), header, out)
    codec.encode_into(req, api_version, body, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_request(payload: bytes | bytearray | memoryview) -> Request:
    """Parse one request frame's payload (without its size prefix); bytes after the body are ignored, as Kafka
    ignores them, and counted in :attr:`Request.trailing_bytes`."""
    if len(payload) < _KEY_VERSION_CORR.size:
        raise ProtocolError(f"request of {len(payload)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORR.unpack_from(payload, 0)
    req = request_schema(api_key)
    if req is None or api_version not in req.valid_versions:
        what = f"api key {api_key}" if req is None else f"{req.name} version {api_version}"
        raise UnsupportedRequest(
            f"unsupported {what}", api_key=api_key, api_version=api_version, correlation_id=correlation_id
        )
    r = codec.Reader(payload)
    raw = codec.decode_from(schema("RequestHeader"), request_header_version(req, api_version), r)
    header = RequestHeader(api_key, api_version, correlation_id, raw["client_id"])
    body = codec.decode_from(req, api_version, r)
    return Request(header, body, req, trailing_bytes=r.remaining)


def encode_response(header: RequestHeader, body: Mapping[str, object]) -> bytes:
    """A whole framed response to the request with ``header``."""
    resp = response_schema(header.api_key)
    if resp is None:
        raise ProtocolError(f"no response schema for api key {header.api_key}")
    out = bytearray(4)
    hv = response_header_version(header.api_key, header.api_version)
    codec.encode_into(schema("ResponseHeader"), hv, {"correlation_id": header.correlation_id}, out)
    codec.encode_into(resp, header.api_version, body, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(
    payload: bytes | bytearray | memoryview, api_key: int, api_version: int
) -> tuple[int, dict[str, Any]]:
    """Parse a response payload to a request of (api_key, api_version): (correlation id, body)."""
    resp = response_schema(api_key)
    if resp is None:
        raise ProtocolError(f"no response schema for api key {api_key}")
    r = codec.Reader(payload)
    hv = response_header_version(api_key, api_version)
    header = codec.decode_from(schema("ResponseHeader"), hv, r)
    body = codec.decode_from(resp, api_version, r)
    if r.remaining:
        raise ProtocolError(f"{resp.name} v{api_version}: {r.remaining} trailing bytes")
    return int(header["correlation_id"]), body


def check_frame_size(size: int, max_frame_bytes: int) -> None:
    if size < 0:
        raise ProtocolError(f"negative frame size {size}")
    if size > max_frame_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_frame_bytes}")


async def read_frame(reader: asyncio.StreamReader, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Read one frame's payload. ConnectionClosed on a clean end between frames, ProtocolError otherwise."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError(f"truncated frame size ({len(exc.partial)} of 4 bytes)") from exc
        raise ConnectionClosed("peer closed the connection") from exc
    size = _SIZE.unpack(head)[0]
    check_frame_size(size, max_frame_bytes)
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"truncated frame: {len(exc.partial)} of {size} bytes") from exc
