"""Process configuration: grouped frozen dataclasses with commented defaults, read from TOML at entry points only.

A file has one table per group (``[broker]`` or ``[controller]``, ``[s3]``, ``[tls]``). Unknown tables or keys,
and values of the wrong type, are refused with INVALID_CONFIG naming the key, so a typo never silently falls
back to a default. Paths are resolved relative to the file's directory.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.errors import InvalidConfig


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None = None  # None = AWS S3; set for MinIO, Ceph or moto's server
    bucket: str = "tiered-storage"
    prefix: str = "tiered/"  # every object key starts with this
    region: str = "us-east-1"


@dataclass(frozen=True)
class TlsSettings:
    certfile: str | None = None  # this process's certificate (PEM)
    keyfile: str | None = None
    cafile: str | None = None  # CA that signs the peers' certificates
    require_client_cert: bool = False  # servers: refuse clients without a certificate signed by cafile

    @property
    def enabled(self) -> bool:
        return self.certfile is not None or self.cafile is not None


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    data_dir: str  # partition directories live here
    metadata_store: str  # the shared SQLite file
    controllers: str  # Kafka-style bootstrap list of the controllers, "host:port,host:port"
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port (written to ready_file)
    ready_file: str | None = None  # JSON {"port": ..., "pid": ...} written once serving
    rack: str | None = None
    heartbeat_interval_ms: int = 500
    metadata_poll_ms: int = 100  # how often the metadata log is tailed
    tiering_interval_ms: int = 500  # how often copy, local retention and remote expiry run
    segment_bytes: int = 64 * 1024  # segment.bytes default for partitions of this broker
    segment_ms: int = 10_000  # segment.ms default
    request_timeout_ms: int = 10_000
    s3: S3Settings = field(default_factory=S3Settings)
    tls: TlsSettings = field(default_factory=TlsSettings)


@dataclass(frozen=True)
class ControllerProcessConfig:
    node_id: int  # distinct from every broker id
    metadata_store: str
    host: str = "127.0.0.1"
    port: int = 0
    ready_file: str | None = None
    lease_ttl_ms: int = 3_000  # a standby takes over this long after the active controller stops renewing
    broker_session_timeout_ms: int = 6_000  # a broker without a heartbeat for this long is fenced
    disable_request_timeout_ms: int = 10_000
    disable_repoll_ms: int = 200  # an IN_PROGRESS broker is asked again after this long
    stall_threshold_ms: int = 60_000  # a pending broker with no success for this long is reported stalled
    max_in_flight_per_broker: int = 512
    tls: TlsSettings = field(default_factory=TlsSettings)


T = TypeVar("T")


def _build(cls: type[T], values: dict[str, Any], where: str, base: Path) -> T:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InvalidConfig(f"unknown key(s) {unknown} in [{where}]; known: {sorted(fields)}")
    out: dict[str, Any] = {}
    for name, value in values.items():
        hint = str(fields[name].type)
        if hint.startswith("int") and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidConfig(f"[{where}] {name} must be an integer, got {value!r}")
        if hint.startswith("bool") and not isinstance(value, bool):
            raise InvalidConfig(f"[{where}] {name} must be true or false, got {value!r}")
        if hint.startswith("str") and not isinstance(value, str):
            raise InvalidConfig(f"[{where}] {name} must be a string, got {value!r}")
        if name in ("data_dir", "metadata_store", "ready_file", "certfile", "keyfile", "cafile") and value:
            value = str((base / value).resolve())
        out[name] = value
    try:
        return cls(**out)
    except TypeError as exc:
        raise InvalidConfig(f"[{where}]: {exc}") from exc


def _read(path: str | Path) -> tuple[dict[str, Any], Path]:
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InvalidConfig(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfig(f"config file {p} is not valid TOML: {exc}") from exc
    return doc, p.parent


def load_broker_config(path: str | Path) -> BrokerConfig:
    doc, base = _read(path)
    extra = sorted(set(doc) - {"broker", "s3", "tls"})
    if extra or "broker" not in doc:
        raise InvalidConfig(f"{path}: expected tables [broker], [s3], [tls]; got {sorted(doc)}")
    s3 = _build(S3Settings, doc.get("s3", {}), "s3", base)
    tls = _build(TlsSettings, doc.get("tls", {}), "tls", base)
    return _build(BrokerConfig, {**doc["broker"], "s3": s3, "tls": tls}, "broker", base)


def load_controller_config(path: str | Path) -> ControllerProcessConfig:
    doc, base = _read(path)
    extra = sorted(set(doc) - {"controller", "tls"})
    if extra or "controller" not in doc:
        raise InvalidConfig(f"{path}: expected tables [controller], [tls]; got {sorted(doc)}")
    tls = _build(TlsSettings, doc.get("tls", {}), "tls", base)
    return _build(ControllerProcessConfig, {**doc["controller"], "tls": tls}, "controller", base)
