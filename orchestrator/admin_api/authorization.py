"""Authorization of every request a node serves: Kafka's operations on Kafka's resources, checked against the ACLs
of the node's metadata image before a handler sees the request.

The rules are Kafka's (``KafkaApis`` / ``ControllerApis``):

* CreateTopics needs CREATE on the topic (or on the cluster), DeleteTopics DELETE, CreatePartitions ALTER,
  AlterConfigs and IncrementalAlterConfigs ALTER_CONFIGS (on the cluster for a broker resource), DescribeConfigs
  DESCRIBE_CONFIGS; a refused entry is answered TOPIC_AUTHORIZATION_FAILED (29), or CLUSTER_AUTHORIZATION_FAILED
  (31) for a broker resource, in its own entry, and the others are served.
* Metadata and DescribeTieredState show only topics the principal may DESCRIBE: unnamed ones are left out of a
  listing, a named one is answered TOPIC_AUTHORIZATION_FAILED.
* DescribeCluster, DescribeAcls and DescribeUserScramCredentials need DESCRIBE on the cluster; UnregisterBroker,
  CreateAcls, DeleteAcls and AlterUserScramCredentials ALTER on the cluster.
* InitProducerId (an idempotent producer) needs IDEMPOTENT_WRITE on the cluster or WRITE on any topic (Kafka 3's
  rule), else CLUSTER_AUTHORIZATION_FAILED.
* The data plane, per topic like the entries above: Produce needs WRITE on the topic, Fetch READ, ListOffsets
  DESCRIBE; a refused topic's partitions are answered TOPIC_AUTHORIZATION_FAILED (a Produce with acks=0 that had
  one gets its connection closed, as any failed acks=0 produce). OffsetForLeaderEpoch needs CLUSTER_ACTION on the
  cluster (what replicas have; not having it is no refusal) or else DESCRIBE on the topic (what a consumer has,
  KIP-320), whoever asks: Kafka 3's rule, which looks at no ``replica_id``.
* What only the cluster's own processes do (BrokerRegistration, BrokerHeartbeat, DisableRemoteTopic,
  DeleteRemotePartitions, Envelope) is served only to ``cluster_principals`` — checked whenever that set is given,
  with or without the ACL authorizer — and answered CLUSTER_AUTHORIZATION_FAILED to anyone else. Without that set
  but with ACLs on, it needs CLUSTER_ACTION on the cluster (super users have it), as in Kafka. The cluster's
  principals are allowed everything else too (Kafka deployments make them super users).

Invariants:
* **A refused entry changes nothing.** It is taken out of the request before the handler runs.
* **Every refusal is audited**: ``authz.denied`` with the principal, the client's host, the API, the operation and
  the resource, at warning level.
* The decision (:func:`decide`) is pure: a function of the request, the image's ACLs and the policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.errors import ClusterAuthorizationFailed, KafkaError, TopicAuthorizationFailed
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import ConfigResourceType
from orchestrator.net.server import CLOSE_CONNECTION, Authentication, Handler
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request
from orchestrator.security.acls import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType
from orchestrator.security.authorizer import Authorizer
from orchestrator.security.scram import ScramCredential, ScramMechanism
from orchestrator.settings import SecuritySettings

from .refusals import refusal

log = structlog.get_logger(__name__)

Op = AclOperation
_TOPIC, _CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER

CLUSTER_ONLY = frozenset(
    {
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.DISABLE_REMOTE_TOPIC,
        ApiKey.DELETE_REMOTE_PARTITIONS,
        ApiKey.APPEND_REMOTE_LOG_METADATA,
        ApiKey.REPORT_COPY_STATES,
        ApiKey.ALTER_PARTITION,
        ApiKey.ENVELOPE,
    }
)
_ON_CLUSTER: Mapping[int, AclOperation] = {
    ApiKey.DESCRIBE_CLUSTER: Op.DESCRIBE,
    ApiKey.DESCRIBE_ACLS: Op.DESCRIBE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Op.DESCRIBE,
    ApiKey.UNREGISTER_BROKER: Op.ALTER,
    ApiKey.CREATE_ACLS: Op.ALTER,
    ApiKey.DELETE_ACLS: Op.ALTER,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Op.ALTER,
}
_LISTINGS: Mapping[int, str] = {ApiKey.METADATA: "topics", ApiKey.DESCRIBE_TIERED_STATE: "topics"}


@dataclass(frozen=True)
class AccessPolicy:
    """A node's ``[security]``: whether ACLs are checked, who is a super user, who the cluster's processes are."""

    authorizer: bool = False
    super_users: frozenset[str] = frozenset()
    cluster_principals: frozenset[str] = frozenset()

    @property
    def checks_anything(self) -> bool:
        return self.authorizer or bool(self.cluster_principals)


OPEN = AccessPolicy()


@dataclass(frozen=True)
class Denial:
    api: str
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str


@dataclass(frozen=True)
class Decision:
    """What to do with one request: refuse it whole (``refuse``), or serve ``allowed`` (the request's body, less
    the refused entries, which ``denied`` holds in the request's shape with ``denied_error``)."""

    allowed: Mapping[str, Any] | None
    refuse: KafkaError | None = None
    denied: Mapping[str, Any] | None = None
    denied_error: KafkaError | None = None
    denials: tuple[Denial, ...] = ()
    visible: Callable[[str], bool] | None = None  # listings: which topic names the principal may see
    listed_all: bool = False


class _Check:
    """One principal's questions about one image."""

    def __init__(self, policy: AccessPolicy, authorizer: Authorizer, request: Request, api: str) -> None:
        self.policy, self.authorizer, self.request, self.api = policy, authorizer, request, api
        self.denials: list[Denial] = []
        self.trusted = request.principal in policy.cluster_principals

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.trusted or not self.policy.authorizer:
            return True
        ok = self.authorizer.authorize(self.request.principal, self.request.client_host, operation, resource_type, name)
        if not ok:
            self.denials.append(Denial(self.api, operation, resource_type, name))
        return ok

    def on_cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, _CLUSTER, CLUSTER_RESOURCE_NAME)


def decide(policy: AccessPolicy, authorizer: Authorizer, request: Request, image: MetadataImage) -> Decision:
    api_key, body, api = request.header.api_key, request.body, request.schema.name.removesuffix("Request")
    check = _Check(policy, authorizer, request, api)
    if api_key in CLUSTER_ONLY:
        if policy.cluster_principals:
            if check.trusted:
                return Decision(body)
            denial = Denial(api, Op.CLUSTER_ACTION, _CLUSTER, CLUSTER_RESOURCE_NAME)
            return Decision(None, refuse=_cluster_refusal(request), denials=(denial,))
        # No list of the cluster's principals: with ACLs on, CLUSTER_ACTION on the cluster decides (Kafka's rule; a
        # super user has it). Without it anyone could send an Envelope naming a super user as its client.
        if check.on_cluster(Op.CLUSTER_ACTION):
            return Decision(body)
        return Decision(None, refuse=_cluster_refusal(request), denials=tuple(check.denials))
    if api_key in _ON_CLUSTER:
        if check.on_cluster(_ON_CLUSTER[api_key]):
            return Decision(body)
        return Decision(None, refuse=_cluster_refusal(request), denials=tuple(check.denials))
    if api_key == ApiKey.INIT_PRODUCER_ID:
        if body.get("transactional_id") is not None or _may_write_idempotently(check, image):
            return Decision(body)  # a transactional id is refused by the handler: no transactions are served
        denial = Denial(api, Op.IDEMPOTENT_WRITE, _CLUSTER, CLUSTER_RESOURCE_NAME)
        return Decision(None, refuse=_cluster_refusal(request), denials=(denial,))
    if api_key in _LISTINGS:
        names = body.get(_LISTINGS[api_key])
        listed_all = names is None
        return Decision(body, visible=lambda name: check.allows(Op.DESCRIBE, _TOPIC, name), listed_all=listed_all)
    entries = _ENTRIES.get(api_key)
    if entries is None:
        return Decision(body)
    return entries(check, body, image)


def _may_write_idempotently(check: _Check, image: MetadataImage) -> bool:
    """Kafka 3's rule for InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on
    any topic (asked quietly: not having one of them is no refusal)."""
    if check.trusted or not check.policy.authorizer or _quietly(check, Op.IDEMPOTENT_WRITE):
        return True
    principal, host = check.request.principal, check.request.client_host
    return any(
        check.authorizer.authorize(principal, host, Op.WRITE, _TOPIC, topic.name) for topic in image.topics.values()
    )


def _cluster_refusal(request: Request) -> KafkaError:
    return ClusterAuthorizationFailed(
        f"{request.principal} may not {request.schema.name.removesuffix('Request')} on this cluster; "
        "an operator can grant it with `tieredctl acls add`"
    )


def _denied_text(request: Request, name: str | None = None) -> str:
    what = f"topic {name!r}" if name is not None else "this resource"
    return f"{request.principal} is not authorized for {what}; an operator can grant it with `tieredctl acls add`"


def _topic_name(image: MetadataImage, topic_id: Uuid) -> str:
    topic = image.topics.get(topic_id)
    return topic.name if topic is not None else str(topic_id)


def _split(
    check: _Check,
    body: Mapping[str, Any],
    list_field: str,
    allowed_entry: Callable[[Any], bool],
    error: KafkaError,
) -> Decision:
    entries = list(body.get(list_field) or [])
    keep = [allowed_entry(e) for e in entries]
    if all(keep):
        return Decision(body, denials=tuple(check.denials))
    allowed = {**body, list_field: [e for e, k in zip(entries, keep, strict=True) if k]}
    denied = {**body, list_field: [e for e, k in zip(entries, keep, strict=True) if not k]}
    return Decision(allowed, denied=denied, denied_error=error, denials=tuple(check.denials))


def _create_topics(check: _Check, body: Mapping[str, Any], _image: MetadataImage) -> Decision:
    may_create_any = check.policy.authorizer is False or check.trusted or _quietly(check, Op.CREATE)
    return _split(
        check,
        body,
        "topics",
        lambda t: may_create_any or check.allows(Op.CREATE, _TOPIC, t["name"]),
        TopicAuthorizationFailed(_denied_text(check.request)),
    )


def _quietly(check: _Check, operation: AclOperation) -> bool:
    """CREATE on the cluster covers every topic; not having it is no refusal (CREATE on the topic may allow it)."""
    return check.authorizer.authorize(
        check.request.principal, check.request.client_host, operation, _CLUSTER, CLUSTER_RESOURCE_NAME
    )


def _delete_topics(check: _Check, body: Mapping[str, Any], image: MetadataImage) -> Decision:
    error = TopicAuthorizationFailed(_denied_text(check.request))
    if body.get("topics"):

        def allowed(entry: Mapping[str, Any]) -> bool:
            name = entry.get("name") or _topic_name(image, entry["topic_id"])
            return check.allows(Op.DELETE, _TOPIC, name)

        return _split(check, body, "topics", allowed, error)
    return _split(check, body, "topic_names", lambda n: check.allows(Op.DELETE, _TOPIC, n), error)


def _create_partitions(check: _Check, body: Mapping[str, Any], _image: MetadataImage) -> Decision:
    error = TopicAuthorizationFailed(_denied_text(check.request))
    return _split(check, body, "topics", lambda t: check.allows(Op.ALTER, _TOPIC, t["name"]), error)


def _configs(operation: AclOperation) -> Callable[[_Check, Mapping[str, Any], MetadataImage], Decision]:
    def decide_configs(check: _Check, body: Mapping[str, Any], _image: MetadataImage) -> Decision:
        def allowed(resource: Mapping[str, Any]) -> bool:
            if resource["resource_type"] == ConfigResourceType.TOPIC:
                return check.allows(operation, _TOPIC, resource["resource_name"])
            return check.on_cluster(operation)

        error = TopicAuthorizationFailed(_denied_text(check.request))
        return _split(check, body, "resources", allowed, error)

    return decide_configs


def _records(operation: AclOperation, list_field: str, name_field: str) -> Callable[..., Decision]:
    """Produce, Fetch, ListOffsets: each topic entry needs ``operation`` on its topic."""

    def decide_records(check: _Check, body: Mapping[str, Any], _image: MetadataImage) -> Decision:
        error = TopicAuthorizationFailed(_denied_text(check.request))
        return _split(check, body, list_field, lambda t: check.allows(operation, _TOPIC, t[name_field]), error)

    return decide_records


def _epoch_end_offsets(check: _Check, body: Mapping[str, Any], _image: MetadataImage) -> Decision:
    """CLUSTER_ACTION on the cluster (asked quietly) covers every topic; else each topic needs DESCRIBE."""
    may_act_on_cluster = not check.policy.authorizer or check.trusted or _quietly(check, Op.CLUSTER_ACTION)
    error = TopicAuthorizationFailed(_denied_text(check.request))
    return _split(
        check, body, "topics", lambda t: may_act_on_cluster or check.allows(Op.DESCRIBE, _TOPIC, t["topic"]), error
    )


_ENTRIES: Mapping[int, Callable[[_Check, Mapping[str, Any], MetadataImage], Decision]] = {
    ApiKey.PRODUCE: _records(Op.WRITE, "topic_data", "name"),
    ApiKey.FETCH: _records(Op.READ, "topics", "topic"),
    ApiKey.LIST_OFFSETS: _records(Op.DESCRIBE, "topics", "name"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _epoch_end_offsets,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS),
    ApiKey.DESCRIBE_CONFIGS: _configs(Op.DESCRIBE_CONFIGS),
}

# Where each API's response lists its entries, for merging the refused ones back in.
_RESPONSE_LISTS: Mapping[int, str] = {
    ApiKey.PRODUCE: "responses",
    ApiKey.FETCH: "responses",
    ApiKey.LIST_OFFSETS: "topics",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "topics",
    ApiKey.CREATE_TOPICS: "topics",
    ApiKey.DELETE_TOPICS: "responses",
    ApiKey.CREATE_PARTITIONS: "results",
    ApiKey.ALTER_CONFIGS: "responses",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "responses",
    ApiKey.DESCRIBE_CONFIGS: "results",
}


@dataclass
class Gatekeeper:
    """Wraps a node's handlers so every request passes :func:`decide` first, against the node's current image."""

    policy: AccessPolicy
    image: Callable[[], MetadataImage]
    _cache: tuple[Iterable[object], Authorizer] | None = field(default=None, repr=False)

    def guard(self, api_key: int, handler: Handler) -> Handler:
        if not self.policy.checks_anything:
            return handler

        async def guarded(request: Request) -> Mapping[str, object]:
            return await self.serve(request, handler)

        return guarded

    def guard_all(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        return {key: self.guard(key, handler) for key, handler in handlers.items()}

    def authorizer(self, image: MetadataImage) -> Authorizer:
        """The authorizer of ``image``'s ACLs, rebuilt only when they changed."""
        acls = image.acls
        if self._cache is None or self._cache[0] is not acls:
            self._cache = (acls, Authorizer(acls.values(), super_users=self.policy.super_users))
        return self._cache[1]

    async def serve(self, request: Request, handler: Handler) -> Mapping[str, object]:
        image = self.image()
        decision = decide(self.policy, self.authorizer(image), request, image)
        for denial in decision.denials:
            log.warning(
                "authz.denied",
                principal=request.principal,
                host=request.client_host,
                api=denial.api,
                operation=denial.operation.name,
                resource_type=denial.resource_type.name,
                resource=denial.resource_name,
            )
        api_key, version = request.header.api_key, request.header.api_version
        if decision.refuse is not None:
            return refusal(api_key, version, request.body, decision.refuse)
        response: Mapping[str, object]
        if decision.denied is None:
            response = await handler(request)
        else:
            assert decision.denied_error is not None and decision.allowed is not None
            response = await _merged(request, handler, decision.allowed, decision.denied, decision.denied_error)
        if decision.visible is not None:
            response = _only_visible(response, decision.visible, listed_all=decision.listed_all, request=request)
        return response


async def _merged(
    request: Request,
    handler: Handler,
    allowed: Mapping[str, Any],
    denied: Mapping[str, Any],
    error: KafkaError,
) -> Mapping[str, object]:
    api_key, version = request.header.api_key, request.header.api_version
    list_field = _RESPONSE_LISTS[api_key]
    refused = refusal(api_key, version, denied, error)
    if api_key == ApiKey.PRODUCE and request.body.get("acks") == 0:
        if allowed.get("topic_data"):
            await handler(dataclasses.replace(request, body=dict(allowed)))
        return CLOSE_CONNECTION  # an acks=0 produce that failed anywhere: the producer must notice
    if not any(allowed.get(f) for f in ("topics", "topic_names", "resources", "topic_data")):
        return refused
    served = dict(await handler(dataclasses.replace(request, body=dict(allowed))))
    served[list_field] = [*served[list_field], *refused[list_field]]  # type: ignore[misc]
    return served


def _only_visible(
    response: Mapping[str, object], visible: Callable[[str], bool], *, listed_all: bool, request: Request
) -> Mapping[str, object]:
    topics = response.get("topics")
    if not isinstance(topics, list):
        return response
    kept: list[Any] = []
    for topic in topics:
        name = topic.get("name")
        if name is None or visible(name):
            kept.append(topic)
        elif not listed_all:
            kept.append(
                {
                    **topic,
                    "error_code": TopicAuthorizationFailed.code,
                    "partitions": [],
                    **({"topic_id": ZERO_UUID} if "topic_id" in topic else {}),
                    **({"error_message": _denied_text(request, name)} if "error_message" in topic else {}),
                }
            )
    return {**response, "topics": kept}


def node_access(security: SecuritySettings, image: Callable[[], MetadataImage]) -> tuple[Authentication, Gatekeeper]:
    """A node's server-side security from its ``[security]`` settings: the logins it accepts (SCRAM credentials
    read from its current metadata image) and the gate in front of its handlers."""

    def credentials(mechanism: str, user: str) -> ScramCredential | None:
        return image().scram_credential(user, ScramMechanism.from_name(mechanism))

    authentication = Authentication(sasl_mechanisms=security.sasl_mechanisms, credentials=credentials)
    policy = AccessPolicy(
        authorizer=security.authorizer,
        super_users=frozenset(security.super_users),
        cluster_principals=frozenset(security.cluster_principals),
    )
    return authentication, Gatekeeper(policy, image)
