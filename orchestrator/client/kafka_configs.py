"""Kafka's own tiering configs: the config changes that disable and re-enable tiered storage on a cluster that speaks
KIP-950 only as Apache Kafka 3.9 shipped it (two topic configs), and what a topic's configs say about its tiering.

Pure: :func:`disable_change` and :func:`enable_change` read the topic's current configs (DescribeConfigs' values,
defaults included) and return the :class:`KafkaConfigChange` to send as one IncrementalAlterConfigs; nothing here
talks to a cluster.

The changes, as Kafka's operations guide (``docs/ops.html``, tiered storage) gives them:

* disable, retain (read-only remote data): ``remote.log.copy.disable=true``, ``local.retention.ms=-2``,
  ``local.retention.bytes=-2``. Kafka refuses copy.disable with a local retention other than -2 or the topic's
  total retention (``LogConfig.validateRetentionConfigsWhenRemoteCopyDisabled``): with copies stopped, the local
  log must keep everything the topic keeps;
* disable, delete: ``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true`` (Kafka refuses
  turning remote storage off without it, ``validateTurningOffRemoteStorageWithDelete``);
* enable: ``remote.storage.enable=true``, and the overrides a disable set are deleted (copy.disable, delete.on.disable,
  and a local retention still at -2: the topic falls back to the broker's default). A topic-level local retention
  the topic had before a retain disable is not known any more then: :attr:`KafkaConfigChange.replaced` carries it
  when the disable overwrites it, and the CLI shows it so the operator can set it again.

Invariants: never ``remote.log.disable.policy`` (ours, not Kafka's: a stock broker refuses an unknown topic
config); a change already in place is empty (:attr:`KafkaConfigChange.empty`) and is not sent; retain on a topic
whose remote data is deleted (or being deleted) is refused (:class:`~orchestrator.errors.InvalidArgument`), as
our controller refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.errors import InvalidArgument
from orchestrator.metadata.topic_configs import (
    LOCAL_RETENTION_BYTES,
    LOCAL_RETENTION_MS,
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    REMOTE_STORAGE_ENABLE,
)

LOCAL_RETENTION_AS_TOTAL = "-2"  # Kafka's local.retention.*: -2 means "as retention.ms / retention.bytes"
KAFKA_POLICIES = ("retain", "delete")


@dataclass(frozen=True)
class KafkaConfigChange:
    """One IncrementalAlterConfigs of a topic: the keys to SET (in order) and to DELETE (back to the default).
    ``replaced`` holds the values this change overwrites that a later enable cannot restore by itself."""

    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    replaced: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.set and not self.delete

    def as_json(self) -> dict[str, object]:
        return {"set": dict(self.set), "delete": list(self.delete), "replaced": dict(self.replaced)}


def _flag(configs: Mapping[str, str | None], name: str) -> bool:
    return (configs.get(name) or "false").strip().lower() == "true"


def remote_storage_on(configs: Mapping[str, str | None]) -> bool:
    return _flag(configs, REMOTE_STORAGE_ENABLE)


def copy_disabled(configs: Mapping[str, str | None]) -> bool:
    return _flag(configs, REMOTE_LOG_COPY_DISABLE)


def delete_on_disable(configs: Mapping[str, str | None]) -> bool:
    return _flag(configs, REMOTE_LOG_DELETE_ON_DISABLE)


def disable_change(topic: str, policy: str, configs: Mapping[str, str | None]) -> KafkaConfigChange:
    """The change that disables tiered storage on ``topic`` with ``policy`` (retain or delete), from its current
    ``configs``; empty when it is already so disabled."""
    if policy not in KAFKA_POLICIES:
        raise InvalidArgument(f"policy {policy!r} is not one of {', '.join(KAFKA_POLICIES)}")
    on = remote_storage_on(configs)
    if policy == "delete":
        if not on and delete_on_disable(configs):
            return KafkaConfigChange()  # already disabled with delete
        if not on:
            raise InvalidArgument(
                f"topic '{topic}' has {REMOTE_STORAGE_ENABLE}=false: its tiered storage is not on, nothing to disable"
            )
        return KafkaConfigChange(set={REMOTE_STORAGE_ENABLE: "false", REMOTE_LOG_DELETE_ON_DISABLE: "true"})
    if not on:
        if delete_on_disable(configs):
            raise InvalidArgument(
                f"topic '{topic}' was disabled with {REMOTE_LOG_DELETE_ON_DISABLE}=true: its remote data is deleted "
                "(or being deleted), so it cannot be kept; 'tiering enable' tiers it again"
            )
        raise InvalidArgument(
            f"topic '{topic}' has {REMOTE_STORAGE_ENABLE}=false: its tiered storage is not on, nothing to disable"
        )
    wanted = {
        REMOTE_LOG_COPY_DISABLE: "true",
        LOCAL_RETENTION_MS: LOCAL_RETENTION_AS_TOTAL,
        LOCAL_RETENTION_BYTES: LOCAL_RETENTION_AS_TOTAL,
    }
    if copy_disabled(configs) and all(configs.get(k) == v for k, v in wanted.items() if k != REMOTE_LOG_COPY_DISABLE):
        return KafkaConfigChange()
    replaced = {
        k: value
        for k in (LOCAL_RETENTION_MS, LOCAL_RETENTION_BYTES)
        if (value := configs.get(k)) is not None and value != LOCAL_RETENTION_AS_TOTAL
    }
    return KafkaConfigChange(set=wanted, replaced=replaced)


def enable_change(configs: Mapping[str, str | None]) -> KafkaConfigChange:
    """The change that (re-)enables tiered storage from the topic's current ``configs``, reversing what a disable
    set; empty when tiering is already on and copying."""
    on, copy_off, delete_on = remote_storage_on(configs), copy_disabled(configs), delete_on_disable(configs)
    if on and not copy_off and not delete_on:
        return KafkaConfigChange()
    set_ = {} if on else {REMOTE_STORAGE_ENABLE: "true"}
    delete = [k for k, gone in ((REMOTE_LOG_COPY_DISABLE, copy_off), (REMOTE_LOG_DELETE_ON_DISABLE, delete_on)) if gone]
    if copy_off:  # the local retention a retain disable set, back to the broker's default
        delete += [k for k in (LOCAL_RETENTION_MS, LOCAL_RETENTION_BYTES) if configs.get(k) == LOCAL_RETENTION_AS_TOTAL]
    return KafkaConfigChange(set=set_, delete=tuple(delete))
