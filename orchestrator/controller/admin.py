"""The admin API's writes: CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs. The
reads (Metadata, DescribeConfigs, DescribeCluster) are every node's (:mod:`orchestrator.admin_api.reads`).

Each handler takes a typed request body and its version and returns the typed response body, normalized to that
version (``responses.py``). Config changes go through the tiering state machine (``tiering.py``), which turns them
into the records of ONE append; partition records come from ``partitions.py``.

Invariants:
* A request that fails validation writes nothing for that topic (or resource): the error is in its entry of the
  response. A deposed controller's :class:`StaleControllerEpoch` is never such an error: it propagates.
* One request's change to one topic (or resource) is written whole or not at all: it is in one append. A config
  request's accepted resources share one append (bulk disablement), so a failed append writes none of them.
* AlterConfigs and IncrementalAlterConfigs go through the same validation and tiering state machine; AlterConfigs
  (Kafka's non-incremental API) resets every config set on the topic that it does not name. So an AlterConfigs that
  would change a topic's tiering (its state, epoch or policy) without naming ``remote.storage.enable`` is refused
  INVALID_CONFIG, nothing written: clients whose ``alterConfigs`` sends only the key being changed
  (librdkafka's, kafkajs's) would otherwise start a disablement by resetting ``remote.storage.enable`` to its
  default. Stock Kafka refuses that request too (``LogConfig.validateTurningOffRemoteStorageWithDelete``), though
  for another reason; IncrementalAlterConfigs changes only what it names and is not concerned.
* A write that can finish a disablement (partitions added while DISABLING, a config change) is followed by
  completing finished topics (``disablement.py``), as a broker's acknowledgement is.
* Replicas of a new topic start at a placement cursor that rotates per topic from a random start (``partitions.py``).
* A client never changes an internal topic (``__remote_log_metadata``): creating, deleting, growing or reconfiguring
  it is INVALID_REQUEST for that topic (:mod:`orchestrator.admin_api.internal_topics`, which cites Kafka's
  refusals); the controller creates it itself (``internal_topics.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import structlog

from orchestrator import crash_points
from orchestrator.admin_api import internal_topics
from orchestrator.admin_api.responses import created_configs, normalized
from orchestrator.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidRequest,
    InvalidTopic,
    KafkaError,
    StaleControllerEpoch,
    TieredError,
    TopicAlreadyExists,
)
from orchestrator.ids import ZERO_UUID, Uuid, topic_names_collide, validate_topic_name
from orchestrator.metadata.image import MetadataImage, TopicImage, topic_for
from orchestrator.metadata.records import ConfigResourceType, TieredState, make_record
from orchestrator.metadata.topic_configs import (
    REMOTE_STORAGE_ENABLE,
    ConfigOp,
    parse_ops,
    replacement_ops,
    validate_config_map,
)
from orchestrator.protocol import messages as m
from orchestrator.settings import TopicDefaults

from . import tiering
from .disablement import DisablementDriver
from .partitions import check_replicas, new_topic_id, new_topic_records, partition_record, place
from .state import ControllerState
from .topic_deletion import RemoteDeletionDriver

log = structlog.get_logger(__name__)

OpsFor = Callable[[Mapping[str, str]], Sequence[ConfigOp]]
"""A resource's config operations, built from its current configs (AlterConfigs resets what it does not name)."""
Named = frozenset[str] | None
"""The config keys a non-incremental AlterConfigs names for a resource; None for IncrementalAlterConfigs."""


class AdminApi:
    def __init__(
        self,
        state: ControllerState,
        driver: DisablementDriver,
        *,
        topic_defaults: TopicDefaults,
        remote_deletion: RemoteDeletionDriver | None = None,
    ) -> None:
        """``remote_deletion`` marks a deleted topic's remote data for deletion (none: nothing is marked here; a
        controller's sync still marks it)."""
        self._state = state
        self._driver = driver
        self._remote_deletion = remote_deletion
        self._topic_defaults = topic_defaults
        self._placement_cursor = state.rng.randrange(1 << 16)

    # --- topics and partitions ----------------------------------------------------------------------------------

    def create_topics(self, body: m.CreateTopicsRequest, version: int) -> m.CreateTopicsResponse:
        req = normalized("CreateTopicsRequest", version, body)
        image = self._state.refresh()
        validate_only = bool(req["validate_only"])
        names = [t["name"] for t in req["topics"]]
        duplicates = {n for n in names if names.count(n) > 1}
        accepted: list[str] = []
        results: list[m.CreatableTopicResult] = []
        for t in req["topics"]:
            name = t["name"]
            result: m.CreatableTopicResult
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
            image = self._state.image
        return normalized("CreateTopicsResponse", version, m.CreateTopicsResponse(topics=results))

    def _create_topic(
        self, t: m.CreatableTopic, image: MetadataImage, accepted: Sequence[str], *, validate_only: bool
    ) -> m.CreatableTopicResult:
        name = validate_topic_name(t["name"])
        internal_topics.check_client_change(name, internal_topics.CREATION)
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
                check_replicas(replicas, image, where=f"partition {i}")
            if len({len(r) for r in assignment}) > 1:
                raise InvalidReplicaAssignment("every partition must have the same number of replicas")
            self._check_partition_count(len(assignment))
        else:
            defaults = self._topic_defaults
            count = defaults.partitions if t["num_partitions"] == -1 else t["num_partitions"]
            factor = defaults.replication_factor if t["replication_factor"] == -1 else t["replication_factor"]
            self._check_partition_count(count)
            assignment = self._place(image, count, factor)
        topic_id = new_topic_id(image, self._state.rng)
        records, plan = new_topic_records(image, name, topic_id, assignment, configs)
        if not validate_only:
            self._state.append(records)
            log.info(
                "topic.created",
                topic=name,
                topic_id=str(topic_id),
                partitions=len(assignment),
                replication_factor=len(assignment[0]),
                tiered_state=plan.after.state.name,
                tiered_epoch=plan.after.epoch,
            )
        return m.CreatableTopicResult(
            name=name,
            topic_id=ZERO_UUID if validate_only else topic_id,
            error_code=0,
            error_message=None,
            num_partitions=len(assignment),
            replication_factor=len(assignment[0]),
            configs=created_configs(plan.configs),
        )

    def delete_topics(self, body: m.DeleteTopicsRequest, version: int) -> m.DeleteTopicsResponse:
        req = normalized("DeleteTopicsRequest", version, body)
        state = self._state
        state.refresh()
        if version >= 6:
            wanted: list[tuple[str | None, Uuid]] = [(t["name"], t["topic_id"]) for t in req["topics"]]
        else:
            wanted = [(n, ZERO_UUID) for n in req["topic_names"]]
        keys = [tid if not tid.is_zero else n for n, tid in wanted]
        results: list[m.DeletableTopicResult] = []
        for (name, topic_id), key in zip(wanted, keys, strict=True):
            result = m.DeletableTopicResult(name=name if name is not None or version >= 6 else "", topic_id=topic_id)
            try:
                if name is not None and not topic_id.is_zero:
                    raise InvalidRequest("give a topic name or a topic id, not both")
                if name is None and topic_id.is_zero:
                    raise InvalidRequest("neither a topic name nor a topic id was given")
                if keys.count(key) > 1:
                    raise InvalidRequest(f"topic {key} appears more than once in the request")
                topic = topic_for(state.image, name=name, topic_id=topic_id)
                internal_topics.check_client_change(topic.name, internal_topics.DELETION)
                marks = self._remote_deletion.removal_marks(topic) if self._remote_deletion is not None else []
                state.append([make_record("RemoveTopicRecord", topic_id=topic.topic_id)], remote_log_metadata=marks)
                crash_points.reached("controller.after_topic_removed")
                self._queue_remote_deletion(topic, len(marks))
                result.update({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0})
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
                result.update({"error_code": exc.code, "error_message": exc.message})
            results.append(result)
        return normalized("DeleteTopicsResponse", version, m.DeleteTopicsResponse(responses=results))

    def _queue_remote_deletion(self, topic: TopicImage, marks: int) -> None:
        """KIP-405: the removed topic's partitions, marked in the removal's own transaction, go to the deletion
        queue. The removal is committed: a failure here is logged and made good by the deletion driver's next sync."""
        if self._remote_deletion is None:
            return
        try:
            self._remote_deletion.removed(topic, marks)
        except StaleControllerEpoch:
            raise
        except TieredError as exc:
            log.warning("topic_deletion.queue_failed", topic_id=str(topic.topic_id), error=exc.name, detail=str(exc))

    def create_partitions(self, body: m.CreatePartitionsRequest, version: int) -> m.CreatePartitionsResponse:
        req = normalized("CreatePartitionsRequest", version, body)
        self._state.refresh()
        names = [t["name"] for t in req["topics"]]
        results: list[m.CreatePartitionsTopicResult] = []
        wrote = False
        for t in req["topics"]:
            name = t["name"]
            try:
                if names.count(name) > 1:
                    raise InvalidRequest(f"topic '{name}' appears more than once in the request")
                wrote |= self._create_partitions(t, validate_only=bool(req["validate_only"]))
                results.append(m.CreatePartitionsTopicResult(name=name, error_code=0, error_message=None))
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                results.append(m.CreatePartitionsTopicResult(name=name, error_code=exc.code, error_message=exc.message))
        if wrote:
            self._driver.complete_finished()
        return normalized("CreatePartitionsResponse", version, m.CreatePartitionsResponse(results=results))

    def _create_partitions(self, t: m.CreatePartitionsTopic, *, validate_only: bool) -> bool:
        image = self._state.image
        topic = topic_for(image, name=t["name"])
        internal_topics.check_client_change(topic.name, internal_topics.PARTITION_CHANGE)
        current, count = len(topic.partitions), t["count"]
        if count < current:
            raise InvalidPartitions(f"topic '{topic.name}' has {current} partitions, more than the requested {count}")
        if count == current:
            raise InvalidPartitions(f"topic '{topic.name}' already has {current} partitions")
        self._check_partition_count(count)
        factor = max((len(p.replicas) for p in topic.partitions.values()), default=1)
        added = count - current
        given = t["assignments"]
        if given is not None:
            assignment = [list(a["broker_ids"]) for a in given]
            if len(assignment) != added:
                raise InvalidReplicaAssignment(f"{len(assignment)} assignments given for {added} new partitions")
            for i, replicas in enumerate(assignment, start=current):
                check_replicas(replicas, image, where=f"partition {i}")
                if len(replicas) != factor:
                    raise InvalidReplicaAssignment(
                        f"partition {i} has {len(replicas)} replicas; the topic's replication factor is {factor}"
                    )
        else:
            assignment = self._place(image, added, factor)
        first = max(topic.partitions, default=-1) + 1
        records = [partition_record(topic.topic_id, first + i, r, image) for i, r in enumerate(assignment)]
        if validate_only:
            return False
        self._state.append(records)
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

    # --- configs ------------------------------------------------------------------------------------------------

    def incremental_alter_configs(
        self, body: m.IncrementalAlterConfigsRequest, version: int
    ) -> m.IncrementalAlterConfigsResponse:
        req = normalized("IncrementalAlterConfigsRequest", version, body)
        changes = [(r["resource_type"], r["resource_name"], _incremental(r["configs"]), None) for r in req["resources"]]
        results = self._alter_configs(changes, validate_only=bool(req["validate_only"]))
        response = m.IncrementalAlterConfigsResponse(responses=results)
        return normalized("IncrementalAlterConfigsResponse", version, response)

    def alter_configs(self, body: m.AlterConfigsRequest, version: int) -> m.AlterConfigsResponse:
        """Kafka's non-incremental AlterConfigs: each resource's configs become exactly the ones named (every
        config set on the topic and not named returns to its default), through the same KIP-950 state machine; one
        that would change the topic's tiering without naming ``remote.storage.enable`` is refused (module
        docstring)."""
        req = normalized("AlterConfigsRequest", version, body)
        changes = [
            (
                r["resource_type"],
                r["resource_name"],
                _replacement(r["configs"]),
                frozenset(c["name"] for c in r["configs"]),
            )
            for r in req["resources"]
        ]
        results = self._alter_configs(changes, validate_only=bool(req["validate_only"]))
        return normalized("AlterConfigsResponse", version, m.AlterConfigsResponse(responses=results))

    def _alter_configs(
        self, changes: Sequence[tuple[int, str, OpsFor, Named]], *, validate_only: bool
    ) -> list[m.AlterConfigsResourceResponse]:
        """Each resource's operations (built from its current configs), planned one resource at a time against the
        same image (a resource named twice is refused, so no two plans touch one topic), then every accepted
        resource's records appended in ONE append: a bulk change (tiering off for thousands of topics) costs one
        store transaction, not one per topic; each topic's change is still written whole or not at all."""
        self._state.refresh()
        resources = [(rtype, rname) for rtype, rname, _, _ in changes]
        named = Counter(resources)
        results: list[m.AlterConfigsResourceResponse] = []
        plans: list[tuple[TopicImage, tiering.TieringPlan]] = []
        for (rtype, rname, ops_for, legacy_named), key in zip(changes, resources, strict=True):
            result = m.AlterConfigsResourceResponse(resource_type=rtype, resource_name=rname)
            try:
                if named[key] > 1:
                    raise InvalidRequest(f"resource {rname} (type {rtype}) appears more than once in the request")
                if rtype != ConfigResourceType.TOPIC:
                    raise InvalidRequest(f"only topic configs (resource type 2) can be altered, not type {rtype}")
                planned = self._plan_topic_configs(rname, ops_for, legacy_named)
                if planned is not None and not validate_only:
                    plans.append(planned)
                result.update({"error_code": 0, "error_message": None})
            except StaleControllerEpoch:
                raise
            except KafkaError as exc:
                log.info("topic.configs_refused", topic=rname, error=exc.name, detail=exc.message)
                result.update({"error_code": exc.code, "error_message": exc.message})
            results.append(result)
        if plans:
            self._state.append([r for _, plan in plans for r in plan.records])
            if any(plan.changes_state and plan.after.state == TieredState.DISABLING for _, plan in plans):
                crash_points.reached("controller.after_epoch_bump")
            self._log_altered(plans)
            self._driver.complete_finished()
        return results

    def _plan_topic_configs(
        self, name: str, ops_for: OpsFor, legacy_named: Named
    ) -> tuple[TopicImage, tiering.TieringPlan] | None:
        """The records that apply ``ops_for`` to topic ``name`` (None: nothing to write); raises its Kafka error."""
        image = self._state.image
        topic = topic_for(image, name=name)
        internal_topics.check_client_change(topic.name, internal_topics.CONFIG_CHANGE)
        current = image.topic_configs(name)
        plan = tiering.plan(topic, current, ops_for(current))
        if legacy_named is not None and plan.changes_state and REMOTE_STORAGE_ENABLE not in legacy_named:
            raise InvalidConfig(
                f"AlterConfigs (the non-incremental API, which resets every config it does not name) would change "
                f"the tiering of topic {name} from {plan.before.state.name} to {plan.after.state.name} without "
                f"naming {REMOTE_STORAGE_ENABLE}; nothing was changed. To change other configs, use "
                f"IncrementalAlterConfigs (kafka-configs.sh --alter --add-config, tieredctl configs alter), or name "
                f"{REMOTE_STORAGE_ENABLE} with the value the topic should keep; to change tiering, name "
                f"{REMOTE_STORAGE_ENABLE} (or use tieredctl tiering disable|enable)"
            )
        return (topic, plan) if plan.records else None

    def _log_altered(self, plans: Sequence[tuple[TopicImage, tiering.TieringPlan]]) -> None:
        """One ``tiering.transition`` line listing every topic whose tiered state the request changed, and one
        ``topic.configs_altered`` line listing the others: per request, not per topic (a bulk change of tiering
        names thousands of topics, and one line each was half the request's time)."""
        queue = self._state.queue
        altered: list[dict[str, object]] = []
        transitions: list[dict[str, object]] = []
        for topic, plan in plans:
            entry: dict[str, object] = {"topic": topic.name, "topic_id": str(topic.topic_id)}
            if not plan.changes_state:
                altered.append({**entry, "records": len(plan.records)})
                continue
            entry.update(
                from_state=plan.before.state.name,
                to_state=plan.after.state.name,
                tiered_epoch=plan.after.epoch,
                policy=plan.after.policy.name,
                pending_brokers=sorted(queue.pending_brokers(topic.topic_id)),
            )
            transitions.append(entry)
        if altered:
            log.info("topic.configs_altered", topics=altered)
        if transitions:
            log.info("tiering.transition", topics=transitions)

    # --- internals ----------------------------------------------------------------------------------------------

    def _check_partition_count(self, count: int) -> None:
        if count <= 0:
            raise InvalidPartitions(f"the number of partitions must be positive (or -1 for the default), got {count}")
        if count > self._topic_defaults.max_partitions:
            raise InvalidPartitions(f"{count} partitions exceed the limit of {self._topic_defaults.max_partitions}")

    def _place(self, image: MetadataImage, count: int, factor: int) -> list[list[int]]:
        assignment, self._placement_cursor = place(image, count, factor, cursor=self._placement_cursor)
        return assignment


def _incremental(configs: Sequence[m.IncrementalAlterConfigsRequestAlterableConfig]) -> OpsFor:
    """IncrementalAlterConfigs: the operations as given (parsed when applied: a malformed one fails its resource)."""
    return lambda _current: parse_ops(configs)


def _replacement(configs: Sequence[m.AlterConfigsRequestAlterableConfig]) -> OpsFor:
    """AlterConfigs: set what is named, reset the rest of the resource's current configs."""
    return lambda current: replacement_ops(current, configs)
