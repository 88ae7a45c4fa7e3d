"""The metadata image: an immutable view of the cluster, rebuilt by replaying the metadata log.

``replay(image, entries)`` is a pure function: it returns a new :class:`MetadataImage` and never changes the
one it was given. Internally it copies only the maps a batch touches (copy-on-write at the topic and broker
level), so applying a batch costs what the batch changes plus one shallow copy of the top-level maps, and a full
replay from an empty image is linear in the log.

Invariants kept by replay:
* ``topics`` and ``topics_by_name`` always agree; a RemoveTopicRecord removes a topic, its partitions, its
  configs and its tiered state together (KIP-516: a re-created topic with the same name is a new topic id).
* ``tiered_epoch`` of a topic only grows: a TieredStateRecord with a lower epoch than the image's is refused
  (:class:`StaleTieredEpoch`), so a replayed log that violates ARCHITECTURE §4 invariant 1 is caught, not hidden.
* Records are applied in offset order; ``offset`` is the last applied offset (-1 for the empty image).
* The image keeps the history the log would otherwise be needed for, so that deleting old records behind a
  snapshot loses nothing a reader needs: ``tiered_history`` holds every tiered-state change of every topic id
  (live or removed) in order, and ``removed_topics`` every removed topic id as it was when removed (name, tiered
  state, configs), in removal order. The metadata export reads both (deleted topics, the scan's epoch check).
* ``to_records()`` is a snapshot: replaying it gives an image equal to this one, history included. It writes
  the removed topics first (each as TopicRecord, its tiered-state changes, its configs, RemoveTopicRecord), then
  the brokers, then the live topics with every tiered-state change they went through, then the configs, the ACLs
  and the SCRAM credentials.
* Copy-on-write keeps what a batch did not touch as the very same objects: a topic's key (its Uuid object), its
  place in ``topics``, its TopicImage, and the partitions map of a topic whose partitions did not change. So
  :mod:`.image_changes` compares an image with one it was derived from by identity, in order, without hashing a
  Uuid (a Python-level call: at 10,000 topics, hashing every id at each metadata round held a broker's event loop
  for a fifth of its time), and falls back to comparing by id when the identities do not line up (e.g. an image
  rebuilt from a snapshot).
* ``acls`` holds every ACL by its id (AccessControlEntryRecord's ``Id``), in creation order; ``scram_credentials``
  every SCRAM credential by (user name, Kafka's mechanism code). Removing an ACL id or a credential the image does
  not hold is refused, as Kafka's replay refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from orchestrator.errors import ResourceNotFound, StaleTieredEpoch, UnknownTopicId, UnknownTopicOrPartition
from orchestrator.ids import Uuid
from orchestrator.metadata.records import (
    ConfigResourceType,
    DisablePolicy,
    MetadataRecord,
    TieredState,
    make_record,
)
from orchestrator.security.acls import AclBinding, binding_codes, binding_from_codes
from orchestrator.security.scram import ScramCredential

NO_LEADER = -1
LEADER_UNCHANGED = -2

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    incarnation_id: Uuid
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    log_dirs: tuple[Uuid, ...] = ()  # the ids of its log directories (empty: it registered without them)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # KIP-966's eligible leader replicas: out of the ISR, yet known to hold every committed record (they left it
    # while it was smaller than min.insync.replicas, so nothing was committed without them since)
    elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: Uuid
    name: str
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: _EMPTY)
    tiered_epoch: int = 0
    tiered_state: TieredState = TieredState.NOT_TIERED
    policy: DisablePolicy = DisablePolicy.NONE

    def replica_brokers(self) -> frozenset[int]:
        """Every broker that hosts a replica of any partition of the topic."""
        return frozenset(b for p in self.partitions.values() for b in p.replicas)


@dataclass(frozen=True, slots=True)
class TieredChange:
    """One TieredStateRecord: the state a topic went to, at which epoch, with which policy."""

    tiered_epoch: int
    tiered_state: TieredState
    policy: DisablePolicy


@dataclass(frozen=True, slots=True)
class RemovedTopic:
    """A topic id a RemoveTopicRecord ended (KIP-516: for good), as it was when removed."""

    topic_id: Uuid
    name: str
    tiered_epoch: int
    tiered_state: TieredState
    policy: DisablePolicy
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1
    brokers: Mapping[int, BrokerImage] = field(default_factory=lambda: _EMPTY)
    topics: Mapping[Uuid, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_name: Mapping[str, Uuid] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    tiered_history: Mapping[Uuid, tuple[TieredChange, ...]] = field(default_factory=lambda: _EMPTY)
    removed_topics: Mapping[Uuid, RemovedTopic] = field(default_factory=lambda: _EMPTY)
    acls: Mapping[Uuid, AclBinding] = field(default_factory=lambda: _EMPTY)
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(default_factory=lambda: _EMPTY)

    def topic_by_name(self, name: str) -> TopicImage | None:
        tid = self.topics_by_name.get(name)
        return None if tid is None else self.topics[tid]

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), _EMPTY)

    def scram_credential(self, username: str, mechanism: int) -> ScramCredential | None:
        """``username``'s credential for ``mechanism`` (Kafka's code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512), or None."""
        return self.scram_credentials.get((username, int(mechanism)))

    def to_records(self) -> list[MetadataRecord]:
        """The image as a minimal list of records: a snapshot that replays to an equal image (history included)."""
        out: list[MetadataRecord] = []
        for r in self.removed_topics.values():
            out.append(make_record("TopicRecord", name=r.name, topic_id=r.topic_id))
            out += self._tiered_records(r.topic_id, r.tiered_epoch, r.tiered_state, r.policy)
            for k, v in sorted(r.configs.items()):
                out.append(_config_record(ConfigResourceType.TOPIC, r.name, k, v))
            out.append(make_record("RemoveTopicRecord", topic_id=r.topic_id))
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(
                make_record(
                    "RegisterBrokerRecord",
                    broker_id=b.broker_id,
                    incarnation_id=b.incarnation_id,
                    broker_epoch=b.broker_epoch,
                    end_points=[
                        {"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                        for e in b.endpoints
                    ],
                    rack=b.rack,
                    fenced=b.fenced,
                    log_dirs=list(b.log_dirs),
                )
            )
        for t in self.topics.values():
            out.append(make_record("TopicRecord", name=t.name, topic_id=t.topic_id))
            for p in sorted(t.partitions.values(), key=lambda p: p.partition_id):
                out.append(
                    make_record(
                        "PartitionRecord",
                        partition_id=p.partition_id,
                        topic_id=t.topic_id,
                        replicas=list(p.replicas),
                        isr=list(p.isr),
                        leader=p.leader,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        eligible_leader_replicas=list(p.elr) if p.elr else None,
                    )
                )
            out += self._tiered_records(t.topic_id, t.tiered_epoch, t.tiered_state, t.policy)
        for (rtype, rname), kv in self.configs.items():
            for k, v in sorted(kv.items()):
                out.append(_config_record(rtype, rname, k, v))
        out += [acl_record(acl_id, acl) for acl_id, acl in self.acls.items()]
        out += [scram_credential_record(user, mech, c) for (user, mech), c in self.scram_credentials.items()]
        return out

    def _tiered_records(
        self, topic_id: Uuid, epoch: int, state: TieredState, policy: DisablePolicy
    ) -> list[MetadataRecord]:
        """Every tiered-state change of ``topic_id`` in order (just the current state if no history is known)."""
        changes = self.tiered_history.get(topic_id)
        if not changes:
            if state == TieredState.NOT_TIERED and not epoch:
                return []
            changes = (TieredChange(epoch, state, policy),)
        return [
            make_record(
                "TieredStateRecord",
                topic_id=topic_id,
                tiered_epoch=c.tiered_epoch,
                tiered_state=int(c.tiered_state),
                policy=int(c.policy),
            )
            for c in changes
        ]


def _config_record(rtype: int, rname: str, name: str, value: str) -> MetadataRecord:
    return make_record("ConfigRecord", resource_type=rtype, resource_name=rname, name=name, value=value)


def acl_record(acl_id: Uuid, acl: AclBinding) -> MetadataRecord:
    """The AccessControlEntryRecord that stores ``acl`` under ``acl_id``."""
    return make_record("AccessControlEntryRecord", id=acl_id, **binding_codes(acl))


def scram_credential_record(username: str, mechanism: int, credential: ScramCredential) -> MetadataRecord:
    """The UserScramCredentialRecord that stores ``username``'s ``credential`` for ``mechanism`` (Kafka's code)."""
    return make_record(
        "UserScramCredentialRecord",
        name=username,
        mechanism=int(mechanism),
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


EMPTY_IMAGE = MetadataImage()


class _Builder:
    """Mutable scratch space for one replay call; its maps are copied from the image on first write."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self._brokers: dict[int, BrokerImage] | None = None
        self._topics: dict[Uuid, TopicImage] | None = None
        self._by_name: dict[str, Uuid] | None = None
        self._configs: dict[tuple[int, str], Mapping[str, str]] | None = None
        self._history: dict[Uuid, tuple[TieredChange, ...]] | None = None
        self._removed: dict[Uuid, RemovedTopic] | None = None
        self._acls: dict[Uuid, AclBinding] | None = None
        self._scram: dict[tuple[str, int], ScramCredential] | None = None
        self._partitions: dict[Uuid, dict[int, PartitionImage]] = {}

    @property
    def brokers(self) -> dict[int, BrokerImage]:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        return self._brokers

    @property
    def topics(self) -> dict[Uuid, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.image.topics)
        return self._topics

    @property
    def by_name(self) -> dict[str, Uuid]:
        if self._by_name is None:
            self._by_name = dict(self.image.topics_by_name)
        return self._by_name

    @property
    def configs(self) -> dict[tuple[int, str], Mapping[str, str]]:
        if self._configs is None:
            self._configs = dict(self.image.configs)
        return self._configs

    @property
    def history(self) -> dict[Uuid, tuple[TieredChange, ...]]:
        if self._history is None:
            self._history = dict(self.image.tiered_history)
        return self._history

    @property
    def removed(self) -> dict[Uuid, RemovedTopic]:
        if self._removed is None:
            self._removed = dict(self.image.removed_topics)
        return self._removed

    @property
    def acls(self) -> dict[Uuid, AclBinding]:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        return self._acls

    @property
    def scram(self) -> dict[tuple[str, int], ScramCredential]:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        return self._scram

    def topic(self, topic_id: Uuid) -> TopicImage:
        t = (self._topics if self._topics is not None else self.image.topics).get(topic_id)
        if t is None:
            raise UnknownTopicId(f"record refers to unknown topic id {topic_id}")
        return t

    def partitions_of(self, topic_id: Uuid) -> dict[int, PartitionImage]:
        parts = self._partitions.get(topic_id)
        if parts is None:
            parts = dict(self.topic(topic_id).partitions)
            self._partitions[topic_id] = parts
        return parts

    def build(self, *, compiled: bool = False) -> MetadataImage:
        """The image; ``compiled``: the pending partition maps are folded into their topics by the compiled loop."""
        topics = self._topics
        if self._partitions:
            topics = self.topics
            if compiled and _compiled_fold_partitions is not None:
                _compiled_fold_partitions(topics, self._partitions, _FOLD_KIT)
            else:
                for tid, parts in self._partitions.items():
                    if tid in topics:
                        topics[tid] = replace(topics[tid], partitions=MappingProxyType(parts))
        return MetadataImage(
            offset=self.offset,
            brokers=self.image.brokers if self._brokers is None else MappingProxyType(self._brokers),
            topics=self.image.topics if topics is None else MappingProxyType(topics),
            topics_by_name=self.image.topics_by_name if self._by_name is None else MappingProxyType(self._by_name),
            configs=self.image.configs if self._configs is None else MappingProxyType(self._configs),
            tiered_history=self.image.tiered_history if self._history is None else MappingProxyType(self._history),
            removed_topics=self.image.removed_topics if self._removed is None else MappingProxyType(self._removed),
            acls=self.image.acls if self._acls is None else MappingProxyType(self._acls),
            scram_credentials=self.image.scram_credentials if self._scram is None else MappingProxyType(self._scram),
        )


def _register_broker(b: _Builder, f: Mapping[str, Any]) -> None:
    b.brokers[f["broker_id"]] = BrokerImage(
        broker_id=f["broker_id"],
        incarnation_id=f["incarnation_id"],
        broker_epoch=f["broker_epoch"],
        endpoints=tuple(Endpoint(e["name"], e["host"], e["port"], e["security_protocol"]) for e in f["end_points"]),
        rack=f["rack"],
        fenced=bool(f["fenced"]),
        log_dirs=tuple(f.get("log_dirs") or ()),
    )


def _set_fenced(b: _Builder, broker_id: int, epoch: int, fenced: bool) -> None:
    current = b.brokers.get(broker_id)
    if current is not None and current.broker_epoch == epoch:
        b.brokers[broker_id] = replace(current, fenced=fenced)


def _unregister_broker(b: _Builder, f: Mapping[str, Any]) -> None:
    b.brokers.pop(f["broker_id"], None)


def _fence(b: _Builder, f: Mapping[str, Any]) -> None:
    _set_fenced(b, f["id"], f["epoch"], True)


def _unfence(b: _Builder, f: Mapping[str, Any]) -> None:
    _set_fenced(b, f["id"], f["epoch"], False)


def _registration_change(b: _Builder, f: Mapping[str, Any]) -> None:
    # Kafka's BrokerRegistrationFencingChange: 1 fence, -1 unfence, 0 no change.
    if f["fenced"] == 1:
        _set_fenced(b, f["broker_id"], f["broker_epoch"], True)
    elif f["fenced"] == -1:
        _set_fenced(b, f["broker_id"], f["broker_epoch"], False)


def _topic(b: _Builder, f: Mapping[str, Any]) -> None:
    tid, name = f["topic_id"], f["name"]
    b.topics[tid] = TopicImage(topic_id=tid, name=name)
    b.by_name[name] = tid


def _partition(b: _Builder, f: Mapping[str, Any]) -> None:
    b.partitions_of(f["topic_id"])[f["partition_id"]] = PartitionImage(
        partition_id=f["partition_id"],
        replicas=tuple(f["replicas"]),
        isr=tuple(f["isr"]),
        leader=f["leader"],
        leader_epoch=f["leader_epoch"],
        partition_epoch=f["partition_epoch"],
        elr=tuple(f.get("eligible_leader_replicas") or ()),
    )


def _partition_change(b: _Builder, f: Mapping[str, Any]) -> None:
    parts = b.partitions_of(f["topic_id"])
    p = parts.get(f["partition_id"])
    if p is None:
        raise UnknownTopicId(f"PartitionChangeRecord for unknown partition {f['topic_id']}-{f['partition_id']}")
    leader = p.leader if f["leader"] == LEADER_UNCHANGED else f["leader"]
    parts[p.partition_id] = PartitionImage(
        partition_id=p.partition_id,
        replicas=p.replicas if f["replicas"] is None else tuple(f["replicas"]),
        isr=p.isr if f["isr"] is None else tuple(f["isr"]),
        leader=leader,
        leader_epoch=p.leader_epoch + 1 if leader != p.leader else p.leader_epoch,
        partition_epoch=p.partition_epoch + 1,
        elr=p.elr if f.get("eligible_leader_replicas") is None else tuple(f["eligible_leader_replicas"]),
    )


def _config(b: _Builder, f: Mapping[str, Any]) -> None:
    key = (f["resource_type"], f["resource_name"])
    current = dict(b.configs.get(key, _EMPTY))
    if f["value"] is None:
        current.pop(f["name"], None)
    else:
        current[f["name"]] = f["value"]
    if current:
        b.configs[key] = MappingProxyType(current)
    else:
        b.configs.pop(key, None)


def _remove_topic(b: _Builder, f: Mapping[str, Any]) -> None:
    t = b.topic(f["topic_id"])
    del b.topics[t.topic_id]
    if b.by_name.get(t.name) == t.topic_id:
        del b.by_name[t.name]
    b._partitions.pop(t.topic_id, None)
    configs = b.configs.pop((ConfigResourceType.TOPIC, t.name), _EMPTY)
    b.removed[t.topic_id] = RemovedTopic(t.topic_id, t.name, t.tiered_epoch, t.tiered_state, t.policy, configs)


def _tiered_state(b: _Builder, f: Mapping[str, Any]) -> None:
    t = b.topic(f["topic_id"])
    if f["tiered_epoch"] < t.tiered_epoch:
        raise StaleTieredEpoch(
            f"TieredStateRecord for {t.name} ({t.topic_id}) at epoch {f['tiered_epoch']} below the image's "
            f"{t.tiered_epoch}"
        )
    change = TieredChange(f["tiered_epoch"], TieredState(f["tiered_state"]), DisablePolicy(f["policy"]))
    b.topics[t.topic_id] = replace(
        t, tiered_epoch=change.tiered_epoch, tiered_state=change.tiered_state, policy=change.policy
    )
    b.history[t.topic_id] = (*b.history.get(t.topic_id, ()), change)


def _access_control_entry(b: _Builder, f: Mapping[str, Any]) -> None:
    b.acls[f["id"]] = binding_from_codes(f)


def _remove_access_control_entry(b: _Builder, f: Mapping[str, Any]) -> None:
    if b.acls.pop(f["id"], None) is None:
        raise ResourceNotFound(f"RemoveAccessControlEntryRecord for unknown ACL id {f['id']}")


def _scram_credential(b: _Builder, f: Mapping[str, Any]) -> None:
    b.scram[(f["name"], f["mechanism"])] = ScramCredential(
        salt=f["salt"], stored_key=f["stored_key"], server_key=f["server_key"], iterations=f["iterations"]
    )


def _remove_scram_credential(b: _Builder, f: Mapping[str, Any]) -> None:
    if b.scram.pop((f["name"], f["mechanism"]), None) is None:
        raise ResourceNotFound(
            f"RemoveUserScramCredentialRecord for a credential the image does not hold ({f['name']})"
        )


_APPLY = {
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fence,
    "UnfenceBrokerRecord": _unfence,
    "BrokerRegistrationChangeRecord": _registration_change,
    "TopicRecord": _topic,
    "PartitionRecord": _partition,
    "PartitionChangeRecord": _partition_change,
    "ConfigRecord": _config,
    "RemoveTopicRecord": _remove_topic,
    "TieredStateRecord": _tiered_state,
    "AccessControlEntryRecord": _access_control_entry,
    "RemoveAccessControlEntryRecord": _remove_access_control_entry,
    "UserScramCredentialRecord": _scram_credential,
    "RemoveUserScramCredentialRecord": _remove_scram_credential,
}


def _has_fields(cls: type, fields: tuple[str, ...]) -> type:
    """``cls``, once its slots are ``fields`` (the compiled fold sets them by name)."""
    assert cls.__slots__ == fields, (cls, cls.__slots__)  # type: ignore[attr-defined]
    return cls


try:  # the compiled fold (orchestrator/metadata/_replay_c.pyx), which make builds
    from orchestrator.metadata._replay_c import (  # type: ignore[import-not-found]
        FoldKit,
        fold,
        fold_partitions,
    )

    _FOLD_KIT = FoldKit(
        _has_fields(
            PartitionImage, ("partition_id", "replicas", "isr", "leader", "leader_epoch", "partition_epoch", "elr")
        ),
        _has_fields(TopicImage, ("topic_id", "name", "partitions", "tiered_epoch", "tiered_state", "policy")),
        _has_fields(TieredChange, ("tiered_epoch", "tiered_state", "policy")),
        {int(m): m for m in TieredState},
        {int(m): m for m in DisablePolicy},
        TieredState.NOT_TIERED,
        DisablePolicy.NONE,
        _EMPTY,
        MappingProxyType,
    )
    _compiled_fold: Callable[[_Builder, Iterable[Sequence[Any]], dict[str, Any], Any], None] | None = fold
    _compiled_fold_partitions: Callable[[dict[Uuid, TopicImage], dict[Uuid, Any], Any], None] | None = fold_partitions
except ImportError:  # pragma: no cover - an install that did not compile it: the reference alone
    _compiled_fold = _compiled_fold_partitions = None

#: Whether :func:`replay` folds compiled (the build made ``_replay_c``).
COMPILED = _compiled_fold is not None


def replay(image: MetadataImage, entries: Iterable[Sequence[Any]]) -> MetadataImage:
    """Apply ``(offset, record)`` pairs in order and return the new image; ``image`` is left unchanged. Any
    sequence whose first two items are the offset and the record will do (the store's log entries are).

    The compiled fold (``_replay_c.pyx``) when it is built (:data:`COMPILED`), else the reference,
    :func:`replay_py`: the same image, or the same error, for the same entries.
    """
    if _compiled_fold is None:
        return replay_py(image, entries)
    b = _Builder(image)
    _compiled_fold(b, entries, _APPLY, _FOLD_KIT)
    return b.build(compiled=True)


def replay_py(image: MetadataImage, entries: Iterable[Sequence[Any]]) -> MetadataImage:
    """The reference fold, in Python (:func:`replay`).

    Partition maps are folded into their topics when the batch ends, so a topic re-read mid-batch (e.g. by a
    TieredStateRecord after a PartitionRecord) keeps its pending partitions.
    """
    b = _Builder(image)
    rules = _APPLY  # _apply inlined: this loop runs once per record of every replay
    for entry in entries:
        offset, record = entry[0], entry[1]
        if offset <= b.offset:
            raise ValueError(f"record offset {offset} is not after the image's offset {b.offset}")
        apply = rules.get(record.name)
        if apply is None:
            raise ValueError(f"no replay rule for {record.name}")
        apply(b, record.fields)
        b.offset = offset
    return b.build()


def from_snapshot(offset: int, records: Iterable[MetadataRecord]) -> MetadataImage:
    """The image a snapshot describes: its records applied to the empty image (as :func:`replay` applies them),
    at the snapshot's offset."""
    image = replay(EMPTY_IMAGE, enumerate(records))
    return replace(image, offset=offset)


def topic_for(image: MetadataImage, *, name: str | None = None, topic_id: Uuid | None = None) -> TopicImage:
    """The topic a request names; UNKNOWN_TOPIC_OR_PARTITION (by name) or UNKNOWN_TOPIC_ID (by id) if absent."""
    if topic_id is not None and not topic_id.is_zero:
        topic = image.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(f"no topic has id {topic_id}")
        return topic
    by_name = image.topic_by_name(name or "")
    if by_name is None:
        raise UnknownTopicOrPartition(f"topic '{name}' does not exist")
    return by_name
