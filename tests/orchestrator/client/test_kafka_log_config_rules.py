"""The config changes tieredctl sends to a stock Kafka cluster pass Kafka's own validation.

The rules are a table of cases written out from apache/kafka's
``storage/src/main/java/org/apache/kafka/storage/internals/log/LogConfig.java`` at commit
1eb7644349cb07139d6a3c1ad1986979647cac99 (the Java method of each rule named, and the message Kafka throws
quoted); :mod:`tests.support.kafka_log_config` is a second, independent reading of the same rules, checked here
against the table first, then used to judge every change :mod:`orchestrator.client.kafka_configs` makes, from
topics in many starting configurations. The naive changes Kafka refuses (turning remote storage off alone,
copy.disable alone on a topic with a short local retention) are checked to be refused, so the judge is seen to bite.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from orchestrator.client.kafka_configs import KafkaConfigChange, disable_change, enable_change
from tests.support.kafka_log_config import DEFAULTS, kafka_refusal

pytestmark = pytest.mark.unit

ON = {"remote.storage.enable": "true"}
DAY, HOUR = "86400000", "3600000"

# (case, topic overrides before, after, validator options, the rule that refuses it or None)
# Kafka's messages, quoted from LogConfig.java at the commit above:
#   validateTurningOffRemoteStorageWithDelete: "It is invalid to disable remote storage without deleting remote
#     data. If you want to keep the remote data and turn to read only, please set `remote.storage.enable=true,
#     remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote data, please set
#     `remote.storage.enable=false,remote.log.delete.on.disable=true`."
#   validateRetentionConfigsWhenRemoteCopyDisabled: "When `remote.log.copy.disable` is set to true, the
#     `local.retention.ms` and `retention.ms` must be set to the identical value because there will be no more logs
#     copied to the remote storage." (and the same of the .bytes pair)
#   validateRemoteStorageRetentionTime / Size: "Value must not be -1 as retention.ms value is set as %d." and
#     "Value must not be more than retention.ms property value: %d" (and of retention.bytes)
#   validateNoRemoteStorageForCompactedTopic: "Remote log storage is unsupported for the compacted topics"
#   validateRemoteStorageOnlyIfSystemEnabled: "Tiered Storage functionality is disabled in the broker. Topic cannot
#     be configured with remote log storage."
#   validateNoInvalidRemoteStorageConfigsInZK: "It is invalid to set `remote.log.delete.on.disable` or
#     `remote.log.copy.disable` under Zookeeper's mode."
#   validateValues: "conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)"
RULES: list[tuple[str, Mapping[str, str], Mapping[str, str], Mapping[str, bool], str | None]] = [
    (
        "turning remote storage off alone",
        ON,
        {"remote.storage.enable": "false"},
        {},
        "validateTurningOffRemoteStorageWithDelete",
    ),
    ("turning it off by deleting the override", ON, {}, {}, "validateTurningOffRemoteStorageWithDelete"),
    (
        "turning it off with delete.on.disable=false",
        ON,
        {"remote.storage.enable": "false", "remote.log.delete.on.disable": "false"},
        {},
        "validateTurningOffRemoteStorageWithDelete",
    ),
    (
        "turning it off with delete.on.disable",
        ON,
        {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
        {},
        None,
    ),
    ("off on a topic never tiered", {}, {"remote.storage.enable": "false"}, {}, None),
    (
        "staying off without delete.on.disable",
        {"remote.storage.enable": "false"},
        {"remote.storage.enable": "false", "retention.ms": DAY},
        {},
        None,
    ),
    ("copy.disable with local retention at -2", ON, {**ON, "remote.log.copy.disable": "true"}, {}, None),
    (
        "copy.disable with local.retention.ms shorter",
        ON | {"local.retention.ms": HOUR},
        {**ON, "remote.log.copy.disable": "true", "local.retention.ms": HOUR},
        {},
        "validateRetentionConfigsWhenRemoteCopyDisabled",
    ),
    (
        "copy.disable with local.retention.ms equal to retention.ms",
        ON,
        {**ON, "remote.log.copy.disable": "true", "retention.ms": DAY, "local.retention.ms": DAY},
        {},
        None,
    ),
    (
        "copy.disable with local.retention.bytes shorter",
        ON,
        {**ON, "remote.log.copy.disable": "true", "retention.bytes": "5000", "local.retention.bytes": "1000"},
        {},
        "validateRetentionConfigsWhenRemoteCopyDisabled",
    ),
    (
        "copy.disable with local.retention.bytes equal",
        ON,
        {**ON, "remote.log.copy.disable": "true", "retention.bytes": "5000", "local.retention.bytes": "5000"},
        {},
        None,
    ),
    (
        "copy.disable on a topic not tiered",
        {},
        {"remote.log.copy.disable": "true", "local.retention.ms": HOUR},
        {},
        None,
    ),
    (
        "tiering a compacted topic",
        {},
        {**ON, "cleanup.policy": "compact"},
        {},
        "validateNoRemoteStorageForCompactedTopic",
    ),
    (
        "tiering a compact,delete topic",
        {},
        {**ON, "cleanup.policy": "compact,delete"},
        {},
        "validateNoRemoteStorageForCompactedTopic",
    ),
    (
        "tiering with the system off",
        {},
        dict(ON),
        {"system_enabled": False},
        "validateRemoteStorageOnlyIfSystemEnabled",
    ),
    (
        "local.retention.ms -1 under a finite retention.ms",
        {},
        {**ON, "local.retention.ms": "-1"},
        {},
        "validateRemoteStorageRetentionTime",
    ),
    (
        "local.retention.ms above retention.ms",
        {},
        {**ON, "retention.ms": HOUR, "local.retention.ms": DAY},
        {},
        "validateRemoteStorageRetentionTime",
    ),
    (
        "local.retention.ms -1 under infinite retention.ms",
        {},
        {**ON, "retention.ms": "-1", "local.retention.ms": "-1"},
        {},
        None,
    ),
    (
        "local.retention.bytes above retention.bytes",
        {},
        {**ON, "retention.bytes": "1000", "local.retention.bytes": "2000"},
        {},
        "validateRemoteStorageRetentionSize",
    ),
    (
        "local.retention.bytes -1 under a finite retention.bytes",
        {},
        {**ON, "retention.bytes": "1000", "local.retention.bytes": "-1"},
        {},
        "validateRemoteStorageRetentionSize",
    ),
    (
        "local.retention.bytes anything under infinite retention.bytes",
        {},
        {**ON, "local.retention.bytes": "123"},
        {},
        None,
    ),
    (
        "copy.disable under ZooKeeper",
        ON,
        {**ON, "remote.log.copy.disable": "true"},
        {"zk": True},
        "validateNoInvalidRemoteStorageConfigsInZK",
    ),
    (
        "delete.on.disable under ZooKeeper",
        ON,
        {"remote.log.delete.on.disable": "true"},
        {"zk": True},
        "validateNoInvalidRemoteStorageConfigsInZK",
    ),
    (
        "min compaction lag above max",
        {},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
        {},
        "validateValues",
    ),
]


@pytest.mark.parametrize(("existing", "after", "options", "rule"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_the_independent_validator_reads_each_rule_of_the_table_as_kafka_does(existing, after, options, rule):
    assert kafka_refusal(existing, after, **options) == rule


# Topics as they may stand before a change: their topic-level overrides.
STARTS: dict[str, dict[str, str]] = {
    "tiered, defaults": dict(ON),
    "tiered, local 1h of 1d": ON | {"retention.ms": DAY, "local.retention.ms": HOUR},
    "tiered, local bytes below total": ON | {"retention.bytes": "100000000", "local.retention.bytes": "1000000"},
    "tiered, infinite retention, local -1": ON | {"retention.ms": "-1", "local.retention.ms": "-1"},
    "tiered, every retention set": ON
    | {"retention.ms": DAY, "local.retention.ms": HOUR, "retention.bytes": "5000", "local.retention.bytes": "100"},
}


def described(overrides: Mapping[str, str]) -> dict[str, str | None]:
    """DescribeConfigs' values of a topic with these overrides: the defaults under them."""
    return {**DEFAULTS, **overrides}


def applied(overrides: Mapping[str, str], change: KafkaConfigChange) -> dict[str, str]:
    after = {**overrides, **change.set}
    for key in change.delete:
        after.pop(key, None)
    return after


@pytest.mark.parametrize("policy", ["retain", "delete"])
@pytest.mark.parametrize("start", list(STARTS), ids=list(STARTS))
def test_each_disable_and_the_enable_after_it_pass_kafkas_rules(start, policy):
    overrides = STARTS[start]
    disable = disable_change("t", policy, described(overrides))
    disabled = applied(overrides, disable)
    assert kafka_refusal(overrides, disabled) is None, disable
    enable = enable_change(described(disabled))
    enabled = applied(disabled, enable)
    assert kafka_refusal(disabled, enabled) is None, enable
    assert enabled.get("remote.storage.enable") == "true"
    assert "remote.log.copy.disable" not in enabled and "remote.log.delete.on.disable" not in enabled


@pytest.mark.parametrize("start", list(STARTS), ids=list(STARTS))
def test_a_purge_after_retain_passes_kafkas_rules(start):
    retained = applied(STARTS[start], disable_change("t", "retain", described(STARTS[start])))
    purged = applied(retained, disable_change("t", "delete", described(retained)))
    assert kafka_refusal(retained, purged) is None


def test_the_naive_changes_are_refused_so_the_judge_bites():
    assert kafka_refusal(ON, {"remote.storage.enable": "false"}) == "validateTurningOffRemoteStorageWithDelete"
    short_local = STARTS["tiered, local 1h of 1d"]
    copy_only = short_local | {"remote.log.copy.disable": "true"}
    assert kafka_refusal(short_local, copy_only) == "validateRetentionConfigsWhenRemoteCopyDisabled"
