"""Request frames real Kafka clients sent, checked against our codec and against kio (an independent codec
generated from Kafka's own schema files).

A frame is one request as a server received it, without its size prefix: header and body. For each one:

* our :func:`~orchestrator.protocol.framing.decode_request` reads it, and encoding what it read gives back the
  frame's bytes exactly, up to where the body ends (bytes after the body are ignored, as Kafka ignores them, and
  allowed only where a known client sends them: librdkafka's all-topics Metadata v9+, see
  :mod:`orchestrator.protocol.framing`);
* kio's reader reads the body to the same value, and consumes the same number of bytes.

Frames come from ``TIEREDCTL_TRACE_REQUESTS`` traces (:class:`orchestrator.net.server.RequestTrace`): live in the
compatibility tests, and kept in ``tests/orchestrator/protocol/golden/client_frames.jsonl`` as golden cases.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kio.serial import entity_reader

from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import decode_request, encode_request
from orchestrator.protocol.schema import request_schema
from tests.orchestrator.protocol.test_crosscheck import kio_class, kio_to_ours
from tests.support.schema_values import project_fields

GOLDEN = Path(__file__).resolve().parents[1] / "orchestrator" / "protocol" / "golden" / "client_frames.jsonl"

# (client id prefix, api key, version range): where a client is known to send bytes after the body.
TRAILING_BYTES_ALLOWED = [
    ("rdkafka", ApiKey.METADATA, range(9, 13)),
    ("confluent-kafka", ApiKey.METADATA, range(9, 13)),
]


def read_frames(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def unique(frames: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One frame per distinct byte string (a long run repeats the same requests many times)."""
    return list({f["frame"]: f for f in frames}.values())


def problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with our reading of one captured frame, or None."""
    raw = bytes.fromhex(entry["frame"])
    request = decode_request(raw)
    header = request.header
    key, version = header.api_key, header.api_version
    where = f"{request.schema.name} v{version} from {header.client_id!r}"
    if request.trailing_bytes:
        allowed = any(
            (header.client_id or "").startswith(client) and key == k and version in versions
            for client, k, versions in TRAILING_BYTES_ALLOWED
        )
        if not allowed:
            return f"{where}: {request.trailing_bytes} bytes after the body"
    used = len(raw) - request.trailing_bytes
    again = encode_request(key, version, header.correlation_id, request.body, client_id=header.client_id)[4:]
    if again != raw[:used]:
        return f"{where}: re-encoding what we read gives {again.hex()}, the client sent {raw[:used].hex()}"
    schema = request_schema(key)
    assert schema is not None
    cls = kio_class(schema.name, version)
    if cls is None:
        return f"{where}: kio has no class for it"
    body_start = used - len(codec.encode(schema, version, request.body))
    theirs, size = entity_reader(cls)(raw[body_start:used], 0)
    if size != used - body_start:
        return f"{where}: kio reads {size} bytes of the body, we read {used - body_start}"
    ours = project_fields(schema.fields, version, request.body)
    if kio_to_ours(theirs, schema.fields, version) != ours:
        return f"{where}: kio reads {theirs!r}, we read {ours!r}"
    return None
