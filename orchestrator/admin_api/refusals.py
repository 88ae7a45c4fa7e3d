"""A request refused as a whole: its API's own response, with one error wherever that response carries one.

Kafka's APIs report errors per partition (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch), per topic or per
resource (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreateAcls, DeleteAcls, AlterUserScramCredentials) or at the top level (DescribeCluster, DescribeAcls,
DescribeUserScramCredentials and our own APIs). A node that cannot serve a request at all (a standby asked to write
while no controller is active, a forward that timed out) and a gate that refuses entries answer with
:func:`refusal`, so a client reads the error where it looks for it, with the entries it asked about, and retries
when the error is retriable (NOT_CONTROLLER, REQUEST_TIMED_OUT).

Pure: a function of the request and the error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.errors import KafkaError
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.codec import compiled
from orchestrator.protocol.schema import response_schema


def refusal(api_key: int, version: int, body: Mapping[str, Any], error: KafkaError) -> dict[str, Any]:
    """The response of ``api_key`` at ``version`` to ``body`` (the request as decoded) with ``error`` on every
    entry it asked about, or at the top level for an API without entries."""
    # The request as decoded is untyped here (its type depends on api_key), and so is the answer built from it.
    failed: dict[str, Any] = {"error_code": error.code, "error_message": error.message}
    out: dict[str, Any] = failed
    if api_key == ApiKey.CREATE_TOPICS:
        out = {"topics": [{"name": t["name"], **failed} for t in body["topics"]]}
    elif api_key == ApiKey.DELETE_TOPICS:
        by_id = [{"name": t["name"], "topic_id": t["topic_id"], **failed} for t in body.get("topics") or []]
        by_name = [{"name": n, **failed} for n in body.get("topic_names") or []]
        out = {"responses": by_id or by_name}
    elif api_key == ApiKey.CREATE_PARTITIONS:
        out = {"results": [{"name": t["name"], **failed} for t in body["topics"]]}
    elif api_key in (ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
        entries = [
            {"resource_type": r["resource_type"], "resource_name": r["resource_name"], **failed}
            for r in body["resources"]
        ]
        if api_key == ApiKey.DESCRIBE_CONFIGS:
            out = {"results": [{**e, "configs": []} for e in entries]}
        else:
            out = {"responses": entries}  # AlterConfigs and IncrementalAlterConfigs answer alike
    elif api_key == ApiKey.CREATE_ACLS:
        out = {"results": [dict(failed) for _ in body["creations"]]}
    elif api_key == ApiKey.DELETE_ACLS:
        out = {"filter_results": [{**failed, "matching_acls": []} for _ in body["filters"]]}
    elif api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        users = dict.fromkeys(e["name"] for e in [*body["deletions"], *body["upsertions"]])
        out = {"results": [{"user": user, **failed} for user in users]}
    elif api_key == ApiKey.PRODUCE:
        out = {
            "responses": [
                {
                    "name": t["name"],
                    "partition_responses": [{"index": p["index"], **failed} for p in t["partition_data"]],
                }
                for t in body["topic_data"]
            ]
        }
    elif api_key == ApiKey.FETCH:
        out = {
            "responses": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        {"partition_index": p["partition"], "error_code": error.code, "records": b""}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }
    elif api_key == ApiKey.LIST_OFFSETS:
        out = {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": error.code} for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }
    elif api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        out = {
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        {"partition": p["partition"], "error_code": error.code, "leader_epoch": -1, "end_offset": -1}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }
    schema = response_schema(api_key)
    if schema is None:
        raise ValueError(f"api key {api_key} has no response schema")
    return compiled(schema, version).normalize(out)
