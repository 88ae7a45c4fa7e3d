"""Cross-checks of our schemas and codec against independent Kafka protocol implementations.

* kio (classes generated from Kafka's own schema files, one per message version): the layout of every
  (schema, version) we declare must match kio's class field by field, and values drawn by hypothesis from kio's
  types must encode to exactly kio's bytes with our codec, and kio's bytes must decode to the same value.
* kafka-python: it ships a copy of Kafka's client-side schema files, which our schemas must agree with field by
  field for every declared version; and its older hand-written protocol structs (``kafka.protocol.old``) must
  produce the same bytes as our codec for the headers and several messages.
* Cluster metadata records and remote log metadata records, which neither library has: golden bytes laid out
  by hand below, field by field, following Kafka's generated serializers.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import importlib.resources
import io
import json
import re
import struct
import types
import typing
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.primitive import Records

from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.protocol import codec
from orchestrator.protocol.schema import FieldSpec, MessageSchema, load_schemas, parse_schema, snake_case
from tests.support.schema_values import is_tagged, present, project_fields, schema_default, versions_of

with warnings.catch_warnings():
    # kafka-python reads its bundled schema files with a deprecated importlib.resources call at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.old import admin as kp_admin
    from kafka.protocol.old import api as kp_api
    from kafka.protocol.old import api_versions as kp_api_versions
    from kafka.protocol.old import fetch as kp_fetch
    from kafka.protocol.old import list_offsets as kp_list_offsets
    from kafka.protocol.old import metadata as kp_metadata
    from kafka.protocol.old import produce as kp_produce
    from kafka.protocol.old import sasl_authenticate as kp_sasl_authenticate
    from kafka.protocol.old import sasl_handshake as kp_sasl_handshake
    from kafka.protocol.old import types as kp_types
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = pytest.mark.unit

# kio's ``records`` fields (Produce, Fetch) are a phantom bytes type hypothesis cannot build unaided: any bytes do.
st.register_type_strategy(Records, st.binary(max_size=48).map(Records.parse))

SCHEMAS = load_schemas()
OUR_API_KEY_FLOOR = 10950

#: Kafka's standard messages (requests, responses and headers), i.e. not our own api keys and not records.
STANDARD = sorted(
    name
    for name, s in SCHEMAS.items()
    if s.type in ("request", "response", "header") and (s.api_key is None or s.api_key < OUR_API_KEY_FLOOR)
)
RECORDS = sorted(name for name, s in SCHEMAS.items() if s.type == "metadata" and (s.api_key or 0) < OUR_API_KEY_FLOOR)


def ids(cases: list[tuple[str, int]]) -> list[str]:
    return [f"{n}-v{v}" for n, v in cases]


# ============================================================================ kio


def kio_class(name: str, version: int) -> type | None:
    if name in ("RequestHeader", "ResponseHeader"):
        package, kind = snake_case(name), "header"
    elif name.endswith("Request"):
        package, kind = snake_case(name.removesuffix("Request")), "request"
    elif name.endswith("Response"):
        package, kind = snake_case(name.removesuffix("Response")), "response"
    else:
        return None
    try:
        module = importlib.import_module(f"kio.schema.{package}.v{version}.{kind}")
    except ModuleNotFoundError:
        return None
    cls = getattr(module, name)
    assert isinstance(cls, type)
    return cls


KIO_CASES = [(n, v) for n in STANDARD for v in versions_of(SCHEMAS[n]) if kio_class(n, v) is not None]
#: Versions we declare that kio has no class for, each with the reason; checked below so none is lost silently.
NOT_IN_KIO = {("RequestHeader", 0): "kio starts at v1 (Kafka 4 dropped v0); pinned by golden bytes below"}

#: kio's richer types for Kafka primitives.
_KIO_TYPE = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64", "datetime_i64": "int64"}


def test_kio_covers_every_declared_standard_version() -> None:
    missing = {(n, v) for n in STANDARD for v in versions_of(SCHEMAS[n]) if kio_class(n, v) is None}
    assert missing == set(NOT_IN_KIO)
    assert {n for n, _ in KIO_CASES} == set(STANDARD)


def _nullable_in_kio(f: dataclasses.Field[Any]) -> bool:
    t = f.type
    return typing.get_origin(t) in (types.UnionType, typing.Union) and type(None) in typing.get_args(t)


def _kio_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _compare_with_kio(kio_cls: type, fields: tuple[FieldSpec, ...], version: int, path: str) -> None:
    ours = present(fields, version)
    theirs = dataclasses.fields(kio_cls)
    assert len(ours) == len(theirs), f"{path}: {[f.name for f in ours]} vs kio {[k.name for k in theirs]}"
    for f, k in zip(ours, theirs, strict=True):
        where = f"{path}.{f.name}"
        assert _our_name(k, f) == f.py_name, f"{where}: kio calls it {k.name}"
        assert k.metadata.get("tag") == (f.tag if is_tagged(f, version) else None), where
        kind = classify_field(k)
        assert kind.is_array == f.is_array, where
        if isinstance(kind, EntityField | EntityTupleField):
            assert f.is_struct, where
            _compare_with_kio(kind.type_, f.fields, version, where)
        else:
            assert not f.is_struct, where
            kafka_type = k.metadata["kafka_type"]
            assert _KIO_TYPE.get(kafka_type, kafka_type) == f.element_type, where
        # kio types every scalar uuid as optional (None stands for the zero uuid), and its datetime_i64 fields
        # too (None stands for -1, as in ProduceResponse's LogAppendTimeMs).
        if f.type != "uuid" and k.metadata.get("kafka_type") != "datetime_i64":
            assert _nullable_in_kio(k) == (version in f.nullable_versions), f"{where}: nullability"
        kio_default = _kio_default(k)
        if kio_default is not dataclasses.MISSING and not f.is_struct:
            assert to_ours(kio_default, f, version) == schema_default(f, version), f"{where}: default"


def _our_name(k: dataclasses.Field[Any], f: FieldSpec) -> str:
    """kio drops the ``_ms`` of fields it types as timedelta or datetime (``throttle_time`` for ``ThrottleTimeMs``)."""
    if k.metadata.get("kafka_type", "").startswith(("timedelta", "datetime")) and f.py_name == f"{k.name}_ms":
        return f.py_name
    return k.name


@pytest.mark.parametrize(("name", "version"), KIO_CASES, ids=ids(KIO_CASES))
def test_layout_matches_kio(name: str, version: int) -> None:
    cls = kio_class(name, version)
    assert cls is not None
    assert bool(cls.__flexible__) == (version in SCHEMAS[name].flexible_versions)  # type: ignore[attr-defined]
    if SCHEMAS[name].api_key is not None:
        assert cls.__api_key__ == SCHEMAS[name].api_key  # type: ignore[attr-defined]
    _compare_with_kio(cls, SCHEMAS[name].fields, version, name)


def to_ours(value: Any, field: FieldSpec, version: int) -> Any:
    """A kio field value as our codec's value for ``field``."""
    if value is None:
        if field.type == "uuid":
            return ZERO_UUID
        if field.type == "int64" and version not in field.nullable_versions:
            return -1  # a kio datetime_i64 left unset: Kafka's -1 sentinel
        return None
    if field.is_array:
        return [_element_to_ours(x, field, version) for x in value]
    return _element_to_ours(value, field, version)


def _element_to_ours(value: Any, field: FieldSpec, version: int) -> Any:
    if field.is_struct:
        return kio_to_ours(value, field.fields, version)
    if value is None:
        assert field.element_type == "uuid"
        return ZERO_UUID
    if isinstance(value, uuid.UUID):
        return Uuid(value.bytes)
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)  # as kio writes it
    if isinstance(value, bool):
        return value
    if isinstance(value, enum.IntEnum | int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    raise AssertionError(f"unexpected kio value {value!r} for {field.name}")


def kio_to_ours(obj: Any, fields: tuple[FieldSpec, ...], version: int) -> dict[str, Any]:
    ours = present(fields, version)
    theirs = dataclasses.fields(obj)
    assert len(ours) == len(theirs)
    return {f.py_name: to_ours(getattr(obj, k.name), f, version) for f, k in zip(ours, theirs, strict=True)}


def kio_encode(obj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


KIO_SETTINGS = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize(("name", "version"), KIO_CASES, ids=ids(KIO_CASES))
@KIO_SETTINGS
@given(data=st.data())
def test_bytes_match_kio(name: str, version: int, data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    cls = kio_class(name, version)
    assert cls is not None
    obj = data.draw(st.from_type(cls), label="kio value")
    expected = kio_encode(obj)
    value = kio_to_ours(obj, schema.fields, version)
    assert codec.encode(schema, version, value).hex() == expected.hex()
    assert project_fields(schema.fields, version, codec.decode(schema, version, expected)) == value
    # And kio reads what we wrote.
    read_back, size = entity_reader(cls)(codec.encode(schema, version, value), 0)
    assert size == len(expected)
    assert kio_encode(read_back) == expected


# ============================================================================ kafka-python

_KP_RESOURCES = "kafka.protocol.schemas.resources"


def _kafka_python_schema(name: str) -> MessageSchema | None:
    """Kafka's schema file for ``name`` as kafka-python ships it (its ``//`` comment lines dropped), or None."""
    resource = importlib.resources.files(_KP_RESOURCES) / f"{name}.json"
    if not resource.is_file():
        return None
    text = re.sub(r"(?m)^\s*//.*$", "", resource.read_text(encoding="utf-8"))
    return parse_schema(json.loads(text))


KP_JSON = [n for n in STANDARD if _kafka_python_schema(n) is not None]
#: Broker-to-controller APIs kafka-python (a client) does not ship; kio covers them above.
KP_JSON_EXPECTED_MISSING = {
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResponse",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
    "EnvelopeRequest",
    "EnvelopeResponse",
}


def test_kafka_python_ships_the_client_schemas() -> None:
    assert set(STANDARD) - set(KP_JSON) == KP_JSON_EXPECTED_MISSING


def _compare_fields(ours: tuple[FieldSpec, ...], theirs: tuple[FieldSpec, ...], version: int, path: str) -> None:
    mine, kafka = present(ours, version), present(theirs, version)
    assert [f.name for f in mine] == [f.name for f in kafka], path
    for a, b in zip(mine, kafka, strict=True):
        where = f"{path}.{a.name} v{version}"
        assert a.type == b.type, where
        assert (version in a.nullable_versions) == (version in b.nullable_versions), f"{where}: nullable"
        assert is_tagged(a, version) == is_tagged(b, version), f"{where}: tagged"
        if is_tagged(a, version):
            assert int(str(a.tag)) == int(str(b.tag)), f"{where}: tag"
        assert schema_default(a, version) == schema_default(b, version), f"{where}: default"
        assert (a.flexible_versions is None) == (b.flexible_versions is None), f"{where}: flexibleVersions"
        if a.flexible_versions is not None and b.flexible_versions is not None:
            assert (version in a.flexible_versions) == (version in b.flexible_versions), where
        if a.is_struct:
            _compare_fields(a.fields, b.fields, version, where)


@pytest.mark.parametrize("name", KP_JSON)
def test_schema_matches_kafkas_json(name: str) -> None:
    ours = SCHEMAS[name]
    theirs = _kafka_python_schema(name)
    assert theirs is not None
    assert (ours.type, ours.api_key) == (theirs.type, theirs.api_key)
    assert str(ours.flexible_versions) == str(theirs.flexible_versions)
    shared = [v for v in versions_of(ours) if v in theirs.valid_versions]
    assert shared, f"{name}: no version in common with Kafka's {theirs.valid_versions}"
    # We may narrow Kafka's range; the only widening is RequestHeader v0, which Kafka 4 dropped.
    assert set(versions_of(ours)) - set(shared) <= ({0} if name == "RequestHeader" else set())
    for v in shared:
        _compare_fields(ours.fields, theirs.fields, v, name)


OLD_KP: dict[tuple[str, int], Any] = {
    ("RequestHeader", 1): kp_api.RequestHeader,
    ("RequestHeader", 2): kp_api.RequestHeaderV2,
    ("ResponseHeader", 0): kp_api.ResponseHeader,
    ("ResponseHeader", 1): kp_api.ResponseHeaderV2,
    **{("MetadataRequest", v): kp_metadata.MetadataRequest[v] for v in range(9)},
    **{("MetadataResponse", v): kp_metadata.MetadataResponse[v] for v in range(9)},
    **{("ApiVersionsRequest", v): kp_api_versions.ApiVersionsRequest[v] for v in range(4)},
    **{("ApiVersionsResponse", v): kp_api_versions.ApiVersionsResponse[v] for v in range(3)},
    **{("CreateTopicsRequest", v): kp_admin.CreateTopicsRequest[v] for v in (2, 3)},
    **{("CreateTopicsResponse", v): kp_admin.CreateTopicsResponse[v] for v in (2, 3)},
    **{("DeleteTopicsRequest", v): kp_admin.DeleteTopicsRequest[v] for v in (1, 2, 3)},
    **{("DeleteTopicsResponse", v): kp_admin.DeleteTopicsResponse[v] for v in (1, 2, 3)},
    **{("DescribeConfigsRequest", v): kp_admin.DescribeConfigsRequest[v] for v in (1, 2)},
    **{("DescribeConfigsResponse", v): kp_admin.DescribeConfigsResponse[v] for v in (1, 2)},
    # kafka-python's hand-written DescribeAcls v2 keeps v1's non-flexible layout; only v1 is a fair judge.
    ("DescribeAclsRequest", 1): kp_admin.DescribeAclsRequest[1],
    ("DescribeAclsResponse", 1): kp_admin.DescribeAclsResponse[1],
    ("CreateAclsRequest", 1): kp_admin.CreateAclsRequest[1],
    ("CreateAclsResponse", 1): kp_admin.CreateAclsResponse[1],
    ("DeleteAclsRequest", 1): kp_admin.DeleteAclsRequest[1],
    ("DeleteAclsResponse", 1): kp_admin.DeleteAclsResponse[1],
    **{("SaslHandshakeRequest", v): kp_sasl_handshake.SaslHandshakeRequest[v] for v in (0, 1)},
    **{("SaslHandshakeResponse", v): kp_sasl_handshake.SaslHandshakeResponse[v] for v in (0, 1)},
    **{("SaslAuthenticateRequest", v): kp_sasl_authenticate.SaslAuthenticateRequest[v] for v in (0, 1)},
    **{("SaslAuthenticateResponse", v): kp_sasl_authenticate.SaslAuthenticateResponse[v] for v in (0, 1)},
    # The data plane: kafka-python's hand-written structs stop before each API's first flexible version.
    **{("ProduceRequest", v): kp_produce.ProduceRequest[v] for v in range(3, 9)},
    **{("ProduceResponse", v): kp_produce.ProduceResponse[v] for v in range(3, 9)},
    **{("FetchRequest", v): kp_fetch.FetchRequest[v] for v in range(4, 12)},
    **{("FetchResponse", v): kp_fetch.FetchResponse[v] for v in range(4, 12)},
    **{("ListOffsetsRequest", v): kp_list_offsets.ListOffsetsRequest[v] for v in range(1, 6)},
    **{("ListOffsetsResponse", v): kp_list_offsets.ListOffsetsResponse[v] for v in range(1, 6)},
}
OLD_CASES = sorted(OLD_KP)


def _to_old(fields: tuple[FieldSpec, ...], version: int, value: dict[str, Any], schema: Any) -> tuple[Any, ...]:
    """Our value as the positional tuple a kafka-python hand-written struct takes, walking its ``Schema``.

    Two spellings differ from Kafka's schema files there: MetadataRequest v0-8 lists topic names as a plain
    string array (a struct with one field for Kafka), and authorized-operation bit sets are lists of bit numbers.
    Tagged-field sections are left empty.
    """
    ours = present(fields, version)
    theirs = list(zip(schema.names, schema.fields, strict=True))
    tagged = bool(theirs) and theirs[-1][1] is kp_types.TaggedFields
    if tagged:
        theirs = theirs[:-1]
    assert len(ours) == len(theirs), f"{[f.name for f in ours]} vs {[n for n, _ in theirs]}"
    items: list[Any] = []
    for f, (_, kind) in zip(ours, theirs, strict=True):
        assert not is_tagged(f, version), "only values without tagged fields go through the old structs"
        v = value[f.py_name]
        if isinstance(kind, kp_types.Array) and v is not None:
            element = kind.array_of
            if isinstance(element, kp_types.Schema):
                v = [_to_old(f.fields, version, x, element) for x in v]
            elif f.is_struct:
                (only,) = present(f.fields, version)
                v = [x[only.py_name] for x in v]
        elif kind is kp_types.BitField:
            v = [bit for bit in range(32) if (v >> bit) & 1]
        elif isinstance(v, Uuid):
            v = v.to_uuid()
        items.append(v)
    if tagged:
        items.append({})
    return tuple(items)


@pytest.mark.parametrize(("name", "version"), OLD_CASES, ids=ids(OLD_CASES))
@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_bytes_match_kafka_python(name: str, version: int, data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    cls = kio_class(name, version)
    assert cls is not None
    value = kio_to_ours(data.draw(st.from_type(cls), label="value"), schema.fields, version)
    old_cls = OLD_KP[(name, version)]
    old = old_cls(*_to_old(schema.fields, version, value, old_cls.SCHEMA))
    assert codec.encode(schema, version, value).hex() == old.encode().hex()


def _record_batch() -> bytes:
    """A RecordBatch v2 as kafka-python's producer builds it: what a Produce carries and a Fetch returns."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1024,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=b"order-1", value=b'{"qty": 3}', headers=[])
    builder.append(1, timestamp=1_700_000_000_001, key=None, value=b"second", headers=[("h", b"v")])
    return bytes(builder.build())


BATCH = _record_batch()


def _data_plane_cases() -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Hand-written Produce, Fetch and ListOffsets bodies, each holding every field of any version it is used at
    (``_fill_struct`` keeps the version's own), with a real record batch wherever the API carries records."""
    produce_request = {
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": BATCH}, {"index": 1, "records": None}]},
            {"name": "payments", "partition_data": [{"index": 4, "records": b""}]},
        ],
    }
    produce_partition = {
        "index": 0,
        "error_code": 0,
        "base_offset": 42,
        "log_append_time_ms": 1_700_000_000_123,
        "log_start_offset": 7,
        "record_errors": [
            {"batch_index": 1, "batch_index_error_message": "bad key"},
            {"batch_index": 2, "batch_index_error_message": None},
        ],
        "error_message": "INVALID_RECORD",
    }
    for v in range(3, 9):
        yield "ProduceRequest", v, {**produce_request, "transactional_id": "txn-1" if v % 2 else None}
        partitions = [produce_partition, {"index": 1, "error_code": 6, "base_offset": -1}]
        yield (
            "ProduceResponse",
            v,
            {"responses": [{"name": "orders", "partition_responses": partitions}], "throttle_time_ms": 5},
        )
    fetch_request = {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 52_428_800,
        "isolation_level": 1,
        "session_id": 12,
        "session_epoch": 3,
        "topics": [
            {
                "topic": "orders",
                "partitions": [
                    {
                        "partition": 2,
                        "current_leader_epoch": 9,
                        "fetch_offset": 100,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [{"topic": "old-orders", "partitions": [0, 3]}],
        "rack_id": "rack-a",
    }
    fetch_partitions = [
        {
            "partition_index": 2,
            "error_code": 0,
            "high_watermark": 102,
            "last_stable_offset": 101,
            "log_start_offset": 0,
            "aborted_transactions": [{"producer_id": 4_000, "first_offset": 100}],
            "preferred_read_replica": -1,
            "records": BATCH,
        },
        {
            "partition_index": 3,
            "error_code": 1,
            "high_watermark": -1,
            "aborted_transactions": None,
            "records": None,
        },
    ]
    fetch_response = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 12,
        "responses": [{"topic": "orders", "partitions": fetch_partitions}],
    }
    for v in range(4, 12):
        yield "FetchRequest", v, fetch_request
        yield "FetchResponse", v, fetch_response
    list_offsets_request = {
        "replica_id": -1,
        "isolation_level": 1,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": 5, "timestamp": -2},
                    {"partition_index": 1, "timestamp": 1_700_000_000_000},
                ],
            }
        ],
    }
    list_offsets_response = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 0, "leader_epoch": 5},
                    {"partition_index": 1, "error_code": 0, "timestamp": 1_700_000_000_000, "offset": 57},
                ],
            }
        ],
    }
    for v in range(1, 6):
        yield "ListOffsetsRequest", v, list_offsets_request
        yield "ListOffsetsResponse", v, list_offsets_response


DATA_PLANE = list(_data_plane_cases())


def test_data_plane_cases_cover_every_kafka_python_version() -> None:
    data_plane = {"Produce", "Fetch", "ListOffsets"}
    wanted = {(n, v) for n, v in OLD_KP if n.removesuffix("Request").removesuffix("Response") in data_plane}
    assert {(n, v) for n, v, _ in DATA_PLANE} == wanted


@pytest.mark.parametrize(("name", "version", "value"), DATA_PLANE, ids=[f"{n}-v{v}" for n, v, _ in DATA_PLANE])
def test_data_plane_bytes_match_kafka_python(name: str, version: int, value: dict[str, Any]) -> None:
    schema = SCHEMAS[name]
    value = _fill_struct(schema.fields, version, value)
    old_cls = OLD_KP[(name, version)]
    expected = old_cls(*_to_old(schema.fields, version, value, old_cls.SCHEMA)).encode()
    ours = codec.encode(schema, version, value)
    assert ours.hex() == expected.hex()
    if name in ("ProduceRequest", "FetchResponse"):
        assert BATCH in ours
    assert project_fields(schema.fields, version, codec.decode(schema, version, expected)) == value


# ============================================================================ golden bytes, laid out by hand


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def u16(v: int) -> bytes:
    return struct.pack(">H", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    if s is None:
        return uv(0)
    data = s.encode()
    return uv(len(data) + 1) + data


def cbytes(b: bytes | None) -> bytes:
    return uv(0) if b is None else uv(len(b) + 1) + b


def carr(items: list[Any] | None, enc: Callable[[Any], bytes]) -> bytes:
    return uv(0) if items is None else uv(len(items) + 1) + b"".join(enc(x) for x in items)


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section: count, then tag, size and bytes of each, in ascending tag order."""
    out = uv(len(fields))
    for tag, body in sorted(fields):
        out += uv(tag) + uv(len(body)) + body
    return out


def uid(u: Uuid) -> bytes:
    return u.raw


NO_TAGS = tags()
U1 = Uuid(bytes(range(1, 17)))
U2 = Uuid(bytes(range(101, 117)))
U3 = Uuid(bytes(range(201, 217)))


def _golden_cases() -> Iterator[tuple[str, int, dict[str, Any], bytes]]:
    # --- RequestHeader v0, which kio no longer has: no client id at all.
    yield (
        "RequestHeader",
        0,
        {"request_api_key": 7, "request_api_version": 0, "correlation_id": 99},
        (i16(7) + i16(0) + i32(99)),
    )

    # --- RegisterBrokerRecord (0)
    for v in range(4):
        value: dict[str, Any] = {
            "broker_id": 7,
            "incarnation_id": U1,
            "broker_epoch": 123_456_789_012,
            "end_points": [{"name": "PLAINTEXT", "host": "b7.example", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 21}],
            "rack": "rack-a" if v % 2 else None,
            "fenced": False,
        }
        body = i32(7)
        if v >= 2:
            value["is_migrating_zk_broker"] = True
            body += boolean(True)
        body += uid(U1) + i64(123_456_789_012)
        body += carr(value["end_points"], lambda e: cstr(e["name"]) + cstr(e["host"]) + u16(9092) + i16(0) + NO_TAGS)
        body += carr(value["features"], lambda f: cstr(f["name"]) + i16(1) + i16(21) + NO_TAGS)
        body += cstr(value["rack"]) + boolean(False)
        if v >= 1:
            value["in_controlled_shutdown"] = True
            body += boolean(True)
        if v >= 3:
            value["log_dirs"] = [U2, U3]
            body += tags((0, carr([U2, U3], uid)))
        else:
            body += NO_TAGS
        yield "RegisterBrokerRecord", v, value, body

    # --- UnregisterBrokerRecord (1), TopicRecord (2), RemoveTopicRecord (9), Fence/Unfence (7, 8)
    yield "UnregisterBrokerRecord", 0, {"broker_id": 3, "broker_epoch": 77}, i32(3) + i64(77) + NO_TAGS
    yield "TopicRecord", 0, {"name": "orders", "topic_id": U1}, cstr("orders") + uid(U1) + NO_TAGS
    yield "RemoveTopicRecord", 0, {"topic_id": U2}, uid(U2) + NO_TAGS
    yield "FenceBrokerRecord", 0, {"id": 4, "epoch": 1_000}, i32(4) + i64(1_000) + NO_TAGS
    yield "UnfenceBrokerRecord", 0, {"id": 5, "epoch": -3}, i32(5) + i64(-3) + NO_TAGS

    # --- ConfigRecord (4): the value is nullable (null deletes the key)
    for val in ("delete", None):
        yield (
            "ConfigRecord",
            0,
            {
                "resource_type": 2,
                "resource_name": "orders",
                "name": "cleanup.policy",
                "value": val,
            },
            i8(2) + cstr("orders") + cstr("cleanup.policy") + cstr(val) + NO_TAGS,
        )

    # --- PartitionRecord (3)
    for v in range(3):
        value = {
            "partition_id": 2,
            "topic_id": U1,
            "replicas": [1, 2, 3],
            "isr": [1, 2],
            "removing_replicas": [3],
            "adding_replicas": [],
            "leader": 1,
            "leader_recovery_state": 1,
            "leader_epoch": 9,
            "partition_epoch": 11,
        }
        ints: Callable[[int], bytes] = i32
        body = i32(2) + uid(U1) + carr([1, 2, 3], ints) + carr([1, 2], ints) + carr([3], ints) + carr([], ints)
        body += i32(1) + i32(9) + i32(11)
        tagged = [(0, i8(1))]
        if v >= 1:
            value["directories"] = [U1, U2, U3]
            body += carr([U1, U2, U3], uid)
        if v >= 2:
            value["eligible_leader_replicas"] = [3]
            value["last_known_elr"] = None  # the default: not written
            tagged.append((1, carr([3], ints)))
        yield "PartitionRecord", v, value, body + tags(*tagged)

    # --- PartitionChangeRecord (5): everything tagged, written only when it differs from the default
    for v in range(3):
        value = {"partition_id": 0, "topic_id": U2, "isr": [4, 5], "leader": 4, "adding_replicas": []}
        tagged = [(0, carr([4, 5], i32)), (1, i32(4)), (4, carr([], i32))]
        if v >= 1:
            value["directories"] = [U3]
            tagged.append((8, carr([U3], uid)))
        if v >= 2:
            value["eligible_leader_replicas"] = []
            value["last_known_elr"] = [6]
            tagged += [(6, carr([], i32)), (7, carr([6], i32))]
        yield "PartitionChangeRecord", v, value, i32(0) + uid(U2) + tags(*tagged)
    yield "PartitionChangeRecord", 0, {"partition_id": 1, "topic_id": U2, "leader": -2}, i32(1) + uid(U2) + NO_TAGS

    # --- BrokerRegistrationChangeRecord (17)
    for v in range(3):
        value = {"broker_id": 8, "broker_epoch": 55, "fenced": -1}
        tagged = [(0, i8(-1))]
        if v >= 1:
            value["in_controlled_shutdown"] = 1
            tagged.append((1, i8(1)))
        if v >= 2:
            value["log_dirs"] = [U1]
            tagged.append((2, carr([U1], uid)))
        yield "BrokerRegistrationChangeRecord", v, value, i32(8) + i64(55) + tags(*tagged)

    # --- AccessControlEntryRecord (18), RemoveAccessControlEntryRecord (19)
    value = {
        "id": U1,
        "resource_type": 2,
        "resource_name": "orders-",
        "pattern_type": 4,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    body = uid(U1) + i8(2) + cstr("orders-") + i8(4) + cstr("User:alice") + cstr("*") + i8(3) + i8(3) + NO_TAGS
    yield "AccessControlEntryRecord", 0, value, body
    yield "RemoveAccessControlEntryRecord", 0, {"id": U2}, uid(U2) + NO_TAGS

    # --- UserScramCredentialRecord (11), RemoveUserScramCredentialRecord (22)
    salt, stored, server = b"\x01" * 16, b"\x02" * 32, b"\x03" * 32
    value = {
        "name": "alice",
        "mechanism": 1,
        "salt": salt,
        "stored_key": stored,
        "server_key": server,
        "iterations": 8192,
    }
    body = cstr("alice") + i8(1) + cbytes(salt) + cbytes(stored) + cbytes(server) + i32(8192) + NO_TAGS
    yield "UserScramCredentialRecord", 0, value, body
    yield "RemoveUserScramCredentialRecord", 0, {"name": "alice", "mechanism": 2}, cstr("alice") + i8(2) + NO_TAGS

    # --- remote log metadata records at versions 0 and 1, each with our extra TieredEpoch on tag 10950
    tip = {"name": "orders", "id": U1, "partition": 3}
    tip_bytes = cstr("orders") + uid(U1) + i32(3) + NO_TAGS
    seg = {"topic_id_partition": tip, "id": U2}
    seg_bytes = tip_bytes + uid(U2) + NO_TAGS
    tiered_tag = 10950
    for v in range(2):
        for tiered_epoch, custom in ((5, b"\x01\x02"), (-1, None)):
            ours = [(tiered_tag, i32(tiered_epoch))] if tiered_epoch != -1 else []
            value = {
                "remote_log_segment_id": seg,
                "start_offset": 100,
                "end_offset": 199,
                "broker_id": 2,
                "max_timestamp_ms": 1_700_000_000_000,
                "event_timestamp_ms": 1_700_000_000_500,
                "segment_leader_epochs": [{"leader_epoch": 4, "offset": 100}, {"leader_epoch": 5, "offset": 150}],
                "segment_size_in_bytes": 4096,
                "custom_metadata": custom,
                "remote_log_segment_state": 1,
                "txn_index_empty": True,
                "tiered_epoch": tiered_epoch,
            }
            body = seg_bytes + i64(100) + i64(199) + i32(2) + i64(1_700_000_000_000) + i64(1_700_000_000_500)
            body += carr(value["segment_leader_epochs"], lambda e: i32(e["leader_epoch"]) + i64(e["offset"]) + NO_TAGS)
            body += i32(4096) + cbytes(custom) + i8(1)
            tagged = [(0, boolean(True)), *ours]
            if v >= 1:
                value["broker_leader_epoch"] = 5
                tagged.append((1, i32(5)))
            yield "RemoteLogSegmentMetadataRecord", v, value, body + tags(*tagged)

            value = {
                "remote_log_segment_id": seg,
                "broker_id": 2,
                "event_timestamp_ms": 1_700_000_001_000,
                "custom_metadata": custom,
                "remote_log_segment_state": 3,
                "tiered_epoch": tiered_epoch,
            }
            body = seg_bytes + i32(2) + i64(1_700_000_001_000) + cbytes(custom) + i8(3)
            tagged = list(ours)
            if v >= 1:  # BrokerLeaderEpoch and EndOffset default to -1: -1 is not written, anything else is
                value["broker_leader_epoch"] = -1 if custom else 0
                value["end_offset"] = 199
                tagged += ([] if custom else [(0, i32(0))]) + [(1, i64(199))]
            yield "RemoteLogSegmentMetadataUpdateRecord", v, value, body + tags(*tagged)

            value = {
                "topic_id_partition": tip,
                "broker_id": 1,
                "event_timestamp_ms": 1_700_000_002_000,
                "remote_partition_delete_state": 2,
                "tiered_epoch": tiered_epoch,
            }
            body = tip_bytes + i32(1) + i64(1_700_000_002_000) + i8(2)
            tagged = list(ours)
            if v >= 1:  # no default in Kafka's schema here: 0 is the default, -1 is written
                value["broker_leader_epoch"] = -1
                value["end_offset"] = 0 if custom else 4999
                tagged += [(0, i32(-1))] + ([] if custom else [(1, i64(4999))])
            yield "RemotePartitionDeleteMetadataRecord", v, value, body + tags(*tagged)

    # --- our own messages (pins their wire format)
    yield (
        "TieredStateRecord",
        0,
        {"topic_id": U3, "tiered_epoch": 2, "tiered_state": 2, "policy": 2},
        (uid(U3) + i32(2) + i8(2) + i8(2) + NO_TAGS),
    )
    yield (
        "DisableRemoteTopicRequest",
        0,
        {"topic_id": U1, "tiered_epoch": 3, "broker_epoch": 12, "policy": 1},
        (i32(-1) + uid(U1) + tags((0, i32(3)), (2, i64(12)), (3, i8(1)))),
    )
    yield (
        "DisableRemoteTopicResponse",
        0,
        {"error_code": 0, "status": 1, "segments_remaining": 40},
        (i32(0) + i16(0) + cstr(None) + tags((0, i8(1)), (5, i64(40)))),
    )


GOLDEN = list(_golden_cases())


def test_golden_cases_cover_every_record_version() -> None:
    covered = {(name, v) for name, v, _, _ in GOLDEN}
    wanted = {(n, v) for n in RECORDS for v in versions_of(SCHEMAS[n])}
    assert wanted <= covered, sorted(wanted - covered)


@pytest.mark.parametrize(
    ("name", "version", "value", "expected"),
    GOLDEN,
    ids=[f"{n}-v{v}-{i}" for i, (n, v, _, _) in enumerate(GOLDEN)],
)
def test_golden_bytes(name: str, version: int, value: dict[str, Any], expected: bytes) -> None:
    schema = SCHEMAS[name]
    assert codec.encode(schema, version, value).hex() == expected.hex()
    decoded = project_fields(schema.fields, version, codec.decode(schema, version, expected))
    for f in present(schema.fields, version):
        assert decoded[f.py_name] == _fill(f, version, value.get(f.py_name, schema_default(f, version))), f.name


def _fill(field: FieldSpec, version: int, v: Any) -> Any:
    """A hand-written value with the defaults of the nested fields it leaves out filled in."""
    if v is None or not field.is_struct:
        return v
    if field.is_array:
        return [_fill_struct(field.fields, version, x) for x in v]
    return _fill_struct(field.fields, version, v)


def _fill_struct(fields: tuple[FieldSpec, ...], version: int, v: dict[str, Any]) -> dict[str, Any]:
    return {
        f.py_name: _fill(f, version, v.get(f.py_name, schema_default(f, version))) for f in present(fields, version)
    }
