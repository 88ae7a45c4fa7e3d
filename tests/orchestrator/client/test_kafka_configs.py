"""The config changes tieredctl sends to a cluster without our APIs: Kafka's operations guide's recipe for each
policy, the reverse for enable, nothing when already so, and never our private remote.log.disable.policy."""

from __future__ import annotations

import re

import pytest

from orchestrator.client.kafka_configs import KafkaConfigChange, disable_change, enable_change
from orchestrator.errors import InvalidArgument

pytestmark = pytest.mark.unit

# DescribeConfigs' values of a tiered topic (defaults included, as a stock broker answers).
TIERED = {
    "remote.storage.enable": "true",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
}


def test_retain_sends_copy_disable_with_both_local_retentions_at_minus_two():
    change = disable_change("t", "retain", TIERED)
    assert change == KafkaConfigChange(
        set={"remote.log.copy.disable": "true", "local.retention.ms": "-2", "local.retention.bytes": "-2"}
    )


def test_retain_names_the_topic_level_local_retention_it_overwrites():
    change = disable_change("t", "retain", TIERED | {"local.retention.ms": "3600000", "local.retention.bytes": "-1"})
    assert change.replaced == {"local.retention.ms": "3600000", "local.retention.bytes": "-1"}
    assert change.set["local.retention.ms"] == "-2"


def test_delete_sends_remote_storage_off_with_delete_on_disable():
    change = disable_change("t", "delete", TIERED)
    assert change == KafkaConfigChange(set={"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})


def test_delete_after_retain_purges_with_the_same_two_keys():
    retained = TIERED | {"remote.log.copy.disable": "true"}
    assert disable_change("t", "delete", retained).set == {
        "remote.storage.enable": "false",
        "remote.log.delete.on.disable": "true",
    }


@pytest.mark.parametrize("policy", ["retain", "delete"])
def test_no_change_ever_names_our_private_policy_key(policy):
    for configs in (TIERED, TIERED | {"remote.log.copy.disable": "true", "local.retention.ms": "5"}):
        change = disable_change("t", policy, configs)
        assert "remote.log.disable.policy" not in change.set and "remote.log.disable.policy" not in change.delete
    off = TIERED | {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert "remote.log.disable.policy" not in enable_change(off).set


def test_a_disable_already_in_place_is_empty():
    retained = TIERED | {"remote.log.copy.disable": "true"}
    deleted = TIERED | {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert disable_change("t", "retain", retained).empty
    assert disable_change("t", "delete", deleted).empty


def test_retain_on_a_topic_whose_remote_data_was_deleted_is_refused():
    deleted = TIERED | {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    with pytest.raises(InvalidArgument, match="cannot be kept"):
        disable_change("t", "retain", deleted)


@pytest.mark.parametrize("policy", ["retain", "delete"])
def test_disabling_a_topic_without_remote_storage_is_refused_by_name(policy):
    with pytest.raises(InvalidArgument, match=re.escape("'t' has remote.storage.enable=false")):
        disable_change("t", policy, TIERED | {"remote.storage.enable": "false"})


def test_an_unknown_policy_is_refused():
    with pytest.raises(InvalidArgument, match="policy 'purge'"):
        disable_change("t", "purge", TIERED)


def test_enable_after_retain_deletes_what_the_disable_set():
    retained = TIERED | {"remote.log.copy.disable": "true"}
    assert enable_change(retained) == KafkaConfigChange(
        delete=("remote.log.copy.disable", "local.retention.ms", "local.retention.bytes")
    )


def test_enable_after_retain_keeps_a_local_retention_set_since():
    retained = TIERED | {"remote.log.copy.disable": "true", "local.retention.ms": "86400000"}
    assert enable_change(retained).delete == ("remote.log.copy.disable", "local.retention.bytes")


def test_enable_after_delete_turns_remote_storage_on_and_drops_delete_on_disable():
    deleted = TIERED | {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert enable_change(deleted) == KafkaConfigChange(
        set={"remote.storage.enable": "true"}, delete=("remote.log.delete.on.disable",)
    )


def test_enable_of_a_topic_never_tiered_turns_remote_storage_on():
    assert enable_change({"remote.storage.enable": "false"}).set == {"remote.storage.enable": "true"}


def test_enable_of_a_tiered_topic_is_empty():
    assert enable_change(TIERED).empty
