"""Kafka's topic config validation for tiered storage, written out from Kafka's own source as an independent judge
of the config changes tieredctl sends to a stock cluster (not our controller's code, which a test of ours would
otherwise only compare with itself).

Source: apache/kafka, ``storage/src/main/java/org/apache/kafka/storage/internals/log/LogConfig.java`` at commit
1eb7644349cb07139d6a3c1ad1986979647cac99 (``validate`` -> ``validateTopicLogConfigValues``), with the defaults of
the same file and of ``TopicConfig``. Kafka validates the topic's overrides after the change (``props``) laid over
the broker's defaults (``configuredProps``), and reads ``remote.storage.enable`` before the change from the topic's
existing overrides (``existingConfigs``). Each rule is named after the Java method that holds it; the first rule
broken is the one reported, in the Java order.
"""

from __future__ import annotations

from collections.abc import Mapping

LONG_MAX = 2**63 - 1

# LogConfig's defaults (a broker with no log.* overrides).
DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": str(7 * 24 * 60 * 60 * 1000),
    "retention.bytes": "-1",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(LONG_MAX),
    "remote.storage.enable": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}


def _on(values: Mapping[str, str], name: str) -> bool:
    return values.get(name, "false").lower() == "true"


def kafka_refusal(
    existing: Mapping[str, str],
    after: Mapping[str, str],
    *,
    system_enabled: bool = True,
    zk: bool = False,
) -> str | None:
    """The LogConfig rule that refuses changing a topic's overrides from ``existing`` to ``after`` (its Java method's
    name), or None when Kafka accepts it."""
    eff = {**DEFAULTS, **after}
    n = {k: int(eff[k]) for k in ("retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes")}
    if int(eff["min.compaction.lag.ms"]) > int(eff["max.compaction.lag.ms"]):
        return "validateValues"
    if zk and (_on(eff, "remote.log.delete.on.disable") or _on(eff, "remote.log.copy.disable")):
        return "validateNoInvalidRemoteStorageConfigsInZK"
    if _on(eff, "remote.storage.enable"):
        if not system_enabled:
            return "validateRemoteStorageOnlyIfSystemEnabled"
        if "compact" in eff["cleanup.policy"].lower():
            return "validateNoRemoteStorageForCompactedTopic"
        for total, local, rule in (
            ("retention.bytes", "local.retention.bytes", "validateRemoteStorageRetentionSize"),
            ("retention.ms", "local.retention.ms", "validateRemoteStorageRetentionTime"),
        ):
            # Size: checked when retention.bytes > -1; time: when retention.ms != -1 (the Java differs, and so here).
            checked = n[total] > -1 if total == "retention.bytes" else n[total] != -1
            if checked and n[local] != -2 and (n[local] == -1 or n[local] > n[total]):
                return rule
        if _on(eff, "remote.log.copy.disable"):
            for total, local in (("retention.bytes", "local.retention.bytes"), ("retention.ms", "local.retention.ms")):
                if n[local] != -2 and n[local] != n[total]:
                    return "validateRetentionConfigsWhenRemoteCopyDisabled"
        return None
    was_on = existing.get("remote.storage.enable", "false").lower() == "true"
    if was_on and not _on(eff, "remote.log.delete.on.disable"):
        return "validateTurningOffRemoteStorageWithDelete"
    return None
