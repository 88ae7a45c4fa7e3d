"""The per-topic tiering state machine of ARCHITECTURE §4: config changes in, records to append (or a typed error) out.

Pure: :func:`plan` reads a topic's image and its configs, never the store or a clock, and returns the records
the controller appends in ONE batch (the ConfigRecords of the request, then at most one TieredStateRecord), so
a broker never sees the config change without the state change or the reverse.

What a request asks for is read from the keys it *names* (an IncrementalAlterConfigs operation, or a key of a
final key/value map, which means SET; a None value means DELETE), evaluated on the configs after the request:

* it names none of the tiering keys: no tiering change (plain config records, allowed in every state);
* ``remote.storage.enable`` ends true, and ``remote.log.copy.disable`` is not true: **enable**. A request that
  names ``remote.storage.enable=true`` and leaves ``remote.log.copy.disable`` alone also enables: an explicit
  enable wins over a copy.disable left over from an earlier (Kafka 3.9 alias) disable, which is cleared;
* ``remote.storage.enable`` ends true and ``remote.log.copy.disable`` ends true (Kafka 3.9's read-only
  remote): **disable with retain**;
* ``remote.storage.enable`` ends false (or is deleted: its default is false): **disable**.

The policy of a disable comes from the keys the request names: ``remote.log.disable.policy=retain|delete``,
``remote.log.delete.on.disable=true`` (delete; ``false`` means retain) and ``remote.log.copy.disable=true``
(retain). Two of them disagreeing is INVALID_REQUEST; none of them means retain for a topic being disabled
now, and "keep the current policy" for a topic already DISABLED.

Transitions (epoch = ``tiered_epoch``; NOT_TIERED is a topic never tiered, at epoch 0):

=================  ===========================  ==================================================
from               request                      result
=================  ===========================  ==================================================
NOT_TIERED         enable                       ENABLED, epoch+1 (so a first enable is epoch 1)
NOT_TIERED         disable (any policy)         no-op: nothing to disable, no epoch bump
ENABLED            enable                       no-op
ENABLED            disable(policy)              DISABLING(policy), epoch+1
DISABLING          any tiering key              TIERED_STORAGE_DISABLEMENT_IN_PROGRESS (10950)
DISABLING          all required brokers ack     DISABLED, same epoch (:func:`complete`)
DISABLED(p)        enable                       ENABLED, epoch+1, policy NONE
DISABLED(p)        disable(p) or no policy      no-op, no epoch bump
DISABLED(retain)   disable(delete)              purge: DISABLING(delete), epoch+1
DISABLED(delete)   disable(retain)              INVALID_REQUEST: the remote data is already gone
any                enable naming a policy       INVALID_REQUEST: re-enable takes no policy
any                bad boolean / bad policy     INVALID_REQUEST (42) naming the key and the value
=================  ===========================  ==================================================

Config bookkeeping on a transition: DISABLING records the effective policy as ``remote.log.disable.policy``
(so DescribeConfigs shows it); ENABLED clears ``remote.log.disable.policy`` and ``remote.log.delete.on.disable``
(a re-enabled topic carries no disablement policy; the next disable states its own) and a true
``remote.log.copy.disable``.

Invariants: every state change bumps ``tiered_epoch`` by exactly one, except DISABLING -> DISABLED which
completes the epoch it belongs to; a refused request yields no records at all; a no-op yields no
TieredStateRecord (it may still carry the plain config changes the request names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from orchestrator.errors import (
    InvalidRequest,
    StaleTieredEpoch,
    TieredStorageDisablementInProgress,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import TopicImage
from orchestrator.metadata.records import (
    ConfigResourceType,
    DisablePolicy,
    MetadataRecord,
    TieredState,
    make_record,
)
from orchestrator.metadata.topic_configs import (
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    REMOTE_LOG_DISABLE_POLICY,
    REMOTE_STORAGE_ENABLE,
    TIERING_KEYS,
    AlterConfigOp,
    ConfigOp,
    apply_ops,
    flag,
    ops_from_map,
)


class Intent(Enum):
    NONE = "none"  # the request names no tiering key
    ENABLE = "enable"
    DISABLE = "disable"


@dataclass(frozen=True, slots=True)
class TieredStatus:
    """A topic's tiered fields: what a TieredStateRecord carries."""

    state: TieredState
    epoch: int
    policy: DisablePolicy

    @classmethod
    def of(cls, topic: TopicImage) -> TieredStatus:
        return cls(topic.tiered_state, topic.tiered_epoch, topic.policy)


@dataclass(frozen=True, slots=True)
class TieringPlan:
    """The outcome of a request on one topic: its configs and tiered status after it, and the records to append."""

    topic_id: Uuid
    intent: Intent
    before: TieredStatus
    after: TieredStatus
    configs: Mapping[str, str]
    records: tuple[MetadataRecord, ...]

    @property
    def changes_state(self) -> bool:
        return self.after != self.before


Changes = Sequence[ConfigOp] | Mapping[str, str | None]


def plan(topic: TopicImage, configs: Mapping[str, str], changes: Changes) -> TieringPlan:
    """The records that apply ``changes`` to ``topic`` (whose configs are ``configs``), or a typed error.

    Raises INVALID_CONFIG / INVALID_REQUEST for bad keys or values (see ``configs``), INVALID_REQUEST for a
    policy on enable, conflicting policies or delete -> retain, and TIERED_STORAGE_DISABLEMENT_IN_PROGRESS for a
    tiering request while DISABLING.
    """
    ops = tuple(ops_from_map(changes)) if isinstance(changes, Mapping) else tuple(changes)
    final = apply_ops(configs, ops)
    intent, policy = requested(ops, final)
    before = TieredStatus.of(topic)
    after = transition(topic, intent, policy)
    if after != before:
        if after.state == TieredState.ENABLED:
            final.pop(REMOTE_LOG_DISABLE_POLICY, None)
            final.pop(REMOTE_LOG_DELETE_ON_DISABLE, None)
            if flag(final, REMOTE_LOG_COPY_DISABLE):
                final.pop(REMOTE_LOG_COPY_DISABLE)
        elif after.state == TieredState.DISABLING:
            final[REMOTE_LOG_DISABLE_POLICY] = after.policy.config_value
    records = [
        make_record(
            "ConfigRecord",
            resource_type=int(ConfigResourceType.TOPIC),
            resource_name=topic.name,
            name=key,
            value=final.get(key),
        )
        for key in sorted(set(configs) | set(final))
        if configs.get(key) != final.get(key)
    ]
    if after != before:
        records.append(tiered_state_record(topic.topic_id, after))
    return TieringPlan(topic.topic_id, intent, before, after, final, tuple(records))


def requested(ops: Sequence[ConfigOp], final: Mapping[str, str]) -> tuple[Intent, DisablePolicy | None]:
    """What the request asks for, and the policy it names (None: none named). ``final``: configs after it."""
    named = {op.name for op in ops}
    if not named & TIERING_KEYS:
        return Intent.NONE, None
    enable = flag(final, REMOTE_STORAGE_ENABLE)
    copy_off = flag(final, REMOTE_LOG_COPY_DISABLE)
    explicit_enable = REMOTE_STORAGE_ENABLE in named and REMOTE_LOG_COPY_DISABLE not in named
    intent = Intent.ENABLE if enable and (not copy_off or explicit_enable) else Intent.DISABLE
    set_keys = {op.name for op in ops if op.op != AlterConfigOp.DELETE}
    votes: dict[str, DisablePolicy] = {}
    if REMOTE_LOG_DISABLE_POLICY in set_keys:
        value = final[REMOTE_LOG_DISABLE_POLICY]
        votes[f"{REMOTE_LOG_DISABLE_POLICY}={value}"] = DisablePolicy[value.upper()]
    if REMOTE_LOG_DELETE_ON_DISABLE in set_keys:
        on = flag(final, REMOTE_LOG_DELETE_ON_DISABLE)
        votes[f"{REMOTE_LOG_DELETE_ON_DISABLE}={str(on).lower()}"] = (
            DisablePolicy.DELETE if on else DisablePolicy.RETAIN
        )
    if REMOTE_LOG_COPY_DISABLE in set_keys and copy_off:
        votes[f"{REMOTE_LOG_COPY_DISABLE}=true"] = DisablePolicy.RETAIN
    if intent == Intent.ENABLE:
        offending = [k for k, v in votes.items() if not k.startswith(REMOTE_LOG_COPY_DISABLE)]
        offending = [k for k in offending if not k.endswith("=false")]  # delete.on.disable=false asks nothing
        if offending:
            raise InvalidRequest(
                f"{' and '.join(offending)} cannot be given when enabling tiered storage: "
                "re-enabling takes no disablement policy"
            )
        return intent, None
    distinct = set(votes.values())
    if len(distinct) > 1:
        raise InvalidRequest(f"conflicting disablement policies in one request: {' and '.join(sorted(votes))}")
    return intent, distinct.pop() if distinct else None


def transition(topic: TopicImage, intent: Intent, policy: DisablePolicy | None) -> TieredStatus:
    """The topic's tiered status after a request of ``intent`` naming ``policy`` (see the module's table)."""
    before = TieredStatus.of(topic)
    state, epoch = topic.tiered_state, topic.tiered_epoch
    if intent == Intent.NONE:
        return before
    if state == TieredState.DISABLING:
        raise TieredStorageDisablementInProgress(
            f"topic '{topic.name}' ({topic.topic_id}) is DISABLING at tiered epoch {epoch} with policy "
            f"{topic.policy.config_value}; it accepts no {intent.value} until it is DISABLED"
        )
    if intent == Intent.ENABLE:
        if state == TieredState.ENABLED:
            return before
        return TieredStatus(TieredState.ENABLED, epoch + 1, DisablePolicy.NONE)
    if state == TieredState.NOT_TIERED:
        return before  # never tiered: nothing to disable, and no epoch to bump
    if state == TieredState.ENABLED:
        return TieredStatus(TieredState.DISABLING, epoch + 1, policy or DisablePolicy.RETAIN)
    current = topic.policy if topic.policy != DisablePolicy.NONE else DisablePolicy.RETAIN
    wanted = policy or current
    if wanted == current:
        return before
    if current == DisablePolicy.RETAIN and wanted == DisablePolicy.DELETE:
        return TieredStatus(TieredState.DISABLING, epoch + 1, DisablePolicy.DELETE)  # purge
    raise InvalidRequest(
        f"topic '{topic.name}' was disabled with policy delete at tiered epoch {epoch}: its remote data is deleted, "
        f"so policy {wanted.config_value} cannot apply"
    )


def complete(topic: TopicImage, tiered_epoch: int) -> MetadataRecord:
    """The TieredStateRecord that ends a disablement: DISABLED at the epoch being completed.

    Raises STALE_TIERED_EPOCH unless the topic is DISABLING at exactly ``tiered_epoch`` (so a late completion of
    an older epoch, or a second completion of the same one, writes nothing).
    """
    if topic.tiered_state != TieredState.DISABLING or topic.tiered_epoch != tiered_epoch:
        raise StaleTieredEpoch(
            f"topic '{topic.name}' ({topic.topic_id}) is {topic.tiered_state.name} at tiered epoch "
            f"{topic.tiered_epoch}; cannot complete the disablement of epoch {tiered_epoch}"
        )
    return tiered_state_record(topic.topic_id, TieredStatus(TieredState.DISABLED, tiered_epoch, topic.policy))


def tiered_state_record(topic_id: Uuid, status: TieredStatus) -> MetadataRecord:
    return make_record(
        "TieredStateRecord",
        topic_id=topic_id,
        tiered_epoch=status.epoch,
        tiered_state=int(status.state),
        policy=int(status.policy),
    )
