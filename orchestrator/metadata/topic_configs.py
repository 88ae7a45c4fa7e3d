"""Topic configuration: the catalogue of known topic configs, and incremental alter operations on a config map.

Pure, and in the metadata layer because every reader of topic configs needs the catalogue's defaults: the
controller validates against it, the brokers apply retention with it, the scan's export exports its values.
The catalogue lists Kafka's topic configs with Kafka's defaults and validators, plus KIP-950's
``remote.log.disable.policy``; the controller refuses any other key (INVALID_CONFIG naming the key), so a typo
never becomes a silently ignored setting.

Error codes (what a client sees per resource):
* an unknown key, or a value that does not parse or is out of range: INVALID_CONFIG (40) naming key and value;
* the tiering keys (``remote.storage.enable``, ``remote.log.copy.disable``, ``remote.log.delete.on.disable``,
  ``remote.log.disable.policy``) answer a bad value with INVALID_REQUEST (42), as KIP-950 and ARCHITECTURE §4 specify;
* an operation code outside 0-3, a null value for SET/APPEND/SUBTRACT, APPEND/SUBTRACT on a key that is not a
  list, or the same key twice in one request: INVALID_REQUEST (42), as Kafka does.

Invariants: :func:`apply_ops` never changes its input; its result holds only catalogue keys with canonical
values (booleans lower-cased, lists comma-joined without blanks), so equal settings compare equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from orchestrator.errors import InvalidConfig, InvalidRequest, KafkaError

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"  # Kafka 3.9 alias: with remote.storage.enable=true, retain
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"  # Kafka 3.9 alias: with =false, delete
REMOTE_LOG_DISABLE_POLICY = "remote.log.disable.policy"  # KIP-950: retain | delete
# The keys our own code reads (brokers' retention and segment rolling, the scan's export, the demo); every other
# catalogue key is only validated and stored.
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
SEGMENT_BYTES = "segment.bytes"
SEGMENT_MS = "segment.ms"
TIERING_KEYS = frozenset(
    {REMOTE_STORAGE_ENABLE, REMOTE_LOG_COPY_DISABLE, REMOTE_LOG_DELETE_ON_DISABLE, REMOTE_LOG_DISABLE_POLICY}
)

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' ConfigOperation, with Kafka's ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigType(IntEnum):
    """DescribeConfigs' ConfigType, with Kafka's ids."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One incremental change: ``op`` on ``name`` with operand ``value`` (None for DELETE)."""

    name: str
    op: AlterConfigOp
    value: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    kind: ConfigType
    default: str
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: frozenset[str] | None = None  # for STRING (exact) and LIST (each element)

    def canonical(self, value: str) -> str:
        """``value`` parsed and validated, in canonical text form; raises INVALID_CONFIG (tiering keys:
        INVALID_REQUEST) naming the key and the value."""
        error: type[KafkaError] = InvalidRequest if self.name in TIERING_KEYS else InvalidConfig
        text = value.strip()
        if self.kind == ConfigType.BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise error(f"{self.name}: '{value}' is not a boolean; expected true or false")
            return text.lower()
        if self.kind in (ConfigType.INT, ConfigType.LONG):
            try:
                number = int(text)
            except ValueError:
                raise error(f"{self.name}: '{value}' is not an integer") from None
            hi = _INT_MAX if self.kind == ConfigType.INT else _LONG_MAX
            self._check_range(number, error, value, type_max=hi)
            return str(number)
        if self.kind == ConfigType.DOUBLE:
            try:
                real = float(text)
            except ValueError:
                raise error(f"{self.name}: '{value}' is not a number") from None
            self._check_range(real, error, value, type_max=None)
            return repr(real)
        if self.kind == ConfigType.LIST:
            items = [item.strip() for item in text.split(",") if item.strip()]
            bad = [i for i in items if self.choices is not None and i not in self.choices]
            if bad or not items:
                raise error(f"{self.name}: '{value}' is not a list of {self._expected()}")
            return ",".join(dict.fromkeys(items))
        if self.choices is not None:
            match = {c.lower(): c for c in self.choices}.get(text.lower())
            if match is None:
                what = "disablement policy" if self.name == REMOTE_LOG_DISABLE_POLICY else "value"
                raise error(f"{self.name}: '{value}' is not a valid {what}; expected {self._expected()}")
            return match
        return text

    def _check_range(self, number: float, error: type[KafkaError], raw: str, *, type_max: int | None) -> None:
        low = self.minimum
        high = self.maximum if self.maximum is not None else type_max
        if low is not None and number < low:
            raise error(f"{self.name}: '{raw}' is out of range; the value must be at least {_number(low)}")
        if high is not None and number > high:
            raise error(f"{self.name}: '{raw}' is out of range; the value must be at most {_number(high)}")

    def _expected(self) -> str:
        return " or ".join(sorted(self.choices)) if self.choices else self.kind.name.lower()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


# Kafka's topic configs with Kafka's defaults, plus KIP-950's policy. Kept sorted by name.
_TOPIC_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        name="cleanup.policy",
        kind=ConfigType.LIST,
        default="delete",
        doc="Retention policy: delete, compact or both.",
        choices=frozenset({"delete", "compact"}),
    ),
    ConfigDef(
        name="compression.type",
        kind=ConfigType.STRING,
        default="producer",
        doc="Final compression of the topic's data.",
        choices=frozenset({"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}),
    ),
    ConfigDef(
        name="delete.retention.ms",
        kind=ConfigType.LONG,
        default="86400000",
        doc="How long delete tombstones are retained.",
        minimum=0,
    ),
    ConfigDef(
        name="file.delete.delay.ms",
        kind=ConfigType.LONG,
        default="60000",
        doc="Delay before a deleted file is removed.",
        minimum=0,
    ),
    ConfigDef(
        name="flush.messages",
        kind=ConfigType.LONG,
        default=str(_LONG_MAX),
        doc="Messages between forced fsyncs.",
        minimum=1,
    ),
    ConfigDef(
        name="flush.ms",
        kind=ConfigType.LONG,
        default=str(_LONG_MAX),
        doc="Time between forced fsyncs.",
        minimum=0,
    ),
    ConfigDef(
        name="index.interval.bytes",
        kind=ConfigType.INT,
        default="4096",
        doc="Bytes between offset index entries.",
        minimum=0,
    ),
    ConfigDef(
        name="local.retention.bytes",
        kind=ConfigType.LONG,
        default="-2",
        doc="Local log size limit with tiering (-2: retention.bytes).",
        minimum=-2,
    ),
    ConfigDef(
        name="local.retention.ms",
        kind=ConfigType.LONG,
        default="-2",
        doc="Local log age limit with tiering (-2: retention.ms).",
        minimum=-2,
    ),
    ConfigDef(
        name="max.compaction.lag.ms",
        kind=ConfigType.LONG,
        default=str(_LONG_MAX),
        doc="Longest a message stays uncompacted.",
        minimum=1,
    ),
    ConfigDef(
        name="max.message.bytes",
        kind=ConfigType.INT,
        default="1048588",
        doc="Largest record batch size allowed.",
        minimum=0,
    ),
    ConfigDef(
        name="message.timestamp.after.max.ms",
        kind=ConfigType.LONG,
        default=str(_LONG_MAX),
        doc="Allowed future skew of timestamps.",
        minimum=0,
    ),
    ConfigDef(
        name="message.timestamp.before.max.ms",
        kind=ConfigType.LONG,
        default=str(_LONG_MAX),
        doc="Allowed past skew of timestamps.",
        minimum=0,
    ),
    ConfigDef(
        name="message.timestamp.type",
        kind=ConfigType.STRING,
        default="CreateTime",
        doc="Timestamp kind of messages.",
        choices=frozenset({"CreateTime", "LogAppendTime"}),
    ),
    ConfigDef(
        name="min.cleanable.dirty.ratio",
        kind=ConfigType.DOUBLE,
        default="0.5",
        doc="Dirty ratio that triggers compaction.",
        minimum=0,
        maximum=1,
    ),
    ConfigDef(
        name="min.compaction.lag.ms",
        kind=ConfigType.LONG,
        default="0",
        doc="Shortest a message stays uncompacted.",
        minimum=0,
    ),
    ConfigDef(
        name="min.insync.replicas",
        kind=ConfigType.INT,
        default="1",
        doc="Replicas that must acknowledge an acks=all write.",
        minimum=1,
    ),
    ConfigDef(
        name="preallocate",
        kind=ConfigType.BOOLEAN,
        default="false",
        doc="Preallocate segment files.",
    ),
    ConfigDef(
        name=REMOTE_LOG_COPY_DISABLE,
        kind=ConfigType.BOOLEAN,
        default="false",
        doc="Kafka 3.9: stop copying to remote storage; with remote.storage.enable=true, disable with retain.",
    ),
    ConfigDef(
        name=REMOTE_LOG_DELETE_ON_DISABLE,
        kind=ConfigType.BOOLEAN,
        default="false",
        doc="Kafka 3.9: with remote.storage.enable=false, disable tiering and delete the remote data.",
    ),
    ConfigDef(
        name=REMOTE_LOG_DISABLE_POLICY,
        kind=ConfigType.STRING,
        default="retain",
        doc="KIP-950: what disabling does to remote data: retain or delete.",
        choices=frozenset({"retain", "delete"}),
    ),
    ConfigDef(
        name=REMOTE_STORAGE_ENABLE,
        kind=ConfigType.BOOLEAN,
        default="false",
        doc="Tier closed segments to remote storage (KIP-405).",
    ),
    ConfigDef(
        name="retention.bytes",
        kind=ConfigType.LONG,
        default="-1",
        doc="Partition size limit (-1: none).",
        minimum=-1,
    ),
    ConfigDef(
        name="retention.ms",
        kind=ConfigType.LONG,
        default="604800000",
        doc="Age limit of the log (-1: none).",
        minimum=-1,
    ),
    ConfigDef(
        name="segment.bytes",
        kind=ConfigType.INT,
        default="1073741824",
        doc="Segment file size.",
        minimum=14,
    ),
    ConfigDef(
        name="segment.index.bytes",
        kind=ConfigType.INT,
        default="10485760",
        doc="Offset index size.",
        minimum=4,
    ),
    ConfigDef(
        name="segment.jitter.ms",
        kind=ConfigType.LONG,
        default="0",
        doc="Random jitter subtracted from segment.ms.",
        minimum=0,
    ),
    ConfigDef(
        name="segment.ms",
        kind=ConfigType.LONG,
        default="604800000",
        doc="Time after which a segment is rolled.",
        minimum=1,
    ),
    ConfigDef(
        name="unclean.leader.election.enable",
        kind=ConfigType.BOOLEAN,
        default="false",
        doc="Allow out-of-sync replicas to become leader.",
    ),
)
TOPIC_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in _TOPIC_CONFIG_DEFS}


def config_def(name: str) -> ConfigDef:
    """The catalogue entry of ``name``; an unknown key is INVALID_CONFIG naming it."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise InvalidConfig(f"unknown topic config '{name}'")
    return d


def ops_from_map(changes: Mapping[str, str | None]) -> tuple[ConfigOp, ...]:
    """A final key/value map as operations: SET each key to its value; a None value DELETEs the key."""
    return tuple(
        ConfigOp(k, AlterConfigOp.DELETE) if v is None else ConfigOp(k, AlterConfigOp.SET, v)
        for k, v in changes.items()
    )


def parse_ops(raw: Sequence[Mapping[str, object]]) -> tuple[ConfigOp, ...]:
    """IncrementalAlterConfigs ``configs`` entries (``name``, ``config_operation``, ``value``) as operations."""
    out: list[ConfigOp] = []
    for entry in raw:
        name, code, value = entry.get("name"), entry.get("config_operation"), entry.get("value")
        if not isinstance(name, str) or not isinstance(code, int):
            raise InvalidRequest(f"malformed config entry {dict(entry)!r}")
        try:
            op = AlterConfigOp(code)
        except ValueError:
            raise InvalidRequest(f"{name}: unknown config operation {code}; expected 0-3") from None
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{name}: value {value!r} is not a string")
        out.append(ConfigOp(name, op, value))
    return tuple(out)


def replacement_ops(current: Mapping[str, str], given: Sequence[Mapping[str, object]]) -> tuple[ConfigOp, ...]:
    """AlterConfigs (non-incremental) ``configs`` entries (``name``, ``value``) as operations that leave exactly
    them set: SET each named config (a null value DELETEs it), DELETE every config of ``current`` not named."""
    ops: list[ConfigOp] = []
    for entry in given:
        name, value = entry.get("name"), entry.get("value")
        if not isinstance(name, str) or (value is not None and not isinstance(value, str)):
            raise InvalidRequest(f"malformed config entry {dict(entry)!r}")
        ops.append(ConfigOp(name, AlterConfigOp.DELETE) if value is None else ConfigOp(name, AlterConfigOp.SET, value))
    named = {op.name for op in ops}
    ops += [ConfigOp(name, AlterConfigOp.DELETE) for name in sorted(current) if name not in named]
    return tuple(ops)


def apply_ops(current: Mapping[str, str], ops: Sequence[ConfigOp]) -> dict[str, str]:
    """The config map after ``ops``, every touched value validated and canonical; ``current`` is unchanged."""
    seen: set[str] = set()
    result = dict(current)
    for op in ops:
        if op.name in seen:
            raise InvalidRequest(f"config '{op.name}' appears more than once in the request")
        seen.add(op.name)
        d = config_def(op.name)
        if op.op == AlterConfigOp.DELETE:
            result.pop(op.name, None)
            continue
        if op.value is None:
            raise InvalidRequest(f"{op.name}: a null value is only allowed with DELETE")
        if op.op == AlterConfigOp.SET:
            result[op.name] = d.canonical(op.value)
            continue
        if d.kind != ConfigType.LIST:
            raise InvalidRequest(f"{op.name}: {op.op.name} is only allowed on list configs")
        items = d.canonical(op.value).split(",")
        existing = [i for i in result.get(op.name, d.default).split(",") if i]
        if op.op == AlterConfigOp.APPEND:
            merged = existing + [i for i in items if i not in existing]
        else:
            merged = [i for i in existing if i not in items]
        if merged:
            result[op.name] = ",".join(merged)
        else:
            result.pop(op.name, None)
    return result


def validate_config_map(values: Mapping[str, str | None]) -> dict[str, str]:
    """A CreateTopics config list, validated and canonical (null values are INVALID_CONFIG, as in Kafka)."""
    for name, value in values.items():
        if value is None:
            config_def(name)
            raise InvalidConfig(f"{name}: a null value is not allowed for a topic config")
    return apply_ops({}, ops_from_map(values))


def effective(configs: Mapping[str, str]) -> list[tuple[ConfigDef, str, bool]]:
    """Every catalogue key with its effective value and whether it is set on the topic (vs the default)."""
    return [(d, configs.get(name, d.default), name in configs) for name, d in sorted(TOPIC_CONFIGS.items())]


def default_int(name: str) -> int:
    """The catalogue's default of an integer config (``retention.ms`` -> 604800000)."""
    return int(config_def(name).default)


def int_or_default(configs: Mapping[str, str], name: str) -> int:
    """:func:`int_value`, or the catalogue's default when the stored value is not an integer (a broker keeps
    serving a topic whose log another tool wrote a bad value into)."""
    try:
        return int_value(configs, name)
    except ValueError:
        return default_int(name)


def int_value(configs: Mapping[str, str], name: str) -> int:
    """An integer config's effective value: the topic's own, else the catalogue's default.

    Raises ValueError for a stored value that is not an integer: the controller stores canonical values only, so
    just a log written by another tool can hold one, and each caller says what it does then.
    """
    return int(configs.get(name, config_def(name).default))


def flag(configs: Mapping[str, str], name: str) -> bool:
    """A boolean config's effective value (canonical maps hold 'true'/'false')."""
    return configs.get(name, TOPIC_CONFIGS[name].default) == "true"
