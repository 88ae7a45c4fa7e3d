"""Typed message bodies. GENERATED from the schemas by ``orchestrator.protocol.typegen``: do not edit.

Each class is the shape of a decoded body (every key present) and of a body being built (keys may be left out for
their defaults); see :mod:`orchestrator.protocol.typegen` for the mapping.
"""

from __future__ import annotations

from typing import TypedDict

from orchestrator.ids import Uuid


class AbortedTransaction(TypedDict, total=False):
    """A struct of FetchResponse."""

    producer_id: int
    first_offset: int


class AclCreation(TypedDict, total=False):
    """A struct of CreateAclsRequest."""

    resource_type: int
    resource_name: str
    resource_pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AclCreationResult(TypedDict, total=False):
    """A struct of CreateAclsResponse."""

    error_code: int
    error_message: str | None


class AclDescription(TypedDict, total=False):
    """A struct of DescribeAclsResponse."""

    principal: str
    host: str
    operation: int
    permission_type: int


class AlterConfigsRequestAlterConfigsResource(TypedDict, total=False):
    """A struct of AlterConfigsRequest."""

    resource_type: int
    resource_name: str
    configs: list[AlterConfigsRequestAlterableConfig]


class AlterConfigsRequestAlterableConfig(TypedDict, total=False):
    """A struct of AlterConfigsRequest."""

    name: str
    value: str | None


class AlterConfigsResourceResponse(TypedDict, total=False):
    """A struct of AlterConfigsResponse."""

    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str


class AlterPartitionRequestPartitionData(TypedDict, total=False):
    """A struct of AlterPartitionRequest."""

    partition_index: int
    leader_epoch: int
    new_isr: list[int]
    new_isr_with_epochs: list[BrokerState]
    leader_recovery_state: int
    partition_epoch: int


class AlterPartitionRequestTopicData(TypedDict, total=False):
    """A struct of AlterPartitionRequest."""

    topic_id: Uuid
    partitions: list[AlterPartitionRequestPartitionData]


class AlterPartitionResponsePartitionData(TypedDict, total=False):
    """A struct of AlterPartitionResponse."""

    partition_index: int
    error_code: int
    leader_id: int
    leader_epoch: int
    isr: list[int]
    leader_recovery_state: int
    partition_epoch: int


class AlterPartitionResponseTopicData(TypedDict, total=False):
    """A struct of AlterPartitionResponse."""

    topic_id: Uuid
    partitions: list[AlterPartitionResponsePartitionData]


class AlterUserScramCredentialsResult(TypedDict, total=False):
    """A struct of AlterUserScramCredentialsResponse."""

    user: str
    error_code: int
    error_message: str | None


class ApiVersion(TypedDict, total=False):
    """A struct of ApiVersionsResponse."""

    api_key: int
    min_version: int
    max_version: int


class BatchIndexAndErrorMessage(TypedDict, total=False):
    """A struct of ProduceResponse."""

    batch_index: int
    batch_index_error_message: str | None


class BrokerEndpoint(TypedDict, total=False):
    """A struct of RegisterBrokerRecord."""

    name: str
    host: str
    port: int
    security_protocol: int


class BrokerFeature(TypedDict, total=False):
    """A struct of RegisterBrokerRecord."""

    name: str
    min_supported_version: int
    max_supported_version: int


class BrokerState(TypedDict, total=False):
    """A struct of AlterPartitionRequest."""

    broker_id: int
    broker_epoch: int


class CreatableReplicaAssignment(TypedDict, total=False):
    """A struct of CreateTopicsRequest."""

    partition_index: int
    broker_ids: list[int]


class CreatableTopic(TypedDict, total=False):
    """A struct of CreateTopicsRequest."""

    name: str
    num_partitions: int
    replication_factor: int
    assignments: list[CreatableReplicaAssignment]
    configs: list[CreatableTopicConfig]


class CreatableTopicConfig(TypedDict, total=False):
    """A struct of CreateTopicsRequest."""

    name: str
    value: str | None


class CreatableTopicConfigs(TypedDict, total=False):
    """A struct of CreateTopicsResponse."""

    name: str
    value: str | None
    read_only: bool
    config_source: int
    is_sensitive: bool


class CreatableTopicResult(TypedDict, total=False):
    """A struct of CreateTopicsResponse."""

    name: str
    topic_id: Uuid
    error_code: int
    error_message: str | None
    topic_config_error_code: int
    num_partitions: int
    replication_factor: int
    configs: list[CreatableTopicConfigs] | None


class CreatePartitionsAssignment(TypedDict, total=False):
    """A struct of CreatePartitionsRequest."""

    broker_ids: list[int]


class CreatePartitionsTopic(TypedDict, total=False):
    """A struct of CreatePartitionsRequest."""

    name: str
    count: int
    assignments: list[CreatePartitionsAssignment] | None


class CreatePartitionsTopicResult(TypedDict, total=False):
    """A struct of CreatePartitionsResponse."""

    name: str
    error_code: int
    error_message: str | None


class CredentialInfo(TypedDict, total=False):
    """A struct of DescribeUserScramCredentialsResponse."""

    mechanism: int
    iterations: int


class DeletableTopicResult(TypedDict, total=False):
    """A struct of DeleteTopicsResponse."""

    name: str | None
    topic_id: Uuid
    error_code: int
    error_message: str | None


class DeleteAclsFilter(TypedDict, total=False):
    """A struct of DeleteAclsRequest."""

    resource_type_filter: int
    resource_name_filter: str | None
    pattern_type_filter: int
    principal_filter: str | None
    host_filter: str | None
    operation: int
    permission_type: int


class DeleteAclsFilterResult(TypedDict, total=False):
    """A struct of DeleteAclsResponse."""

    error_code: int
    error_message: str | None
    matching_acls: list[DeleteAclsMatchingAcl]


class DeleteAclsMatchingAcl(TypedDict, total=False):
    """A struct of DeleteAclsResponse."""

    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class DeleteTopicState(TypedDict, total=False):
    """A struct of DeleteTopicsRequest."""

    name: str | None
    topic_id: Uuid


class DeletingBroker(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    broker_id: int
    partitions: list[int]
    attempts: int
    last_error: str | None
    next_attempt_ms: int


class DeletingTopic(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    name: str
    topic_id: Uuid
    partitions_remaining: list[int]
    segments_remaining: int
    bytes_remaining: int
    brokers: list[DeletingBroker]


class DescribeAclsResource(TypedDict, total=False):
    """A struct of DescribeAclsResponse."""

    resource_type: int
    resource_name: str
    pattern_type: int
    acls: list[AclDescription]


class DescribeClusterBroker(TypedDict, total=False):
    """A struct of DescribeClusterResponse."""

    broker_id: int
    host: str
    port: int
    rack: str | None


class DescribeConfigsResource(TypedDict, total=False):
    """A struct of DescribeConfigsRequest."""

    resource_type: int
    resource_name: str
    configuration_keys: list[str] | None


class DescribeConfigsResourceResult(TypedDict, total=False):
    """A struct of DescribeConfigsResponse."""

    name: str
    value: str | None
    read_only: bool
    config_source: int
    is_default: bool
    is_sensitive: bool
    synonyms: list[DescribeConfigsSynonym]
    config_type: int
    documentation: str | None


class DescribeConfigsResult(TypedDict, total=False):
    """A struct of DescribeConfigsResponse."""

    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: list[DescribeConfigsResourceResult]


class DescribeConfigsSynonym(TypedDict, total=False):
    """A struct of DescribeConfigsResponse."""

    name: str
    value: str | None
    source: int


class DescribeUserScramCredentialsResult(TypedDict, total=False):
    """A struct of DescribeUserScramCredentialsResponse."""

    user: str
    error_code: int
    error_message: str | None
    credential_infos: list[CredentialInfo]


class DescribedTopic(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    name: str
    topic_id: Uuid
    error_code: int
    error_message: str | None
    tiered_state: int
    tiered_epoch: int
    policy: int
    partition_count: int
    pending_brokers: list[PendingBroker]
    acknowledged_brokers: int
    segments_deleted: int
    segments_remaining: int
    owed_partitions: list[OwedPartition]
    copies: list[PartitionCopy]


class DisableTopic(TypedDict, total=False):
    """A struct of DisableRemoteTopicRequest."""

    topic_id: Uuid
    tiered_epoch: int
    policy: int
    assigned_partitions: list[int]


class DisableTopicResult(TypedDict, total=False):
    """A struct of DisableRemoteTopicResponse."""

    topic_id: Uuid
    error_code: int
    error_message: str | None
    status: int
    tiered_epoch: int
    partitions_total: int
    partitions_done: int
    segments_deleted: int
    segments_remaining: int


class Feature(TypedDict, total=False):
    """A struct of BrokerRegistrationRequest."""

    name: str
    min_supported_version: int
    max_supported_version: int


class FetchPartition(TypedDict, total=False):
    """A struct of FetchRequest."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchResponseEpochEndOffset(TypedDict, total=False):
    """A struct of FetchResponse."""

    epoch: int
    end_offset: int


class FetchResponsePartitionData(TypedDict, total=False):
    """A struct of FetchResponse."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    diverging_epoch: FetchResponseEpochEndOffset
    current_leader: LeaderIdAndEpoch
    snapshot_id: SnapshotId
    aborted_transactions: list[AbortedTransaction] | None
    preferred_read_replica: int
    records: bytes | None


class FetchTopic(TypedDict, total=False):
    """A struct of FetchRequest."""

    topic: str
    partitions: list[FetchPartition]


class FetchableTopicResponse(TypedDict, total=False):
    """A struct of FetchResponse."""

    topic: str
    partitions: list[FetchResponsePartitionData]


class FinalizedFeatureKey(TypedDict, total=False):
    """A struct of ApiVersionsResponse."""

    name: str
    max_version_level: int
    min_version_level: int


class ForgottenTopic(TypedDict, total=False):
    """A struct of FetchRequest."""

    topic: str
    partitions: list[int]


class IncrementalAlterConfigsRequestAlterConfigsResource(TypedDict, total=False):
    """A struct of IncrementalAlterConfigsRequest."""

    resource_type: int
    resource_name: str
    configs: list[IncrementalAlterConfigsRequestAlterableConfig]


class IncrementalAlterConfigsRequestAlterableConfig(TypedDict, total=False):
    """A struct of IncrementalAlterConfigsRequest."""

    name: str
    config_operation: int
    value: str | None


class LeaderIdAndEpoch(TypedDict, total=False):
    """A struct of FetchResponse."""

    leader_id: int
    leader_epoch: int


class ListOffsetsPartition(TypedDict, total=False):
    """A struct of ListOffsetsRequest."""

    partition_index: int
    current_leader_epoch: int
    timestamp: int


class ListOffsetsPartitionResponse(TypedDict, total=False):
    """A struct of ListOffsetsResponse."""

    partition_index: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int


class ListOffsetsTopic(TypedDict, total=False):
    """A struct of ListOffsetsRequest."""

    name: str
    partitions: list[ListOffsetsPartition]


class ListOffsetsTopicResponse(TypedDict, total=False):
    """A struct of ListOffsetsResponse."""

    name: str
    partitions: list[ListOffsetsPartitionResponse]


class Listener(TypedDict, total=False):
    """A struct of BrokerRegistrationRequest."""

    name: str
    host: str
    port: int
    security_protocol: int


class MetadataRequestTopic(TypedDict, total=False):
    """A struct of MetadataRequest."""

    topic_id: Uuid
    name: str | None


class MetadataResponseBroker(TypedDict, total=False):
    """A struct of MetadataResponse."""

    node_id: int
    host: str
    port: int
    rack: str | None


class MetadataResponsePartition(TypedDict, total=False):
    """A struct of MetadataResponse."""

    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]


class MetadataResponseTopic(TypedDict, total=False):
    """A struct of MetadataResponse."""

    error_code: int
    name: str | None
    topic_id: Uuid
    is_internal: bool
    partitions: list[MetadataResponsePartition]
    topic_authorized_operations: int


class OffsetForLeaderEpochResponseEpochEndOffset(TypedDict, total=False):
    """A struct of OffsetForLeaderEpochResponse."""

    error_code: int
    partition: int
    leader_epoch: int
    end_offset: int


class OffsetForLeaderPartition(TypedDict, total=False):
    """A struct of OffsetForLeaderEpochRequest."""

    partition: int
    current_leader_epoch: int
    leader_epoch: int


class OffsetForLeaderTopic(TypedDict, total=False):
    """A struct of OffsetForLeaderEpochRequest."""

    topic: str
    partitions: list[OffsetForLeaderPartition]


class OffsetForLeaderTopicResult(TypedDict, total=False):
    """A struct of OffsetForLeaderEpochResponse."""

    topic: str
    partitions: list[OffsetForLeaderEpochResponseEpochEndOffset]


class OwedPartition(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    partition_id: int
    leader: int
    assigned_broker: int
    segments_remaining: int
    bytes_remaining: int


class PartitionCopy(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    partition_id: int
    broker_id: int
    in_flight_since_ms: int
    in_flight: str | None
    stalled: bool
    last_error: str | None
    last_error_ms: int
    failed_passes: int


class PartitionCopyState(TypedDict, total=False):
    """A struct of ReportCopyStatesRequest."""

    topic_id: Uuid
    partition: int
    in_flight_since_ms: int
    in_flight: str | None
    stalled: bool
    last_error: str | None
    last_error_ms: int
    failed_passes: int


class PartitionProduceData(TypedDict, total=False):
    """A struct of ProduceRequest."""

    index: int
    records: bytes | None


class PartitionProduceResponse(TypedDict, total=False):
    """A struct of ProduceResponse."""

    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: list[BatchIndexAndErrorMessage]
    error_message: str | None


class PendingBroker(TypedDict, total=False):
    """A struct of DescribeTieredStateResponse."""

    broker_id: int
    attempts: int
    last_error: str | None
    last_attempt_ms: int
    fenced: bool
    stalled: bool
    next_attempt_ms: int
    attempts_without_progress: int


class RemoteLogSegmentIdEntry(TypedDict, total=False):
    """A struct of RemoteLogSegmentMetadataRecord."""

    topic_id_partition: TopicIdPartitionEntry
    id: Uuid


class ScramCredentialDeletion(TypedDict, total=False):
    """A struct of AlterUserScramCredentialsRequest."""

    name: str
    mechanism: int


class ScramCredentialUpsertion(TypedDict, total=False):
    """A struct of AlterUserScramCredentialsRequest."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class SegmentLeaderEpochEntry(TypedDict, total=False):
    """A struct of RemoteLogSegmentMetadataRecord."""

    leader_epoch: int
    offset: int


class SnapshotId(TypedDict, total=False):
    """A struct of FetchResponse."""

    end_offset: int
    epoch: int


class SupportedFeatureKey(TypedDict, total=False):
    """A struct of ApiVersionsResponse."""

    name: str
    min_version: int
    max_version: int


class TopicIdPartitionEntry(TypedDict, total=False):
    """A struct of RemoteLogSegmentMetadataRecord."""

    name: str
    id: Uuid
    partition: int


class TopicProduceData(TypedDict, total=False):
    """A struct of ProduceRequest."""

    name: str
    partition_data: list[PartitionProduceData]


class TopicProduceResponse(TypedDict, total=False):
    """A struct of ProduceResponse."""

    name: str
    partition_responses: list[PartitionProduceResponse]


class UserName(TypedDict, total=False):
    """A struct of DescribeUserScramCredentialsRequest."""

    name: str


class AccessControlEntryRecord(TypedDict, total=False):
    """AccessControlEntryRecord (metadata, api key 18; versions 0-0)."""

    id: Uuid
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AlterConfigsRequest(TypedDict, total=False):
    """AlterConfigsRequest (request, api key 33; versions 0-2)."""

    resources: list[AlterConfigsRequestAlterConfigsResource]
    validate_only: bool


class AlterConfigsResponse(TypedDict, total=False):
    """AlterConfigsResponse (response, api key 33; versions 0-2)."""

    throttle_time_ms: int
    responses: list[AlterConfigsResourceResponse]


class AlterPartitionRequest(TypedDict, total=False):
    """AlterPartitionRequest (request, api key 56; versions 2-3)."""

    broker_id: int
    broker_epoch: int
    topics: list[AlterPartitionRequestTopicData]


class AlterPartitionResponse(TypedDict, total=False):
    """AlterPartitionResponse (response, api key 56; versions 2-3)."""

    throttle_time_ms: int
    error_code: int
    topics: list[AlterPartitionResponseTopicData]


class AlterUserScramCredentialsRequest(TypedDict, total=False):
    """AlterUserScramCredentialsRequest (request, api key 51; versions 0-0)."""

    deletions: list[ScramCredentialDeletion]
    upsertions: list[ScramCredentialUpsertion]


class AlterUserScramCredentialsResponse(TypedDict, total=False):
    """AlterUserScramCredentialsResponse (response, api key 51; versions 0-0)."""

    throttle_time_ms: int
    results: list[AlterUserScramCredentialsResult]


class ApiVersionsRequest(TypedDict, total=False):
    """ApiVersionsRequest (request, api key 18; versions 0-3)."""

    client_software_name: str
    client_software_version: str


class ApiVersionsResponse(TypedDict, total=False):
    """ApiVersionsResponse (response, api key 18; versions 0-3)."""

    error_code: int
    api_keys: list[ApiVersion]
    throttle_time_ms: int
    supported_features: list[SupportedFeatureKey]
    finalized_features_epoch: int
    finalized_features: list[FinalizedFeatureKey]
    zk_migration_ready: bool


class AppendRemoteLogMetadataRequest(TypedDict, total=False):
    """AppendRemoteLogMetadataRequest (request, api key 10955; versions 0-0)."""

    broker_id: int
    records: list[bytes]


class AppendRemoteLogMetadataResponse(TypedDict, total=False):
    """AppendRemoteLogMetadataResponse (response, api key 10955; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    offsets: list[int]


class BrokerHeartbeatRequest(TypedDict, total=False):
    """BrokerHeartbeatRequest (request, api key 63; versions 0-1)."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    offline_log_dirs: list[Uuid]


class BrokerHeartbeatResponse(TypedDict, total=False):
    """BrokerHeartbeatResponse (response, api key 63; versions 0-1)."""

    throttle_time_ms: int
    error_code: int
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class BrokerRegistrationChangeRecord(TypedDict, total=False):
    """BrokerRegistrationChangeRecord (metadata, api key 17; versions 0-2)."""

    broker_id: int
    broker_epoch: int
    fenced: int
    in_controlled_shutdown: int
    log_dirs: list[Uuid]


class BrokerRegistrationRequest(TypedDict, total=False):
    """BrokerRegistrationRequest (request, api key 62; versions 0-4)."""

    broker_id: int
    cluster_id: str
    incarnation_id: Uuid
    listeners: list[Listener]
    features: list[Feature]
    rack: str | None
    is_migrating_zk_broker: bool
    log_dirs: list[Uuid]
    previous_broker_epoch: int


class BrokerRegistrationResponse(TypedDict, total=False):
    """BrokerRegistrationResponse (response, api key 62; versions 0-4)."""

    throttle_time_ms: int
    error_code: int
    broker_epoch: int


class ConfigRecord(TypedDict, total=False):
    """ConfigRecord (metadata, api key 4; versions 0-0)."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None


class CreateAclsRequest(TypedDict, total=False):
    """CreateAclsRequest (request, api key 30; versions 1-3)."""

    creations: list[AclCreation]


class CreateAclsResponse(TypedDict, total=False):
    """CreateAclsResponse (response, api key 30; versions 1-3)."""

    throttle_time_ms: int
    results: list[AclCreationResult]


class CreatePartitionsRequest(TypedDict, total=False):
    """CreatePartitionsRequest (request, api key 37; versions 0-3)."""

    topics: list[CreatePartitionsTopic]
    timeout_ms: int
    validate_only: bool


class CreatePartitionsResponse(TypedDict, total=False):
    """CreatePartitionsResponse (response, api key 37; versions 0-3)."""

    throttle_time_ms: int
    results: list[CreatePartitionsTopicResult]


class CreateTopicsRequest(TypedDict, total=False):
    """CreateTopicsRequest (request, api key 19; versions 2-7)."""

    topics: list[CreatableTopic]
    timeout_ms: int
    validate_only: bool


class CreateTopicsResponse(TypedDict, total=False):
    """CreateTopicsResponse (response, api key 19; versions 2-7)."""

    throttle_time_ms: int
    topics: list[CreatableTopicResult]


class DeleteAclsRequest(TypedDict, total=False):
    """DeleteAclsRequest (request, api key 31; versions 1-3)."""

    filters: list[DeleteAclsFilter]


class DeleteAclsResponse(TypedDict, total=False):
    """DeleteAclsResponse (response, api key 31; versions 1-3)."""

    throttle_time_ms: int
    filter_results: list[DeleteAclsFilterResult]


class DeleteRemotePartitionsRequest(TypedDict, total=False):
    """DeleteRemotePartitionsRequest (request, api key 10954; versions 0-0)."""

    topic_id: Uuid
    topic_name: str
    partitions: list[int]
    controller_epoch: int
    broker_epoch: int


class DeleteRemotePartitionsResponse(TypedDict, total=False):
    """DeleteRemotePartitionsResponse (response, api key 10954; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    status: int
    partitions_total: int
    partitions_done: int
    segments_deleted: int
    segments_remaining: int


class DeleteTopicsRequest(TypedDict, total=False):
    """DeleteTopicsRequest (request, api key 20; versions 1-6)."""

    topics: list[DeleteTopicState]
    topic_names: list[str]
    timeout_ms: int


class DeleteTopicsResponse(TypedDict, total=False):
    """DeleteTopicsResponse (response, api key 20; versions 1-6)."""

    throttle_time_ms: int
    responses: list[DeletableTopicResult]


class DescribeAclsRequest(TypedDict, total=False):
    """DescribeAclsRequest (request, api key 29; versions 1-3)."""

    resource_type_filter: int
    resource_name_filter: str | None
    pattern_type_filter: int
    principal_filter: str | None
    host_filter: str | None
    operation: int
    permission_type: int


class DescribeAclsResponse(TypedDict, total=False):
    """DescribeAclsResponse (response, api key 29; versions 1-3)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    resources: list[DescribeAclsResource]


class DescribeClusterRequest(TypedDict, total=False):
    """DescribeClusterRequest (request, api key 60; versions 0-1)."""

    include_cluster_authorized_operations: bool
    endpoint_type: int


class DescribeClusterResponse(TypedDict, total=False):
    """DescribeClusterResponse (response, api key 60; versions 0-1)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    endpoint_type: int
    cluster_id: str
    controller_id: int
    brokers: list[DescribeClusterBroker]
    cluster_authorized_operations: int


class DescribeConfigsRequest(TypedDict, total=False):
    """DescribeConfigsRequest (request, api key 32; versions 1-4)."""

    resources: list[DescribeConfigsResource]
    include_synonyms: bool
    include_documentation: bool


class DescribeConfigsResponse(TypedDict, total=False):
    """DescribeConfigsResponse (response, api key 32; versions 1-4)."""

    throttle_time_ms: int
    results: list[DescribeConfigsResult]


class DescribeTieredStateRequest(TypedDict, total=False):
    """DescribeTieredStateRequest (request, api key 10951; versions 0-0)."""

    topics: list[str] | None


class DescribeTieredStateResponse(TypedDict, total=False):
    """DescribeTieredStateResponse (response, api key 10951; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    topics: list[DescribedTopic]
    deleting_topics: list[DeletingTopic]


class DescribeUserScramCredentialsRequest(TypedDict, total=False):
    """DescribeUserScramCredentialsRequest (request, api key 50; versions 0-0)."""

    users: list[UserName] | None


class DescribeUserScramCredentialsResponse(TypedDict, total=False):
    """DescribeUserScramCredentialsResponse (response, api key 50; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    results: list[DescribeUserScramCredentialsResult]


class DisableRemoteTopicRequest(TypedDict, total=False):
    """DisableRemoteTopicRequest (request, api key 10950; versions 0-1)."""

    partition_id: int
    topic_id: Uuid
    tiered_epoch: int
    controller_epoch: int
    broker_epoch: int
    policy: int
    assigned_partitions: list[int]
    topics: list[DisableTopic]


class DisableRemoteTopicResponse(TypedDict, total=False):
    """DisableRemoteTopicResponse (response, api key 10950; versions 0-1)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None
    status: int
    tiered_epoch: int
    partitions_total: int
    partitions_done: int
    segments_deleted: int
    segments_remaining: int
    topics: list[DisableTopicResult]


class EnvelopeRequest(TypedDict, total=False):
    """EnvelopeRequest (request, api key 58; versions 0-0)."""

    request_data: bytes
    request_principal: bytes | None
    client_host_address: bytes


class EnvelopeResponse(TypedDict, total=False):
    """EnvelopeResponse (response, api key 58; versions 0-0)."""

    response_data: bytes | None
    error_code: int


class FenceBrokerRecord(TypedDict, total=False):
    """FenceBrokerRecord (metadata, api key 7; versions 0-0)."""

    id: int
    epoch: int


class FetchRequest(TypedDict, total=False):
    """FetchRequest (request, api key 1; versions 4-12)."""

    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str


class FetchResponse(TypedDict, total=False):
    """FetchResponse (response, api key 1; versions 4-12)."""

    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchableTopicResponse]


class IncrementalAlterConfigsRequest(TypedDict, total=False):
    """IncrementalAlterConfigsRequest (request, api key 44; versions 0-1)."""

    resources: list[IncrementalAlterConfigsRequestAlterConfigsResource]
    validate_only: bool


class IncrementalAlterConfigsResponse(TypedDict, total=False):
    """IncrementalAlterConfigsResponse (response, api key 44; versions 0-1)."""

    throttle_time_ms: int
    responses: list[AlterConfigsResourceResponse]


class InitProducerIdRequest(TypedDict, total=False):
    """InitProducerIdRequest (request, api key 22; versions 0-4)."""

    transactional_id: str | None
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int


class InitProducerIdResponse(TypedDict, total=False):
    """InitProducerIdResponse (response, api key 22; versions 0-4)."""

    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


class ListOffsetsRequest(TypedDict, total=False):
    """ListOffsetsRequest (request, api key 2; versions 1-9)."""

    replica_id: int
    isolation_level: int
    topics: list[ListOffsetsTopic]


class ListOffsetsResponse(TypedDict, total=False):
    """ListOffsetsResponse (response, api key 2; versions 1-9)."""

    throttle_time_ms: int
    topics: list[ListOffsetsTopicResponse]


class MetadataRequest(TypedDict, total=False):
    """MetadataRequest (request, api key 3; versions 0-12)."""

    topics: list[MetadataRequestTopic] | None
    allow_auto_topic_creation: bool
    include_cluster_authorized_operations: bool
    include_topic_authorized_operations: bool


class MetadataResponse(TypedDict, total=False):
    """MetadataResponse (response, api key 3; versions 0-12)."""

    throttle_time_ms: int
    brokers: list[MetadataResponseBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataResponseTopic]
    cluster_authorized_operations: int


class OffsetForLeaderEpochRequest(TypedDict, total=False):
    """OffsetForLeaderEpochRequest (request, api key 23; versions 2-4)."""

    replica_id: int
    topics: list[OffsetForLeaderTopic]


class OffsetForLeaderEpochResponse(TypedDict, total=False):
    """OffsetForLeaderEpochResponse (response, api key 23; versions 2-4)."""

    throttle_time_ms: int
    topics: list[OffsetForLeaderTopicResult]


class PartitionChangeRecord(TypedDict, total=False):
    """PartitionChangeRecord (metadata, api key 5; versions 0-2)."""

    partition_id: int
    topic_id: Uuid
    isr: list[int] | None
    leader: int
    replicas: list[int] | None
    removing_replicas: list[int] | None
    adding_replicas: list[int] | None
    leader_recovery_state: int
    directories: list[Uuid] | None
    eligible_leader_replicas: list[int] | None
    last_known_elr: list[int] | None


class PartitionRecord(TypedDict, total=False):
    """PartitionRecord (metadata, api key 3; versions 0-2)."""

    partition_id: int
    topic_id: Uuid
    replicas: list[int]
    isr: list[int]
    removing_replicas: list[int]
    adding_replicas: list[int]
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int
    directories: list[Uuid]
    eligible_leader_replicas: list[int] | None
    last_known_elr: list[int] | None


class ProduceRequest(TypedDict, total=False):
    """ProduceRequest (request, api key 0; versions 3-9)."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


class ProduceResponse(TypedDict, total=False):
    """ProduceResponse (response, api key 0; versions 3-9)."""

    responses: list[TopicProduceResponse]
    throttle_time_ms: int


class RegisterBrokerRecord(TypedDict, total=False):
    """RegisterBrokerRecord (metadata, api key 0; versions 0-3)."""

    broker_id: int
    is_migrating_zk_broker: bool
    incarnation_id: Uuid
    broker_epoch: int
    end_points: list[BrokerEndpoint]
    features: list[BrokerFeature]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: list[Uuid]


class RemoteLogSegmentMetadataRecord(TypedDict, total=False):
    """RemoteLogSegmentMetadataRecord (metadata, api key 0; versions 0-1)."""

    remote_log_segment_id: RemoteLogSegmentIdEntry
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: list[SegmentLeaderEpochEntry]
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    remote_log_segment_state: int
    txn_index_empty: bool
    broker_leader_epoch: int
    tiered_epoch: int


class RemoteLogSegmentMetadataUpdateRecord(TypedDict, total=False):
    """RemoteLogSegmentMetadataUpdateRecord (metadata, api key 1; versions 0-1)."""

    remote_log_segment_id: RemoteLogSegmentIdEntry
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None
    remote_log_segment_state: int
    broker_leader_epoch: int
    end_offset: int
    tiered_epoch: int


class RemotePartitionDeleteMetadataRecord(TypedDict, total=False):
    """RemotePartitionDeleteMetadataRecord (metadata, api key 2; versions 0-1)."""

    topic_id_partition: TopicIdPartitionEntry
    broker_id: int
    event_timestamp_ms: int
    remote_partition_delete_state: int
    broker_leader_epoch: int
    end_offset: int
    tiered_epoch: int


class RemoveAccessControlEntryRecord(TypedDict, total=False):
    """RemoveAccessControlEntryRecord (metadata, api key 19; versions 0-0)."""

    id: Uuid


class RemoveTopicRecord(TypedDict, total=False):
    """RemoveTopicRecord (metadata, api key 9; versions 0-0)."""

    topic_id: Uuid


class RemoveUserScramCredentialRecord(TypedDict, total=False):
    """RemoveUserScramCredentialRecord (metadata, api key 22; versions 0-0)."""

    name: str
    mechanism: int


class ReportCopyStatesRequest(TypedDict, total=False):
    """ReportCopyStatesRequest (request, api key 10957; versions 0-0)."""

    broker_id: int
    broker_epoch: int
    copy_states: list[PartitionCopyState]


class ReportCopyStatesResponse(TypedDict, total=False):
    """ReportCopyStatesResponse (response, api key 10957; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None


class RequestHeader(TypedDict, total=False):
    """RequestHeader (header; versions 0-2)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


class ResponseHeader(TypedDict, total=False):
    """ResponseHeader (header; versions 0-1)."""

    correlation_id: int


class SaslAuthenticateRequest(TypedDict, total=False):
    """SaslAuthenticateRequest (request, api key 36; versions 0-2)."""

    auth_bytes: bytes


class SaslAuthenticateResponse(TypedDict, total=False):
    """SaslAuthenticateResponse (response, api key 36; versions 0-2)."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int


class SaslHandshakeRequest(TypedDict, total=False):
    """SaslHandshakeRequest (request, api key 17; versions 0-1)."""

    mechanism: str


class SaslHandshakeResponse(TypedDict, total=False):
    """SaslHandshakeResponse (response, api key 17; versions 0-1)."""

    error_code: int
    mechanisms: list[str]


class TieredStateRecord(TypedDict, total=False):
    """TieredStateRecord (metadata, api key 10950; versions 0-0)."""

    topic_id: Uuid
    tiered_epoch: int
    tiered_state: int
    policy: int


class TopicRecord(TypedDict, total=False):
    """TopicRecord (metadata, api key 2; versions 0-0)."""

    name: str
    topic_id: Uuid


class UnfenceBrokerRecord(TypedDict, total=False):
    """UnfenceBrokerRecord (metadata, api key 8; versions 0-0)."""

    id: int
    epoch: int


class UnregisterBrokerRecord(TypedDict, total=False):
    """UnregisterBrokerRecord (metadata, api key 1; versions 0-0)."""

    broker_id: int
    broker_epoch: int


class UnregisterBrokerRequest(TypedDict, total=False):
    """UnregisterBrokerRequest (request, api key 64; versions 0-0)."""

    broker_id: int


class UnregisterBrokerResponse(TypedDict, total=False):
    """UnregisterBrokerResponse (response, api key 64; versions 0-0)."""

    throttle_time_ms: int
    error_code: int
    error_message: str | None


class UserScramCredentialRecord(TypedDict, total=False):
    """UserScramCredentialRecord (metadata, api key 11; versions 0-0)."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
