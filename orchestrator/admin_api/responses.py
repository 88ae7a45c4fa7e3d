"""Shaping admin request and response bodies (the controller's and every node's reads): typed messages in the shape
decoding would produce.

Pure: functions of their arguments and of the (static) schemas.

Invariants:
* :func:`normalized` returns a body of ``name`` at ``version`` with every field present (defaults filled in,
  recursively) and every field the version does not have reset to its default: what decoding its encoding would
  return. Handlers normalize each request before reading it and each response before returning it, so a response
  encodes at every version it is asked in and reads the same as one decoded from the wire.
* DescribeConfigs' config sources are Kafka's ids; a topic config is TOPIC if set on the topic, else DEFAULT, and a
  broker config is DYNAMIC_BROKER.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from orchestrator.errors import LeaderNotAvailable
from orchestrator.metadata.image import NO_LEADER, TopicImage
from orchestrator.metadata.topic_configs import ConfigDef, effective
from orchestrator.protocol import messages as m
from orchestrator.protocol.codec import default_factory
from orchestrator.protocol.schema import FieldSpec, schema

from .internal_topics import is_internal

# DescribeConfigs' ConfigSource ids (Kafka's).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DEFAULT = 5

# DescribeConfigs' ConfigType of a broker config: STRING (the values are stored as text).
_CONFIG_TYPE_STRING = 2

Body = TypeVar("Body", bound=Mapping[str, object])

Nodes = Mapping[int, tuple[str, int, str | None]]
"""The nodes a Metadata response names: node id -> (host, port, rack)."""


def normalized(name: str, version: int, body: Body) -> Body:
    """``body`` with every field of ``name`` at ``version`` present (defaults filled in, recursively) and every
    field the version does not have reset to its default: what decoding its encoding would return."""
    s = schema(name)
    s.check_version(version)
    return cast(Body, _fill(s.fields, version, body))  # the same message, completed: its type does not change


def at_newest(name: str, body: Body) -> Body:
    """``body`` normalized at the newest version of ``name`` (the broker lifecycle APIs, which take no version)."""
    hi = schema(name).valid_versions.hi
    assert hi is not None
    return normalized(name, hi, body)


def metadata_brokers(nodes: Nodes) -> list[m.MetadataResponseBroker]:
    return [
        m.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)
        for node_id, (host, port, rack) in sorted(nodes.items())
    ]


def metadata_topic(topic: TopicImage) -> m.MetadataResponseTopic:
    partitions = [
        m.MetadataResponsePartition(
            error_code=LeaderNotAvailable.code if p.leader == NO_LEADER else 0,
            partition_index=p.partition_id,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=[],
        )
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)
    ]
    return m.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=is_internal(topic.name),
        partitions=partitions,
    )


def config_entry(
    name: str,
    value: str,
    source: int,
    default: str | None,
    config_type: int,
    doc: str | None,
    req: m.DescribeConfigsRequest,
) -> m.DescribeConfigsResourceResult:
    synonyms: list[m.DescribeConfigsSynonym] = []
    if req.get("include_synonyms"):
        synonyms.append(m.DescribeConfigsSynonym(name=name, value=value, source=source))
        if source != SOURCE_DEFAULT and default is not None:
            synonyms.append(m.DescribeConfigsSynonym(name=name, value=default, source=SOURCE_DEFAULT))
    return m.DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=False,
        config_source=source,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=config_type,
        documentation=doc if req.get("include_documentation") else None,
    )


def topic_config_entry(
    d: ConfigDef, value: str, explicit: bool, req: m.DescribeConfigsRequest
) -> m.DescribeConfigsResourceResult:
    """A topic config's DescribeConfigs entry: set on the topic (``explicit``) or the catalogue default."""
    source = SOURCE_TOPIC if explicit else SOURCE_DEFAULT
    return config_entry(d.name, value, source, d.default, int(d.kind), d.doc, req)


def broker_config_entry(name: str, value: str, req: m.DescribeConfigsRequest) -> m.DescribeConfigsResourceResult:
    """A dynamic broker config's DescribeConfigs entry (no catalogue: no default, no documentation)."""
    return config_entry(name, value, SOURCE_DYNAMIC_BROKER, None, _CONFIG_TYPE_STRING, None, req)


def created_configs(configs: Mapping[str, str]) -> list[m.CreatableTopicConfigs]:
    return [
        m.CreatableTopicConfigs(
            name=d.name,
            value=value,
            read_only=False,
            config_source=SOURCE_TOPIC if explicit else SOURCE_DEFAULT,
            is_sensitive=False,
        )
        for d, value, explicit in effective(configs)
    ]


_MISSING: Any = object()

# One field of a struct as _fill reads it at one version: its name, whether the version has it, its default's
# factory, and its struct's fields (None: not a struct) with whether it is an array of them.
_FillStep = tuple[str, bool, Callable[[], Any], "tuple[FieldSpec, ...] | None", bool]
_FILL_PLANS: dict[tuple[int, int], tuple[tuple[FieldSpec, ...], tuple[_FillStep, ...]]] = {}


def _fill_plan(fields: tuple[FieldSpec, ...], version: int) -> tuple[_FillStep, ...]:
    """``fields`` at ``version`` as :func:`_fill` walks them, worked out once per struct and version (a response
    naming thousands of topics fills thousands of entries). Keyed by the tuple's identity, and the tuple is kept
    with its plan (schemas are loaded once and live as long as the process), so a key is never reused."""
    key = (id(fields), version)
    hit = _FILL_PLANS.get(key)
    if hit is not None and hit[0] is fields:
        return hit[1]
    plan = tuple(
        (f.py_name, version in f.versions, default_factory(f), f.fields if f.is_struct else None, f.is_array)
        for f in fields
    )
    _FILL_PLANS[key] = (fields, plan)
    return plan


def _fill(fields: tuple[FieldSpec, ...], version: int, value: Mapping[str, Any]) -> dict[str, Any]:
    # Walks the schema, not a type: the one place a body is handled as an untyped dict.
    out: dict[str, Any] = {}
    for name, present, make_default, sub, is_array in _fill_plan(fields, version):
        v = value.get(name, _MISSING) if present else _MISSING
        if v is _MISSING:
            v = make_default()
        elif sub is not None and v is not None:
            v = [_fill(sub, version, e) for e in v] if is_array else _fill(sub, version, v)
        out[name] = v
    return out
