"""The admin calls of a session: topics, their configs, tiering and its status, and the broker lifecycle, each one
request to the active controller (Kafka's admin APIs, and our DescribeTieredState and UnregisterBroker).

Invariants:

* An error in an answer is raised as its typed Kafka error with the controller's message (:func:`check`), except
  in a bulk change, where each topic is answered on its own (:class:`TopicChange`) and only a failure of a whole
  request is raised.
* Disabling tiering is one config change, written once (:func:`disablement_configs`) for one topic and for many:
  ``remote.storage.enable=false`` with the policy, as KIP-950 defines it.
* Describes are sent as idempotent (a timeout is retried by the admin client); changes are not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.client.answers import check
from orchestrator.client.session import ClientSession
from orchestrator.client.views import RemoteDeletionStatus, TieringStatus, remote_deletions, tiering_statuses
from orchestrator.errors import UnknownServerError, UnknownTopicOrPartition, error_name
from orchestrator.ids import Uuid
from orchestrator.metadata.records import ConfigResourceType
from orchestrator.metadata.topic_configs import REMOTE_LOG_DISABLE_POLICY, REMOTE_STORAGE_ENABLE, AlterConfigOp
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey

BULK_RESOURCES = 1000  # topics one IncrementalAlterConfigs of a bulk change carries at most
DESCRIBE_BATCH = 500  # topics a DescribeConfigs request, when many are described


@dataclass(frozen=True, slots=True)
class TopicChange:
    """One topic's outcome in a bulk change: error code 0 (accepted) or the Kafka error and its message."""

    topic: str
    error_code: int
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == 0

    @property
    def error(self) -> str | None:
        return None if self.ok else error_name(self.error_code)


def disablement_configs(policy: str) -> dict[str, str]:
    """The config change that disables tiering on a topic with ``policy`` (retain or delete)."""
    return {REMOTE_STORAGE_ENABLE: "false", REMOTE_LOG_DISABLE_POLICY: policy}


def alter_config_ops(
    set_: Mapping[str, str], delete: Sequence[str] = ()
) -> list[m.IncrementalAlterConfigsRequestAlterableConfig]:
    """IncrementalAlterConfigs' operations: set each key of ``set_`` to its value, then delete each of ``delete``."""
    ops: list[m.IncrementalAlterConfigsRequestAlterableConfig] = [
        {"name": k, "config_operation": AlterConfigOp.SET, "value": v} for k, v in set_.items()
    ]
    ops += [{"name": k, "config_operation": AlterConfigOp.DELETE, "value": None} for k in delete]
    return ops


class AdminCalls(ClientSession):
    """Admin requests to the active controller."""

    async def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1, configs: Mapping[str, str] | None = None
    ) -> Uuid:
        config_entries: list[m.CreatableTopicConfig] = [{"name": k, "value": v} for k, v in (configs or {}).items()]
        new_topic: m.CreatableTopic = {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": replication_factor,
            "assignments": [],
            "configs": config_entries,
        }
        body: m.CreateTopicsRequest = {"topics": [new_topic], "timeout_ms": int(self.timeout_s * 1000)}
        resp = await self.admin.call(ApiKey.CREATE_TOPICS, (2, 7), body, m.CreateTopicsResponse)
        t = resp["topics"][0]
        check(t["error_code"], t.get("error_message"), f"creating topic '{name}'")
        tid = t["topic_id"]
        if tid.is_zero:  # CreateTopics below v7 does not return the id: ask Metadata
            tid = (await self.topic(name))["topic_id"]
        return tid

    async def delete_topic(self, name: str) -> None:
        timeout_ms = int(self.timeout_s * 1000)
        body: m.DeleteTopicsRequest = {"topics": [{"name": name}], "topic_names": [name], "timeout_ms": timeout_ms}
        resp = await self.admin.call(ApiKey.DELETE_TOPICS, (1, 6), body, m.DeleteTopicsResponse)
        r = resp["responses"][0]
        check(r["error_code"], r.get("error_message"), f"deleting topic '{name}'")

    async def add_partitions(self, name: str, total: int) -> None:
        body: m.CreatePartitionsRequest = {
            "topics": [{"name": name, "count": total, "assignments": None}],
            "timeout_ms": int(self.timeout_s * 1000),
        }
        resp = await self.admin.call(ApiKey.CREATE_PARTITIONS, (0, 3), body, m.CreatePartitionsResponse)
        r = resp["results"][0]
        check(r["error_code"], r.get("error_message"), f"adding partitions to '{name}'")

    async def alter_configs(self, name: str, set_: Mapping[str, str], delete: Sequence[str] = ()) -> None:
        resource: m.IncrementalAlterConfigsRequestAlterConfigsResource = {
            "resource_type": ConfigResourceType.TOPIC,
            "resource_name": name,
            "configs": alter_config_ops(set_, delete),
        }
        body: m.IncrementalAlterConfigsRequest = {"resources": [resource], "validate_only": False}
        resp = await self.admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse)
        r = resp["responses"][0]
        check(r["error_code"], r.get("error_message"), f"altering configs of '{name}'")

    async def describe_configs(self, name: str) -> dict[str, str | None]:
        r = (await self._describe_configs([name]))[0]
        check(r["error_code"], r.get("error_message"), f"describing configs of '{name}'")
        return {c["name"]: c["value"] for c in r["configs"]}

    async def describe_many_configs(self, names: Sequence[str]) -> dict[str, dict[str, str | None]]:
        """Each topic's configs, :data:`DESCRIBE_BATCH` topics a DescribeConfigs request; a topic the cluster no
        longer has (UNKNOWN_TOPIC_OR_PARTITION: deleted since it was listed) is left out, any other error raised."""
        out: dict[str, dict[str, str | None]] = {}
        for i in range(0, len(names), DESCRIBE_BATCH):
            for r in await self._describe_configs(names[i : i + DESCRIBE_BATCH]):
                if r["error_code"] == UnknownTopicOrPartition.code:
                    continue
                check(r["error_code"], r.get("error_message"), f"describing configs of '{r['resource_name']}'")
                out[r["resource_name"]] = {c["name"]: c["value"] for c in r["configs"]}
        return out

    async def _describe_configs(self, names: Sequence[str]) -> list[m.DescribeConfigsResult]:
        resources: list[m.DescribeConfigsResource] = [
            {"resource_type": ConfigResourceType.TOPIC, "resource_name": name, "configuration_keys": None}
            for name in names
        ]
        body: m.DescribeConfigsRequest = {
            "resources": resources,
            "include_synonyms": False,
            "include_documentation": False,
        }
        resp = await self.admin.call(ApiKey.DESCRIBE_CONFIGS, (1, 4), body, m.DescribeConfigsResponse, idempotent=True)
        return resp["results"]

    async def internal_topics(self) -> frozenset[str]:
        """The names of the cluster's internal topics, as Metadata tells them (``is_internal``), as Kafka's admin
        clients learn them to leave them out of a listing."""
        metadata = await self.metadata()
        return frozenset(t["name"] for t in metadata["topics"] if t["is_internal"] and t["name"])

    async def describe_tiered_state(self, names: Sequence[str] | None = None) -> m.DescribeTieredStateResponse:
        """DescribeTieredState of the topics ``names`` (default: every topic), and of the deleted topics of those
        names whose remote data is still being deleted."""
        body: m.DescribeTieredStateRequest = {"topics": None if names is None else list(names)}
        return await self.admin.call(
            ApiKey.DESCRIBE_TIERED_STATE, (0, 0), body, m.DescribeTieredStateResponse, idempotent=True
        )

    async def tiering_status(self, names: Sequence[str] | None = None) -> list[TieringStatus]:
        """The tiered state of the topics ``names`` (default: every topic), with the brokers owing its disablement."""
        return tiering_statuses(await self.describe_tiered_state(names))

    async def remote_deletions(self, names: Sequence[str] | None = None) -> list[RemoteDeletionStatus]:
        """Deleted topics (named ``names``, if given) whose remote data is still being deleted."""
        return remote_deletions(await self.describe_tiered_state(names))

    async def disable_tiering(self, name: str, policy: str = "retain") -> None:
        await self.alter_configs(name, disablement_configs(policy))

    async def disable_tiering_many(self, names: Sequence[str], policy: str = "retain") -> list[TopicChange]:
        """Disable tiered storage on every topic of ``names`` (bulk): one IncrementalAlterConfigs per
        :data:`BULK_RESOURCES` topics, each topic answered on its own (one refused changes nothing of the others).
        Returns each topic's outcome in the order asked; raises only for a failure of a whole request."""
        ops = alter_config_ops(disablement_configs(policy))
        out: list[TopicChange] = []
        for start in range(0, len(names), BULK_RESOURCES):
            chunk = names[start : start + BULK_RESOURCES]
            resources: list[m.IncrementalAlterConfigsRequestAlterConfigsResource] = [
                {"resource_type": ConfigResourceType.TOPIC, "resource_name": n, "configs": ops} for n in chunk
            ]
            body: m.IncrementalAlterConfigsRequest = {"resources": resources, "validate_only": False}
            resp = await self.admin.call(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body, m.IncrementalAlterConfigsResponse
            )
            answers = {r["resource_name"]: r for r in resp["responses"]}
            for n in chunk:
                r = answers.get(n)
                if r is None:
                    out.append(TopicChange(n, UnknownServerError.code, "the controller's answer has no entry for it"))
                else:
                    out.append(TopicChange(n, r["error_code"], r.get("error_message")))
        return out

    async def enable_tiering(self, name: str) -> None:
        await self.alter_configs(name, {REMOTE_STORAGE_ENABLE: "true"}, delete=[])

    async def decommission_broker(self, broker_id: int) -> None:
        body: m.UnregisterBrokerRequest = {"broker_id": broker_id}
        resp = await self.admin.call(ApiKey.UNREGISTER_BROKER, (0, 0), body, m.UnregisterBrokerResponse)
        check(resp["error_code"], resp.get("error_message"), f"decommissioning broker {broker_id}")
