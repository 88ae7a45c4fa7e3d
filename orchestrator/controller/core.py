"""The controller's logic, synchronous and free of networking: request bodies in, response bodies out.

:class:`ControllerCore` is what the active controller runs. The asyncio driver (outside this package) decodes
Kafka requests, calls the method for the api, encodes the returned body; it calls :meth:`tick` on a timer, sends
the DisableRemoteTopic requests :meth:`due_disable_requests` returns, and feeds every outcome (reply, error, or
timeout) to :meth:`on_disable_response`. Time and randomness are injected (``now_ms``, ``rng``), so tests drive
the core with a fake clock and a seeded generator. The core is not thread-safe: one task calls it.

State: the metadata image (a :class:`MetadataFollower` over the store: the log is the only source of truth), the
disablement queue (``queue.py``, rebuilt from the log on construction: KIP-950's failover rule), broker liveness
(the last heartbeat of each broker, held in memory only: after a failover every broker gets a full session), and
a round-robin cursor for replica placement.

Invariants:
* Every write is ``store.append(..., controller_epoch=self.controller_epoch)``; a deposed core's write raises
  :class:`StaleControllerEpoch`, which is never turned into a per-topic error code: it propagates so that the
  driver steps down (DESIGN §4 invariant 6). A broker answering STALE_CONTROLLER_EPOCH raises it too, and
  :meth:`due_disable_requests` checks the lease before handing out requests.
* One request's change to one topic (or resource, or broker) is one append: all of it is written, or none.
  A request that fails validation writes nothing for that topic (per-topic errors in the response).
* DISABLED for (topic, epoch E) is appended only when the queue says every required broker acknowledged E for
  its current duty, and only while the image says DISABLING at E, so it is appended at most once: after the
  append the image says DISABLED and the topic leaves the queue (invariants 2 and 7).
* Reads (Metadata, DescribeConfigs, DescribeTieredState) never write.

Design choices (where KRaft has a rule, it is KRaft's):
* broker epoch = the offset of the broker's RegisterBrokerRecord; a registration is fenced until a heartbeat
  reports a metadata offset at or past it. A registration with the same incarnation id is a retry and gets the
  same epoch; another incarnation is refused with DUPLICATE_BROKER_REGISTRATION while the old one's session lives.
* Fencing (session timeout, WantFence/WantShutDown, a new incarnation, unregistration) removes the broker from
  every ISR (KRaft keeps the last member, leaderless) and moves each partition it leads to the first live in-ISR
  replica in replica order, or to -1. Local data is not replicated between brokers (DESIGN §2), so an unfenced
  broker is put back in the ISR of its partitions, takes the leadership of leaderless ones and, with
  ``auto_leader_rebalance``, of those it is the preferred (first) replica of: that is where its data is.
* Replicas are placed round-robin over the live (registered, unfenced) brokers sorted by id, starting at a
  cursor that rotates per topic from a random start; the leader is the first replica.
* Topics are never auto-created by Metadata.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

from orchestrator.errors import (
    BrokerIdNotRegistered,
    DuplicateBrokerRegistration,
    InconsistentClusterId,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    KafkaError,
    LeaderNotAvailable,
    RequestTimedOut,
    StaleBrokerEpoch,
    StaleControllerEpoch,
    StaleTieredEpoch,
    TieredError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    as_wire_error,
)
from orchestrator.ids import ZERO_UUID, Uuid, topic_names_collide, validate_topic_name
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import LEADER_UNCHANGED, NO_LEADER, MetadataImage, PartitionImage, TopicImage
from orchestrator.metadata.records import ConfigResourceType, MetadataRecord, make_record
from orchestrator.metadata.store import MetadataStore
from orchestrator.metadata.topic_configs import ConfigDef, effective, parse_ops, validate_config_map
from orchestrator.protocol.codec import default_factory
from orchestrator.protocol.schema import FieldSpec, schema
from orchestrator.settings import BrokerMembership, DisablementSettings, TopicDefaults

from . import queue as dq
from . import tiering

log = structlog.get_logger(__name__)

ALL_PARTITIONS = -1

# DescribeConfigs' ConfigSource ids (Kafka's).
_SOURCE_TOPIC = 1
_SOURCE_DYNAMIC_BROKER = 2
_SOURCE_DEFAULT = 5


class ControllerCore:
    def __init__(
        self,
        store: MetadataStore,
        *,
        holder: str,
        controller_epoch: int,
        now_ms: Callable[[], int],
        rng: random.Random,
        membership: BrokerMembership = BrokerMembership(),  # frozen: sharing the defaults is safe
        topic_defaults: TopicDefaults = TopicDefaults(),
        disablement: DisablementSettings = DisablementSettings(),
    ) -> None:
        self.holder = holder
        self.controller_epoch = controller_epoch
        self.membership = membership
        self.topic_defaults = topic_defaults
        self.disablement = disablement
        self._store = store
        self._now_ms = now_ms
        self._rng = rng
        self._follower = MetadataFollower(store)
        self._stalled_reported: set[tuple[Uuid, int]] = set()
        self._progress: dict[Uuid, dict[int, dict[int, tuple[int, int]]]] = {}  # topic -> epoch -> broker -> counts
        image = self._follower.refresh()
        now = now_ms()
        self._queue = dq.rebuild(image, now)
        self._last_heartbeat: dict[int, int] = {b: now for b in image.brokers}
        self._placement_cursor = rng.randrange(1 << 16)
        log.info(
            "controller.started",
            holder=holder,
            controller_epoch=controller_epoch,
            log_end_offset=image.offset + 1,
            disabling_topics=len(self._queue.topics),
            pending_acks=dq.pending_count(self._queue),
        )

    # --- state, read-only ---------------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._follower.image

    @property
    def queue(self) -> dq.DisablementQueue:
        return self._queue

    # --- admin API ----------------------------------------------------------------------------------------------

    def create_topics(self, body: Mapping[str, Any], version: int) -> dict[str, Any]:
        req = _normalized("CreateTopicsRequest", version, body)
        image = self._refresh()
        validate_only = bool(req["validate_only"])
        names = [t["name"] for t in req["topics"]]
        duplicates = {n for n in names if names.count(n) > 1}
        accepted: list[str] = []
        results: list[dict[str, Any]] = []
        for t in req["topics"]:
            name = t["name"]
            try:
                if name in duplicates:
                    raise InvalidRequest(f"topic '{name}' appears more than once in the request")
                result = self._create_topic(t, image, accepted, validate_only=validate_only)
                accepted.append(name)
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                log.info("topic.create_refused", topic=name, error=exc.name, detail=exc.message)
                result = {"name": name, "error_code": exc.code, "error_message": exc.message, "configs": []}
            results.append(result)
            image = self._follower.image
        return _normalized("CreateTopicsResponse", version, {"topics": results})

    def _create_topic(
        self, t: Mapping[str, Any], image: MetadataImage, accepted: Sequence[str], *, validate_only: bool
    ) -> dict[str, Any]:
        name = validate_topic_name(t["name"])
        if image.topic_by_name(name) is not None:
            raise TopicAlreadyExists(f"topic '{name}' already exists")
        for other in (*image.topics_by_name, *accepted):
            if topic_names_collide(name, other):
                raise InvalidTopic(f"topic '{name}' collides with '{other}': '.' and '_' collide in metric names")
        raw_configs: dict[str, str | None] = {}
        for c in t["configs"]:
            if c["name"] in raw_configs:
                raise InvalidRequest(f"config '{c['name']}' appears more than once for topic '{name}'")
            raw_configs[c["name"]] = c["value"]
        configs = validate_config_map(raw_configs)
        if t["assignments"]:
            if t["num_partitions"] != -1 or t["replication_factor"] != -1:
                raise InvalidRequest("NumPartitions and ReplicationFactor must be -1 when Assignments are given")
            by_index = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
            if sorted(by_index) != list(range(len(t["assignments"]))):
                raise InvalidReplicaAssignment(
                    f"partition indexes {sorted(by_index)} are not the consecutive numbers from 0"
                )
            assignment = [by_index[i] for i in range(len(by_index))]
            for i, replicas in enumerate(assignment):
                self._check_replicas(replicas, image, where=f"partition {i}")
            if len({len(r) for r in assignment}) > 1:
                raise InvalidReplicaAssignment("every partition must have the same number of replicas")
        else:
            count = self.topic_defaults.partitions if t["num_partitions"] == -1 else t["num_partitions"]
            factor = (
                self.topic_defaults.replication_factor if t["replication_factor"] == -1 else t["replication_factor"]
            )
            self._check_partition_count(count)
            assignment = self._place(image, count, factor)
        if len(assignment) > self.topic_defaults.max_partitions:
            limit = self.topic_defaults.max_partitions
            raise InvalidPartitions(f"{len(assignment)} partitions exceed the limit of {limit}")
        topic_id = self._new_topic_id(image)
        plan = tiering.plan(TopicImage(topic_id=topic_id, name=name), {}, configs)
        records = [
            make_record("TopicRecord", name=name, topic_id=topic_id),
            *(_partition_record(topic_id, i, replicas, image) for i, replicas in enumerate(assignment)),
            *plan.records,
        ]
        if not validate_only:
            self._append(records)
            log.info(
                "topic.created",
                topic=name,
                topic_id=str(topic_id),
                partitions=len(assignment),
                replication_factor=len(assignment[0]),
                tiered_state=plan.after.state.name,
                tiered_epoch=plan.after.epoch,
            )
        return {
            "name": name,
            "topic_id": ZERO_UUID if validate_only else topic_id,
            "error_code": 0,
            "error_message": None,
            "num_partitions": len(assignment),
            "replication_factor": len(assignment[0]),
            "configs": _created_configs(plan.configs),
        }

    def delete_topics(self, body: Mapping[str, Any], version: int) -> dict[str, Any]:
        req = _normalized("DeleteTopicsRequest", version, body)
        self._refresh()
        if version >= 6:
            wanted: list[tuple[str | None, Uuid]] = [(t["name"], t["topic_id"]) for t in req["topics"]]
        else:
            wanted = [(n, ZERO_UUID) for n in req["topic_names"]]
        keys = [tid if not tid.is_zero else n for n, tid in wanted]
        results: list[dict[str, Any]] = []
        for (name, topic_id), key in zip(wanted, keys, strict=True):
            result: dict[str, Any] = {"name": name if name is not None or version >= 6 else "", "topic_id": topic_id}
            try:
                if name is not None and not topic_id.is_zero:
                    raise InvalidRequest("give a topic name or a topic id, not both")
                if name is None and topic_id.is_zero:
                    raise InvalidRequest("neither a topic name nor a topic id was given")
                if keys.count(key) > 1:
                    raise InvalidRequest(f"topic {key} appears more than once in the request")
                topic = tiering.topic_for(self._follower.image, name=name, topic_id=topic_id)
                self._append([make_record("RemoveTopicRecord", topic_id=topic.topic_id)])
                result.update(name=topic.name, topic_id=topic.topic_id, error_code=0)
                log.info(
                    "topic.deleted",
                    topic=topic.name,
                    topic_id=str(topic.topic_id),
                    tiered_state=topic.tiered_state.name,
                    tiered_epoch=topic.tiered_epoch,
                )
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            results.append(result)
        return _normalized("DeleteTopicsResponse", version, {"responses": results})

    def create_partitions(self, body: Mapping[str, Any], version: int) -> dict[str, Any]:
        req = _normalized("CreatePartitionsRequest", version, body)
        self._refresh()
        names = [t["name"] for t in req["topics"]]
        results: list[dict[str, Any]] = []
        wrote = False
        for t in req["topics"]:
            name = t["name"]
            try:
                if names.count(name) > 1:
                    raise InvalidRequest(f"topic '{name}' appears more than once in the request")
                wrote |= self._create_partitions(t, validate_only=bool(req["validate_only"]))
                results.append({"name": name, "error_code": 0, "error_message": None})
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                results.append({"name": name, "error_code": exc.code, "error_message": exc.message})
        if wrote:
            self._complete_finished()
        return _normalized("CreatePartitionsResponse", version, {"results": results})

    def _create_partitions(self, t: Mapping[str, Any], *, validate_only: bool) -> bool:
        image = self._follower.image
        topic = tiering.topic_for(image, name=t["name"])
        current, count = len(topic.partitions), t["count"]
        if count < current:
            raise InvalidPartitions(f"topic '{topic.name}' has {current} partitions, more than the requested {count}")
        if count == current:
            raise InvalidPartitions(f"topic '{topic.name}' already has {current} partitions")
        self._check_partition_count(count)
        factor = max((len(p.replicas) for p in topic.partitions.values()), default=1)
        added = count - current
        if t["assignments"] is not None:
            assignment = [list(a["broker_ids"]) for a in t["assignments"]]
            if len(assignment) != added:
                raise InvalidReplicaAssignment(f"{len(assignment)} assignments given for {added} new partitions")
            for i, replicas in enumerate(assignment, start=current):
                self._check_replicas(replicas, image, where=f"partition {i}")
                if len(replicas) != factor:
                    raise InvalidReplicaAssignment(
                        f"partition {i} has {len(replicas)} replicas; the topic's replication factor is {factor}"
                    )
        else:
            assignment = self._place(image, added, factor)
        first = max(topic.partitions, default=-1) + 1
        records = [_partition_record(topic.topic_id, first + i, r, image) for i, r in enumerate(assignment)]
        if validate_only:
            return False
        self._append(records)
        log.info(
            "topic.partitions_created",
            topic=topic.name,
            topic_id=str(topic.topic_id),
            partitions=count,
            added=added,
            tiered_state=topic.tiered_state.name,
            tiered_epoch=topic.tiered_epoch,
        )
        return True

    def describe_configs(self, body: Mapping[str, Any], version: int) -> dict[str, Any]:
        req = _normalized("DescribeConfigsRequest", version, body)
        image = self._refresh()
        results: list[dict[str, Any]] = []
        for r in req["resources"]:
            rtype, rname, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
            result: dict[str, Any] = {"resource_type": rtype, "resource_name": rname, "configs": []}
            try:
                if rtype == ConfigResourceType.TOPIC:
                    tiering.topic_for(image, name=rname)
                    entries = [
                        _topic_config_entry(d, value, explicit, req)
                        for d, value, explicit in effective(image.topic_configs(rname))
                        if keys is None or d.name in keys
                    ]
                elif rtype == ConfigResourceType.BROKER:
                    if rname and not rname.isdigit():
                        raise InvalidRequest(f"'{rname}' is not a broker id")
                    values = image.configs.get((int(ConfigResourceType.BROKER), rname), {})
                    entries = [
                        _config_entry(k, v, _SOURCE_DYNAMIC_BROKER, None, 2, None, req)
                        for k, v in sorted(values.items())
                        if keys is None or k in keys
                    ]
                else:
                    raise InvalidRequest(f"resource type {rtype} is not supported: use 2 (topic) or 4 (broker)")
                result.update(error_code=0, error_message=None, configs=entries)
            except KafkaError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            results.append(result)
        return _normalized("DescribeConfigsResponse", version, {"results": results})

    def incremental_alter_configs(self, body: Mapping[str, Any], version: int) -> dict[str, Any]:
        req = _normalized("IncrementalAlterConfigsRequest", version, body)
        self._refresh()
        validate_only = bool(req["validate_only"])
        resources = [(r["resource_type"], r["resource_name"]) for r in req["resources"]]
        results: list[dict[str, Any]] = []
        wrote = False
        for r, key in zip(req["resources"], resources, strict=True):
            result: dict[str, Any] = {"resource_type": key[0], "resource_name": key[1]}
            try:
                if resources.count(key) > 1:
                    raise InvalidRequest(f"resource {key[1]} (type {key[0]}) appears more than once in the request")
                if key[0] != ConfigResourceType.TOPIC:
                    raise InvalidRequest(f"only topic configs (resource type 2) can be altered, not type {key[0]}")
                wrote |= self._alter_topic_configs(key[1], r["configs"], validate_only=validate_only)
                result.update(error_code=0, error_message=None)
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                log.info("topic.configs_refused", topic=key[1], error=exc.name, detail=exc.message)
                result.update(error_code=exc.code, error_message=exc.message)
            results.append(result)
        if wrote:
            self._complete_finished()
        return _normalized("IncrementalAlterConfigsResponse", version, {"responses": results})

    def _alter_topic_configs(self, name: str, raw_ops: Sequence[Mapping[str, Any]], *, validate_only: bool) -> bool:
        image = self._follower.image
        topic = tiering.topic_for(image, name=name)
        plan = tiering.plan(topic, image.topic_configs(name), parse_ops(raw_ops))
        if validate_only or not plan.records:
            return False
        self._append(plan.records)
        log.info("topic.configs_altered", topic=name, topic_id=str(topic.topic_id), records=len(plan.records))
        if plan.changes_state:
            log.info(
                "tiering.transition",
                topic=name,
                topic_id=str(topic.topic_id),
                from_state=plan.before.state.name,
                to_state=plan.after.state.name,
                tiered_epoch=plan.after.epoch,
                policy=plan.after.policy.name,
                pending_brokers=sorted(self._queue.pending_brokers(topic.topic_id)),
            )
        return True

    def metadata(
        self,
        body: Mapping[str, Any],
        version: int,
        *,
        nodes: Mapping[int, tuple[str, int, str | None]],
        controller_id: int,
    ) -> dict[str, Any]:
        req = _normalized("MetadataRequest", version, body)
        image = self._refresh()
        asked = req["topics"]
        topics: list[dict[str, Any]] = []
        if asked is None or (version == 0 and not asked):
            topics = [_metadata_topic(t) for t in sorted(image.topics.values(), key=lambda t: t.name)]
        else:
            for entry in asked:
                topic_id: Uuid = entry["topic_id"]
                name: str | None = entry["name"]
                try:
                    if version >= 10 and not topic_id.is_zero:
                        topic = tiering.topic_for(image, topic_id=topic_id)
                    else:
                        topic = tiering.topic_for(image, name=validate_topic_name(name or ""))
                    topics.append(_metadata_topic(topic))
                except KafkaError as exc:
                    unnamed = "" if version < 12 else None
                    topics.append(
                        {"error_code": exc.code, "name": name if name is not None else unnamed, "topic_id": topic_id}
                    )
        brokers = [
            {"node_id": node_id, "host": host, "port": port, "rack": rack}
            for node_id, (host, port, rack) in sorted(nodes.items())
        ]
        out = {
            "brokers": brokers,
            "cluster_id": self.membership.cluster_id,
            "controller_id": controller_id,
            "topics": topics,
        }
        return _normalized("MetadataResponse", version, out)

    def describe_tiered_state(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = _normalized("DescribeTieredStateRequest", 0, body)
        image = self._refresh()
        now = self._now_ms()
        stalled = set(dq.stalled(self._queue, now, self.disablement.stall_threshold_ms))
        names = req["topics"]
        wanted = sorted(image.topics_by_name) if names is None else list(names)
        out: list[dict[str, Any]] = []
        for name in wanted:
            topic = image.topic_by_name(name)
            if topic is None:
                err = UnknownTopicOrPartition(f"topic '{name}' does not exist")
                out.append({"name": name, "topic_id": ZERO_UUID, "error_code": err.code, "error_message": err.message})
                continue
            pending = [
                {
                    "broker_id": b,
                    "attempts": pb.attempts,
                    "last_error": pb.last_error,
                    "last_attempt_ms": pb.last_attempt_ms,
                    "fenced": pb.fenced,
                    "stalled": (topic.topic_id, b) in stalled,
                }
                for b, pb in sorted(self._queue.pending_brokers(topic.topic_id).items())
            ]
            out.append(
                {
                    "name": topic.name,
                    "topic_id": topic.topic_id,
                    "error_code": 0,
                    "tiered_state": int(topic.tiered_state),
                    "tiered_epoch": topic.tiered_epoch,
                    "policy": int(topic.policy),
                    "partition_count": len(topic.partitions),
                    "pending_brokers": pending,
                    **self._progress_of(topic.topic_id, topic.tiered_epoch),
                }
            )
        return _normalized("DescribeTieredStateResponse", 0, {"error_code": 0, "topics": out})

    # --- broker lifecycle ---------------------------------------------------------------------------------------

    def broker_registration(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = _normalized("BrokerRegistrationRequest", _newest("BrokerRegistrationRequest"), body)
        image = self._refresh()
        broker_id, incarnation = req["broker_id"], req["incarnation_id"]
        now = self._now_ms()
        try:
            if req["cluster_id"] != self.membership.cluster_id:
                ours = self.membership.cluster_id
                raise InconsistentClusterId(
                    f"broker {broker_id} belongs to cluster '{req['cluster_id']}', this is '{ours}'"
                )
            if broker_id < 0:
                raise InvalidRequest(f"broker id {broker_id} is negative")
            existing = image.brokers.get(broker_id)
            if existing is not None and existing.incarnation_id == incarnation:
                self._last_heartbeat[broker_id] = now  # a retried registration: same epoch
                return _broker_response("BrokerRegistrationResponse", broker_epoch=existing.broker_epoch)
            if existing is not None and self._session_alive(broker_id, now):
                raise DuplicateBrokerRegistration(
                    f"broker {broker_id} is registered by another incarnation ({existing.incarnation_id}) whose "
                    f"session has not expired; retry after {self.membership.session_timeout_ms} ms without heartbeats"
                )
            broker_epoch = self._store.end_offset()
            records = [
                make_record(
                    "RegisterBrokerRecord",
                    broker_id=broker_id,
                    incarnation_id=incarnation,
                    broker_epoch=broker_epoch,
                    end_points=[dict(listener) for listener in req["listeners"]],
                    features=[dict(f) for f in req["features"]],
                    rack=req["rack"],
                    fenced=True,
                ),
                *(_leave_records(image, broker_id) if existing is not None else []),
            ]
            offset = self._append(records)
            if offset - len(records) + 1 != broker_epoch:  # pragma: no cover - the lease makes this core the writer
                log.error("broker.epoch_mismatch", broker_id=broker_id, expected=broker_epoch, offset=offset)
            self._last_heartbeat[broker_id] = now
            log.info(
                "broker.registered",
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                incarnation_id=str(incarnation),
                previous_epoch=None if existing is None else existing.broker_epoch,
            )
            return _broker_response("BrokerRegistrationResponse", broker_epoch=broker_epoch)
        except StaleControllerEpoch:
            raise
        except KafkaError as exc:
            log.warning("broker.registration_refused", broker_id=broker_id, error=exc.name, detail=exc.message)
            return _broker_response("BrokerRegistrationResponse", error_code=exc.code, broker_epoch=-1)

    def broker_heartbeat(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = _normalized("BrokerHeartbeatRequest", _newest("BrokerHeartbeatRequest"), body)
        image = self._refresh()
        broker_id, broker_epoch = req["broker_id"], req["broker_epoch"]
        registration = image.brokers.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            log.info("broker.heartbeat_stale_epoch", broker_id=broker_id, broker_epoch=broker_epoch)
            return _broker_response(
                "BrokerHeartbeatResponse", error_code=StaleBrokerEpoch.code, is_caught_up=False, is_fenced=True
            )
        self._last_heartbeat[broker_id] = self._now_ms()
        caught_up = req["current_metadata_offset"] >= registration.broker_epoch
        fenced = registration.fenced
        leaving = bool(req["want_fence"] or req["want_shut_down"])
        if leaving and not fenced:
            self._append(
                [make_record("FenceBrokerRecord", id=broker_id, epoch=broker_epoch), *_leave_records(image, broker_id)]
            )
            fenced = True
            log.info("broker.fenced", broker_id=broker_id, broker_epoch=broker_epoch, reason="requested")
        elif not leaving and fenced and caught_up:
            unfence = make_record("UnfenceBrokerRecord", id=broker_id, epoch=broker_epoch)
            self._append([unfence, *_rejoin_records(image, broker_id, rebalance=self.membership.auto_leader_rebalance)])
            fenced = False
            log.info("broker.unfenced", broker_id=broker_id, broker_epoch=broker_epoch)
        return _broker_response(
            "BrokerHeartbeatResponse",
            is_caught_up=caught_up,
            is_fenced=fenced,
            should_shut_down=bool(req["want_shut_down"]),
        )

    def unregister_broker(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = _normalized("UnregisterBrokerRequest", 0, body)
        image = self._refresh()
        broker_id = req["broker_id"]
        registration = image.brokers.get(broker_id)
        if registration is None:
            err = BrokerIdNotRegistered(f"broker {broker_id} is not registered")
            return _broker_response("UnregisterBrokerResponse", error_code=err.code, error_message=err.message)
        owed = sorted(str(t) for t, entry in self._queue.topics.items() if broker_id in entry.pending)
        record = make_record("UnregisterBrokerRecord", broker_id=broker_id, broker_epoch=registration.broker_epoch)
        self._append([record, *_leave_records(image, broker_id)])
        self._last_heartbeat.pop(broker_id, None)
        log.info("broker.unregistered", broker_id=broker_id, broker_epoch=registration.broker_epoch, released=owed)
        self._complete_finished()
        return _broker_response("UnregisterBrokerResponse", error_message=None)

    def tick(self) -> None:
        """Fence brokers whose session expired, time out lost DisableRemoteTopic requests, complete topics."""
        image = self._refresh()
        now = self._now_ms()
        for broker_id in sorted(image.brokers):
            registration = self._follower.image.brokers.get(broker_id)
            if registration is None or registration.fenced:
                continue
            last = self._last_heartbeat.setdefault(broker_id, now)
            if now - last < self.membership.session_timeout_ms:
                continue
            fence = make_record("FenceBrokerRecord", id=broker_id, epoch=registration.broker_epoch)
            self._append([fence, *_leave_records(self._follower.image, broker_id)])
            log.warning("broker.fenced", broker_id=broker_id, reason="session timeout", silent_ms=now - last)
        self._queue = dq.expire(self._queue, now, timeout_ms=self.disablement.request_timeout_ms, rng=self._rng)
        self._complete_finished()
        self._report_stalled(now)

    def _report_stalled(self, now: int) -> None:
        """Log each (topic, broker) pair once when it becomes stalled, with its last error; again if it recovers
        and stalls anew."""
        stalled = set(dq.stalled(self._queue, now, self.disablement.stall_threshold_ms))
        for topic_id, broker_id in sorted(stalled - self._stalled_reported, key=lambda p: (str(p[0]), p[1])):
            entry = self._queue.topic(topic_id)
            pb = entry.pending.get(broker_id) if entry is not None else None
            log.warning(
                "disable.stalled",
                topic=entry.name if entry is not None else None,
                topic_id=str(topic_id),
                broker_id=broker_id,
                attempts=pb.attempts if pb is not None else None,
                last_error=pb.last_error if pb is not None else None,
                fenced=pb.fenced if pb is not None else None,
            )
        self._stalled_reported = stalled

    # --- DisableRemoteTopic -------------------------------------------------------------------------------------

    def due_disable_requests(self) -> list[tuple[int, dict[str, Any]]]:
        """The DisableRemoteTopic requests to send now, as (broker id, request body); they are now in flight.

        Besides the schema's fields a body carries ``attempt``: not a wire field (the codec encodes schema fields
        only), it numbers the request so that :meth:`on_disable_response`, given the same body back, can tell a
        late reply to an attempt already timed out from the reply to the attempt in flight.
        Raises :class:`StaleControllerEpoch` instead of handing out requests once the lease has moved on.
        """
        self._refresh()
        now = self._now_ms()
        expired = dq.expire(self._queue, now, timeout_ms=self.disablement.request_timeout_ms, rng=self._rng)
        queue, sends = dq.due(expired, now)
        if sends:
            lease = self._store.current_lease()
            if lease is None or lease.controller_epoch != self.controller_epoch:
                log.warning("controller.deposed", holder=self.holder, controller_epoch=self.controller_epoch)
                raise StaleControllerEpoch(
                    f"controller epoch {self.controller_epoch} no longer holds the lease "
                    f"({'none' if lease is None else lease.controller_epoch} does)"
                )
        self._queue = queue
        out: list[tuple[int, dict[str, Any]]] = []
        for s in sends:
            log.debug(
                "disable.send",
                topic_id=str(s.topic_id),
                broker_id=s.broker_id,
                tiered_epoch=s.tiered_epoch,
                attempt=s.attempt,
            )
            out.append(
                (
                    s.broker_id,
                    {
                        "partition_id": ALL_PARTITIONS,
                        "topic_id": s.topic_id,
                        "tiered_epoch": s.tiered_epoch,
                        "controller_epoch": self.controller_epoch,
                        "broker_epoch": s.broker_epoch,
                        "policy": int(s.policy),
                        "attempt": s.attempt,
                    },
                )
            )
        return out

    def on_disable_response(
        self,
        broker_id: int,
        request_body: Mapping[str, Any],
        response_body: Mapping[str, Any] | None,
        error: TieredError | None,
    ) -> None:
        """Feed the outcome of one DisableRemoteTopic: a response body, a transport error, or neither (timeout).

        Appends DISABLED for every topic this completes. Raises :class:`StaleControllerEpoch` if the broker says a
        newer controller exists (after recording the reply; the driver steps down).
        """
        topic_id: Uuid = request_body["topic_id"]
        tiered_epoch: int = request_body["tiered_epoch"]
        in_progress = False
        message: str | None
        if error is not None:
            wire = as_wire_error(error)
            code, message = wire.code, wire.message
        elif response_body is None:
            code, message = RequestTimedOut.code, "no reply (timed out)"
        else:
            code, message = int(response_body.get("error_code", 0)), response_body.get("error_message")
            in_progress = code == 0 and int(response_body.get("status", 0)) == 1
        if code == 0 and response_body is not None:
            self._record_progress(topic_id, tiered_epoch, broker_id, response_body)
        before = self._queue
        self._queue = dq.on_response(
            before,
            topic_id,
            broker_id,
            tiered_epoch,
            ok=code == 0,
            in_progress=in_progress,
            error_code=code,
            error_message=message,
            now_ms=self._now_ms(),
            rng=self._rng,
            repoll_ms=self.disablement.repoll_ms,
            attempt=request_body.get("attempt"),
        )
        fields = {"topic_id": str(topic_id), "broker_id": broker_id, "tiered_epoch": tiered_epoch}
        if self._queue is before:
            log.debug("disable.reply_ignored", **fields, error_code=code)
        elif code != 0:
            log.warning("disable.retry", **fields, error_code=code, detail=message)
        elif in_progress:
            assert response_body is not None
            log.debug(
                "disable.in_progress",
                **fields,
                partitions_done=response_body.get("partitions_done"),
                partitions_total=response_body.get("partitions_total"),
                segments_remaining=response_body.get("segments_remaining"),
            )
        else:
            log.info("disable.ack", **fields, pending=sorted(self._queue.pending_brokers(topic_id)))
        if code == StaleControllerEpoch.code:
            log.warning("controller.deposed", holder=self.holder, controller_epoch=self.controller_epoch)
            raise StaleControllerEpoch(
                f"broker {broker_id} knows a newer controller than epoch {self.controller_epoch}"
            )
        if code == StaleTieredEpoch.code:
            log.info("disable.stale_tiered_epoch", **fields)  # the refresh below catches the image up
        self._complete_finished(only=[topic_id])

    # --- progress reporting (in memory; a new controller learns it again from the re-sent requests) -------------

    def _record_progress(self, topic_id: Uuid, epoch: int, broker_id: int, body: Mapping[str, Any]) -> None:
        per_epoch = self._progress.setdefault(topic_id, {})
        for old_epoch in [e for e in per_epoch if e != epoch]:
            del per_epoch[old_epoch]
        per_epoch.setdefault(epoch, {})[broker_id] = (
            int(body.get("segments_deleted", 0)),
            int(body.get("segments_remaining", 0)),
        )

    def _progress_of(self, topic_id: Uuid, epoch: int) -> dict[str, int]:
        reports = self._progress.get(topic_id, {}).get(epoch, {})
        entry = self._queue.topic(topic_id)
        return {
            "acknowledged_brokers": 0 if entry is None or entry.tiered_epoch != epoch else len(entry.acked),
            "segments_deleted": sum(d for d, _ in reports.values()),
            "segments_remaining": sum(r for _, r in reports.values()),
        }

    # --- internals ----------------------------------------------------------------------------------------------

    def _refresh(self) -> MetadataImage:
        previous = self._follower.image
        image = self._follower.refresh()
        if image.offset != previous.offset or image.offset < 0:
            self._queue = dq.on_image(self._queue, image, self._now_ms(), previous=previous)
        return image

    def _append(self, records: Sequence[MetadataRecord]) -> int:
        try:
            offset = self._store.append(records, controller_epoch=self.controller_epoch)
        except StaleControllerEpoch:
            log.warning("controller.deposed", holder=self.holder, controller_epoch=self.controller_epoch)
            raise
        self._refresh()
        return offset

    def _complete_finished(self, only: Iterable[Uuid] | None = None) -> None:
        image = self._refresh()
        done = dq.completed(self._queue, image, only)
        if not done:
            return
        records = [tiering.complete(image.topics[t], self._queue.topics[t].tiered_epoch) for t in done]
        self._append(records)
        for t in done:
            topic = image.topics[t]
            log.info(
                "disable.completed",
                topic=topic.name,
                topic_id=str(t),
                tiered_epoch=topic.tiered_epoch,
                policy=topic.policy.name,
            )

    def _session_alive(self, broker_id: int, now: int) -> bool:
        last = self._last_heartbeat.get(broker_id)
        return last is not None and now - last < self.membership.session_timeout_ms

    def _new_topic_id(self, image: MetadataImage) -> Uuid:
        while True:
            topic_id = Uuid.random(self._rng.randbytes)
            if topic_id not in image.topics:
                return topic_id

    def _check_partition_count(self, count: int) -> None:
        if count <= 0:
            raise InvalidPartitions(f"the number of partitions must be positive (or -1 for the default), got {count}")
        if count > self.topic_defaults.max_partitions:
            raise InvalidPartitions(f"{count} partitions exceed the limit of {self.topic_defaults.max_partitions}")

    def _place(self, image: MetadataImage, count: int, factor: int) -> list[list[int]]:
        if factor <= 0:
            raise InvalidReplicationFactor(
                f"the replication factor must be positive (or -1 for the default), got {factor}"
            )
        live = sorted(b.broker_id for b in image.brokers.values() if not b.fenced)
        if factor > len(live):
            raise InvalidReplicationFactor(
                f"replication factor {factor} cannot be reached: only {len(live)} broker(s) are registered and unfenced"
            )
        start = self._placement_cursor
        self._placement_cursor += 1
        return [[live[(start + p + k) % len(live)] for k in range(factor)] for p in range(count)]

    @staticmethod
    def _check_replicas(replicas: Sequence[int], image: MetadataImage, *, where: str) -> None:
        if not replicas:
            raise InvalidReplicaAssignment(f"{where} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignment(f"{where} names a broker twice: {list(replicas)}")
        unknown = [b for b in replicas if b not in image.brokers]
        if unknown:
            raise InvalidReplicaAssignment(f"{where} names unregistered broker(s) {unknown}")
        if all(image.brokers[b].fenced for b in replicas):
            raise InvalidReplicaAssignment(f"every broker of {where} ({list(replicas)}) is fenced")


# --- records ------------------------------------------------------------------------------------------------------


def _partition_record(
    topic_id: Uuid, partition_id: int, replicas: Sequence[int], image: MetadataImage
) -> MetadataRecord:
    live = [b for b in replicas if b in image.brokers and not image.brokers[b].fenced]
    return make_record(
        "PartitionRecord",
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=list(replicas),
        isr=live or list(replicas),
        leader=live[0] if live else NO_LEADER,
        leader_epoch=0,
        partition_epoch=0,
    )


def _partitions(image: MetadataImage) -> Iterable[tuple[TopicImage, PartitionImage]]:
    for topic in image.topics.values():
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
            yield topic, p


def _change(topic_id: Uuid, p: PartitionImage, isr: list[int], leader: int) -> MetadataRecord | None:
    isr_changed = tuple(isr) != p.isr
    if not isr_changed and leader == p.leader:
        return None
    return make_record(
        "PartitionChangeRecord",
        topic_id=topic_id,
        partition_id=p.partition_id,
        isr=isr if isr_changed else None,
        leader=leader if leader != p.leader else LEADER_UNCHANGED,
    )


def _leave_records(image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
    """PartitionChangeRecords taking ``broker_id`` out of every ISR and leadership (KRaft keeps a last ISR member)."""

    def usable(b: int) -> bool:
        return b != broker_id and b in image.brokers and not image.brokers[b].fenced

    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        isr = [b for b in p.isr if b != broker_id] or list(p.isr)
        leader = p.leader
        if leader == broker_id:
            leader = next((b for b in p.replicas if b in isr and usable(b)), NO_LEADER)
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


def _rejoin_records(image: MetadataImage, broker_id: int, *, rebalance: bool) -> list[MetadataRecord]:
    """PartitionChangeRecords putting an unfenced ``broker_id`` back in the ISR of its partitions, leading the
    leaderless ones and (``rebalance``) those it is the preferred replica of."""
    out: list[MetadataRecord] = []
    for topic, p in _partitions(image):
        if broker_id not in p.replicas:
            continue
        isr = [b for b in p.replicas if b in p.isr or b == broker_id]
        leader = p.leader
        if leader == NO_LEADER or (rebalance and p.replicas[0] == broker_id):
            leader = broker_id
        change = _change(topic.topic_id, p, isr, leader)
        if change is not None:
            out.append(change)
    return out


# --- response shaping ---------------------------------------------------------------------------------------------


def _metadata_topic(topic: TopicImage) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": [
            {
                "error_code": LeaderNotAvailable.code if p.leader == NO_LEADER else 0,
                "partition_index": p.partition_id,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [],
            }
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)
        ],
    }


def _config_entry(
    name: str,
    value: str,
    source: int,
    default: str | None,
    config_type: int,
    doc: str | None,
    req: Mapping[str, Any],
) -> dict[str, Any]:
    synonyms: list[dict[str, Any]] = []
    if req.get("include_synonyms"):
        synonyms.append({"name": name, "value": value, "source": source})
        if source != _SOURCE_DEFAULT and default is not None:
            synonyms.append({"name": name, "value": default, "source": _SOURCE_DEFAULT})
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": config_type,
        "documentation": doc if req.get("include_documentation") else None,
    }


def _topic_config_entry(d: ConfigDef, value: str, explicit: bool, req: Mapping[str, Any]) -> dict[str, Any]:
    """A topic config's DescribeConfigs entry: set on the topic (``explicit``) or the catalogue default."""
    source = _SOURCE_TOPIC if explicit else _SOURCE_DEFAULT
    return _config_entry(d.name, value, source, d.default, int(d.kind), d.doc, req)


def _created_configs(configs: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "name": d.name,
            "value": value,
            "read_only": False,
            "config_source": _SOURCE_TOPIC if explicit else _SOURCE_DEFAULT,
            "is_sensitive": False,
        }
        for d, value, explicit in effective(configs)
    ]


def _broker_response(name: str, **fields: Any) -> dict[str, Any]:
    return _normalized(name, _newest(name), {"error_code": 0, **fields})


def _newest(name: str) -> int:
    hi = schema(name).valid_versions.hi
    assert hi is not None
    return hi


_MISSING: Any = object()


def _normalized(name: str, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with every field of ``name`` at ``version`` present (defaults filled in, recursively) and every
    field the version does not have reset to its default: what decoding its encoding would return."""
    s = schema(name)
    s.check_version(version)
    return _fill(s.fields, version, body)


def _fill(fields: tuple[FieldSpec, ...], version: int, value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        v = value.get(f.py_name, _MISSING) if version in f.versions else _MISSING
        if v is _MISSING:
            v = default_factory(f)()
        elif f.is_struct and v is not None:
            v = [_fill(f.fields, version, e) for e in v] if f.is_array else _fill(f.fields, version, v)
        out[f.py_name] = v
    return out
