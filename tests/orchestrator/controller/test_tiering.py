"""ARCHITECTURE §4's tiering state machine, row by row, plus Kafka 3.9's aliases, the no-ops and the errors.

Each row starts from a topic in a given tiered state (with the configs a topic in that state really has), applies
one request, and checks either the resulting state/epoch/policy and configs (after replaying the planned records
onto an image, as every process would) or the error class, Kafka code and message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.controller import tiering
from orchestrator.errors import (
    InvalidConfig,
    InvalidRequest,
    KafkaError,
    StaleTieredEpoch,
    TieredStorageDisablementInProgress,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, TopicImage, replay, topic_for
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, TieredState, make_record
from orchestrator.metadata.topic_configs import AlterConfigOp, ConfigOp

pytestmark = pytest.mark.unit

TOPIC_ID = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAQ")
E, C, D, P = (
    "remote.storage.enable",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.log.disable.policy",
)
NOT_TIERED, ENABLED, DISABLING, DISABLED = (
    TieredState.NOT_TIERED,
    TieredState.ENABLED,
    TieredState.DISABLING,
    TieredState.DISABLED,
)
NONE, RETAIN, DELETE = DisablePolicy.NONE, DisablePolicy.RETAIN, DisablePolicy.DELETE


@dataclass(frozen=True)
class Start:
    state: TieredState
    epoch: int
    policy: DisablePolicy
    configs: Mapping[str, str]


NEVER_TIERED = Start(NOT_TIERED, 0, NONE, {})
ENABLED_1 = Start(ENABLED, 1, NONE, {E: "true"})
DISABLING_RETAIN_2 = Start(DISABLING, 2, RETAIN, {E: "false", P: "retain"})
DISABLING_DELETE_2 = Start(DISABLING, 2, DELETE, {E: "false", P: "delete"})
DISABLED_RETAIN_2 = Start(DISABLED, 2, RETAIN, {E: "false", P: "retain"})
DISABLED_DELETE_2 = Start(DISABLED, 2, DELETE, {E: "false", P: "delete"})
DISABLED_BY_COPY_ALIAS_2 = Start(DISABLED, 2, RETAIN, {E: "true", C: "true", P: "retain"})


@dataclass(frozen=True)
class Ok:
    state: TieredState
    epoch: int
    policy: DisablePolicy
    configs: Mapping[str, str | None] = field(default_factory=dict)  # expected values; None = key absent


@dataclass(frozen=True)
class Refused:
    error: type[KafkaError]
    code: int
    says: Sequence[str]


Request = Mapping[str, str | None] | Sequence[ConfigOp]


class Case(NamedTuple):
    """One row of the table: a topic's starting point, the request applied to it, and what must come of it."""

    start: Start
    request: Request
    expected: Ok | Refused


# The longer requests and expected messages of the table below, named to keep each of its rows short.
REENABLING_WITH_A_POLICY_SAYS = ["remote.log.disable.policy=retain", "re-enabling takes no disablement policy"]
COPY_ALIAS_CONFLICT_SAYS = ["conflicting", "remote.log.copy.disable=true", "remote.log.disable.policy=delete"]
SET_THEN_DELETE_ENABLE = [ConfigOp(E, AlterConfigOp.SET, "false"), ConfigOp(E, AlterConfigOp.DELETE)]

ROWS: dict[str, Case] = {
    # --- ARCHITECTURE §4 table ------------------------------------------------------------------------------------
    "enabled + enable=false disables with the default retain": Case(
        ENABLED_1, {E: "false"}, Ok(DISABLING, 2, RETAIN, {E: "false", P: "retain"})
    ),
    "enabled + enable=false + policy=retain disables with retain": Case(
        ENABLED_1, {E: "false", P: "retain"}, Ok(DISABLING, 2, RETAIN, {P: "retain"})
    ),
    "enabled + enable=false + policy=delete disables with delete": Case(
        ENABLED_1, {E: "false", P: "delete"}, Ok(DISABLING, 2, DELETE, {P: "delete"})
    ),
    "a policy value is accepted in any case and stored lower-case": Case(
        ENABLED_1, {E: "FALSE", P: "Delete"}, Ok(DISABLING, 2, DELETE, {E: "false", P: "delete"})
    ),
    "disabling while disabling is refused as in progress": Case(
        DISABLING_RETAIN_2, {E: "false"}, Refused(TieredStorageDisablementInProgress, 10950, ["DISABLING", "epoch 2"])
    ),
    "enabling while disabling is refused as in progress": Case(
        DISABLING_DELETE_2, {E: "true"}, Refused(TieredStorageDisablementInProgress, 10950, ["orders", "enable"])
    ),
    "a policy change while disabling is refused as in progress": Case(
        DISABLING_RETAIN_2, {P: "delete"}, Refused(TieredStorageDisablementInProgress, 10950, ["DISABLING"])
    ),
    "a plain config change while disabling is allowed and changes no state": Case(
        DISABLING_RETAIN_2, {"retention.ms": "60000"}, Ok(DISABLING, 2, RETAIN, {"retention.ms": "60000"})
    ),
    "disabled + enable=true re-enables at the next epoch with no policy": Case(
        DISABLED_RETAIN_2, {E: "true"}, Ok(ENABLED, 3, NONE, {E: "true", P: None})
    ),
    "disabled with delete + enable=true re-enables at the next epoch": Case(
        DISABLED_DELETE_2, {E: "true"}, Ok(ENABLED, 3, NONE, {E: "true", P: None})
    ),
    "re-enabling with a policy is an invalid request": Case(
        DISABLED_RETAIN_2, {E: "true", P: "retain"}, Refused(InvalidRequest, 42, REENABLING_WITH_A_POLICY_SAYS)
    ),
    "re-enabling with delete.on.disable=true is an invalid request": Case(
        DISABLED_DELETE_2, {E: "true", D: "true"}, Refused(InvalidRequest, 42, ["remote.log.delete.on.disable=true"])
    ),
    "a policy on an enabled topic that stays enabled is an invalid request": Case(
        ENABLED_1, {P: "delete"}, Refused(InvalidRequest, 42, ["remote.log.disable.policy=delete"])
    ),
    "disabled retain + policy=delete purges at the next epoch": Case(
        DISABLED_RETAIN_2, {P: "delete"}, Ok(DISABLING, 3, DELETE, {P: "delete"})
    ),
    "disabled retain + enable=false + policy=delete purges": Case(
        DISABLED_RETAIN_2, {E: "false", P: "delete"}, Ok(DISABLING, 3, DELETE)
    ),
    "disabled delete + policy=retain is refused: the data is gone": Case(
        DISABLED_DELETE_2, {P: "retain"}, Refused(InvalidRequest, 42, ["policy delete", "retain cannot apply"])
    ),
    "a bad policy value is an invalid request naming the value": Case(
        ENABLED_1, {E: "false", P: "purge"}, Refused(InvalidRequest, 42, ["'purge'", "retain", "delete"])
    ),
    "a bad policy value is an invalid request even while disabling": Case(
        DISABLING_RETAIN_2, {P: "shred"}, Refused(InvalidRequest, 42, ["'shred'"])
    ),
    "a bad boolean for remote.storage.enable is an invalid request naming the value": Case(
        ENABLED_1, {E: "maybe"}, Refused(InvalidRequest, 42, ["remote.storage.enable", "'maybe'"])
    ),
    "a bad boolean for remote.log.copy.disable is an invalid request naming the value": Case(
        ENABLED_1, {C: "yes"}, Refused(InvalidRequest, 42, ["remote.log.copy.disable", "'yes'"])
    ),
    # --- no-ops (no epoch bump, no TieredStateRecord) ---------------------------------------------------------
    "disabling a never-tiered topic is a no-op at epoch 0": Case(
        NEVER_TIERED, {E: "false"}, Ok(NOT_TIERED, 0, NONE, {E: "false"})
    ),
    "disabling a never-tiered topic with delete is a no-op at epoch 0": Case(
        NEVER_TIERED, {E: "false", P: "delete"}, Ok(NOT_TIERED, 0, NONE)
    ),
    "disabling a disabled topic again is a no-op": Case(DISABLED_RETAIN_2, {E: "false"}, Ok(DISABLED, 2, RETAIN)),
    "disabling a disabled topic at the same policy is a no-op": Case(
        DISABLED_RETAIN_2, {E: "false", P: "retain"}, Ok(DISABLED, 2, RETAIN)
    ),
    "disabling a delete-disabled topic without a policy keeps delete": Case(
        DISABLED_DELETE_2, {E: "false"}, Ok(DISABLED, 2, DELETE)
    ),
    "enabling an enabled topic is a no-op": Case(ENABLED_1, {E: "true"}, Ok(ENABLED, 1, NONE)),
    "enabling a never-tiered topic starts at epoch 1": Case(
        NEVER_TIERED, {E: "true"}, Ok(ENABLED, 1, NONE, {E: "true"})
    ),
    # --- Kafka 3.9 aliases ------------------------------------------------------------------------------------
    "enable=true + copy.disable=true disables with retain": Case(
        ENABLED_1, {E: "true", C: "true"}, Ok(DISABLING, 2, RETAIN, {E: "true", C: "true", P: "retain"})
    ),
    "copy.disable=true alone on an enabled topic disables with retain": Case(
        ENABLED_1, {C: "true"}, Ok(DISABLING, 2, RETAIN)
    ),
    "enable=false + delete.on.disable=true disables with delete": Case(
        ENABLED_1, {E: "false", D: "true"}, Ok(DISABLING, 2, DELETE, {D: "true", P: "delete"})
    ),
    "delete.on.disable=true on a retain-disabled topic purges": Case(
        DISABLED_RETAIN_2, {D: "true"}, Ok(DISABLING, 3, DELETE)
    ),
    "copy.disable=false re-enables a topic disabled by the alias": Case(
        DISABLED_BY_COPY_ALIAS_2, {C: "false"}, Ok(ENABLED, 3, NONE, {C: "false", P: None})
    ),
    "an explicit enable=true re-enables a topic disabled by the alias and clears copy.disable": Case(
        DISABLED_BY_COPY_ALIAS_2, {E: "true"}, Ok(ENABLED, 3, NONE, {E: "true", C: None, P: None})
    ),
    "copy.disable alias with policy=delete is a conflict": Case(
        ENABLED_1, {E: "true", C: "true", P: "delete"}, Refused(InvalidRequest, 42, COPY_ALIAS_CONFLICT_SAYS)
    ),
    "delete.on.disable=true with policy=retain is a conflict": Case(
        ENABLED_1, {E: "false", D: "true", P: "retain"}, Refused(InvalidRequest, 42, ["conflicting"])
    ),
    # --- IncrementalAlterConfigs operations -----------------------------------------------------------------
    "deleting remote.storage.enable disables (its default is false)": Case(
        ENABLED_1, [ConfigOp(E, AlterConfigOp.DELETE)], Ok(DISABLING, 2, RETAIN, {E: None})
    ),
    "APPEND on a boolean is an invalid request": Case(
        ENABLED_1, [ConfigOp(E, AlterConfigOp.APPEND, "false")], Refused(InvalidRequest, 42, ["APPEND"])
    ),
    "SET with a null value is an invalid request": Case(
        ENABLED_1, [ConfigOp(E, AlterConfigOp.SET, None)], Refused(InvalidRequest, 42, ["null"])
    ),
    "the same key twice is an invalid request": Case(
        ENABLED_1, SET_THEN_DELETE_ENABLE, Refused(InvalidRequest, 42, ["more than once"])
    ),
    "an unknown key is an invalid config naming the key": Case(
        ENABLED_1, {"retention.msec": "5"}, Refused(InvalidConfig, 40, ["'retention.msec'"])
    ),
    "a bad number is an invalid config naming the value": Case(
        ENABLED_1, {"retention.ms": "soon"}, Refused(InvalidConfig, 40, ["retention.ms", "'soon'"])
    ),
    "an out-of-range number is an invalid config": Case(
        ENABLED_1, {"segment.bytes": "3"}, Refused(InvalidConfig, 40, ["segment.bytes", "at least 14"])
    ),
}


def _image(start: Start) -> tuple[MetadataImage, TopicImage]:
    records: list[MetadataRecord] = [make_record("TopicRecord", name="orders", topic_id=TOPIC_ID)]
    if start.state != NOT_TIERED:
        records.append(
            make_record(
                "TieredStateRecord",
                topic_id=TOPIC_ID,
                tiered_epoch=start.epoch,
                tiered_state=int(start.state),
                policy=int(start.policy),
            )
        )
    for k, v in start.configs.items():
        records.append(make_record("ConfigRecord", resource_type=2, resource_name="orders", name=k, value=v))
    image = replay(EMPTY_IMAGE, enumerate(records))
    return image, image.topics[TOPIC_ID]


@pytest.mark.parametrize(("start", "request_", "expected"), list(ROWS.values()), ids=list(ROWS))
def test_every_row_of_the_tiering_table(start: Start, request_: Request, expected: Ok | Refused) -> None:
    image, topic = _image(start)
    if isinstance(expected, Refused):
        with pytest.raises(expected.error) as info:
            tiering.plan(topic, image.topic_configs("orders"), request_)
        assert info.value.code == expected.code
        for fragment in expected.says:
            assert fragment in info.value.message
        return
    plan = tiering.plan(topic, image.topic_configs("orders"), request_)
    after = replay(image, enumerate(plan.records, start=image.offset + 1)).topics[TOPIC_ID]
    assert (after.tiered_state, after.tiered_epoch, after.policy) == (expected.state, expected.epoch, expected.policy)
    assert (plan.after.state, plan.after.epoch, plan.after.policy) == (expected.state, expected.epoch, expected.policy)
    state_records = [r for r in plan.records if r.name == "TieredStateRecord"]
    if (expected.state, expected.epoch) == (start.state, start.epoch):
        assert state_records == [], "a no-op must not write a TieredStateRecord"
    else:
        assert len(state_records) == 1 and plan.records[-1] is state_records[0]
        assert expected.epoch == start.epoch + 1, "a state change bumps the epoch exactly once"
    configs = replay(image, enumerate(plan.records, start=image.offset + 1)).topic_configs("orders")
    assert dict(configs) == dict(plan.configs)
    for key, value in expected.configs.items():
        assert configs.get(key) == value, key


def test_a_request_that_changes_nothing_writes_no_records() -> None:
    image, topic = _image(ENABLED_1)
    assert tiering.plan(topic, image.topic_configs("orders"), {E: "true"}).records == ()


def test_completing_a_disablement_writes_disabled_at_the_same_epoch_and_policy() -> None:
    _, topic = _image(DISABLING_DELETE_2)
    record = tiering.complete(topic, 2)
    assert record.name == "TieredStateRecord"
    assert (record["tiered_state"], record["tiered_epoch"], record["policy"]) == (int(DISABLED), 2, int(DELETE))


@pytest.mark.parametrize(
    ("start", "epoch"),
    [(DISABLING_RETAIN_2, 1), (DISABLING_RETAIN_2, 3), (DISABLED_RETAIN_2, 2), (ENABLED_1, 1)],
    ids=["an older epoch", "a newer epoch", "an already disabled topic", "an enabled topic"],
)
def test_completing_anything_but_the_current_disabling_epoch_is_a_stale_tiered_epoch(start: Start, epoch: int) -> None:
    _, topic = _image(start)
    with pytest.raises(StaleTieredEpoch) as info:
        tiering.complete(topic, epoch)
    assert info.value.code == 10951


def test_an_unknown_topic_name_is_unknown_topic_or_partition_and_an_unknown_id_is_unknown_topic_id() -> None:
    image, _ = _image(ENABLED_1)
    with pytest.raises(UnknownTopicOrPartition) as by_name:
        topic_for(image, name="payments")
    assert by_name.value.code == 3 and "payments" in by_name.value.message
    other = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAg")
    with pytest.raises(UnknownTopicId) as by_id:
        topic_for(image, topic_id=other)
    assert by_id.value.code == 100 and str(other) in by_id.value.message
    assert topic_for(image, name="orders").topic_id == TOPIC_ID
    assert topic_for(image, topic_id=TOPIC_ID).name == "orders"


_KEYS = [E, C, D, P, "retention.ms"]
_VALUES = ["true", "false", "retain", "delete", "TRUE", "60000", "junk"]
_STARTS = [NEVER_TIERED, ENABLED_1, DISABLING_RETAIN_2, DISABLED_RETAIN_2, DISABLED_DELETE_2, DISABLED_BY_COPY_ALIAS_2]


@settings(max_examples=300, deadline=None)
@given(
    start=st.sampled_from(_STARTS),
    ops=st.lists(
        st.builds(
            ConfigOp,
            st.sampled_from(_KEYS),
            st.sampled_from([AlterConfigOp.SET, AlterConfigOp.DELETE]),
            st.sampled_from(_VALUES),
        ),
        max_size=4,
        unique_by=lambda op: op.name,
    ),
)
def test_any_request_either_is_refused_with_no_records_or_bumps_the_epoch_exactly_once_per_state_change(
    start: Start, ops: list[ConfigOp]
) -> None:
    image, topic = _image(start)
    ops = [ConfigOp(o.name, o.op, None if o.op == AlterConfigOp.DELETE else o.value) for o in ops]
    try:
        plan = tiering.plan(topic, image.topic_configs("orders"), ops)
    except (InvalidRequest, InvalidConfig, TieredStorageDisablementInProgress) as exc:
        assert exc.code in (40, 42, 10950)
        if isinstance(exc, TieredStorageDisablementInProgress):
            assert start.state == DISABLING
        return
    after = replay(image, enumerate(plan.records, start=image.offset + 1)).topics[TOPIC_ID]
    if plan.changes_state:
        assert after.tiered_epoch == start.epoch + 1
        assert after.tiered_state in (ENABLED, DISABLING)
        assert sum(r.name == "TieredStateRecord" for r in plan.records) == 1
    else:
        assert (after.tiered_state, after.tiered_epoch, after.policy) == (start.state, start.epoch, start.policy)
    assert start.state != DISABLING or not plan.changes_state
