"""``--output json``: each view (:mod:`.views`) as the one JSON document the command prints on stdout.

A function returns the document as plain data (dicts, lists, strings, numbers); :class:`~orchestrator.cli.output.
Output` serialises it (``json.dumps(data, indent=2, default=str)``), never through rich and never wrapped. ``None``
means the view puts nothing on stdout in JSON: the records ``topic consume`` reads (their totals come as one
document at the end), and the note that a scan is over its threshold (the exit status and ``summary["alert"]`` say
it). A :class:`JsonLine` is one document of a stream, printed compact on one line (JSON Lines): each record
``rlmm dump`` reads, as it reads it. The keys are a contract (ARCHITECTURE §8, the README): add, never rename.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cli import views as v
from orchestrator.client import TieringStatus, TopicChange
from orchestrator.local.state import CLIENT_PROPERTIES
from orchestrator.security.acls import AclBinding
from remote_storage.rlmm_topic.formatter import to_json

JSON: v.Renderers[Any | None] = v.Renderers("JSON")


@JSON.register(v.Message)
def _message(view: v.Message) -> Any:
    return view.data


@JSON.register(v.ClusterStarted)
def _cluster_started(view: v.ClusterStarted) -> dict[str, Any]:
    state = view.state
    return {
        "bootstrap_server": state.bootstrap_server,
        "s3_endpoint": state.s3_endpoint,
        "bucket": state.bucket,
        "dir": state.dir,
        "security": {"tls": state.tls, "sasl": state.sasl, "acls": state.acls},
        "client_properties": str(Path(state.dir) / CLIENT_PROPERTIES) if state.tls or state.sasl else None,
    }


@JSON.register(v.ClusterStopped)
def _cluster_stopped(view: v.ClusterStopped) -> dict[str, Any]:
    stopped = view.stopped
    return {
        "dir": stopped.directory,
        "stopped": [{"role": p.role, "id": p.id, "pid": p.pid} for p in stopped.processes],
        "purged": stopped.purged,
        "deleted": stopped.deleted,
        "s3_objects_kept": stopped.s3_objects,
        "resumable": stopped.resumable,
        "warnings": stopped.warnings,
    }


@JSON.register(v.ClusterStatus)
def _cluster_status(view: v.ClusterStatus) -> Any:
    return view.status


@JSON.register(v.TopicList)
def _topics(view: v.TopicList) -> list[dict[str, Any]]:
    return [{**s.as_json(), "internal": s.topic in view.internal} for s in view.statuses]


@JSON.register(v.TopicDescription)
def _topic_description(view: v.TopicDescription) -> dict[str, Any]:
    return {**view.status.as_json(), "partitions": view.partitions, "configs": view.configs}


@JSON.register(v.ConsumedRecord)
def _consumed_record(view: v.ConsumedRecord) -> None:
    return None  # the totals come as one document at the end


@dataclass(frozen=True)
class JsonLine:
    """A document printed as one compact line, not indented: one of a stream of records (JSON Lines), printed as it
    is read, which a reader parses line by line."""

    document: Any


@JSON.register(v.RlmmRecord)
def _rlmm_record(view: v.RlmmRecord) -> JsonLine:
    if view.record is None:
        return JsonLine({"partition": view.partition, "offset": view.offset, "size": view.size, "error": view.error})
    return JsonLine(to_json(view.record, partition=view.partition, offset=view.offset))


@JSON.register(v.RlmmDumpEnded)
def _rlmm_dump_ended(view: v.RlmmDumpEnded) -> None:
    return None  # stdout is the stream of records alone


@JSON.register(v.TopicConfigs)
def _topic_configs(view: v.TopicConfigs) -> Any:
    return view.configs


@JSON.register(v.BrokerList)
def _brokers(view: v.BrokerList) -> Any:
    return view.rows


@JSON.register(v.TieringChanged)
def _tiering_changed(view: v.TieringChanged) -> dict[str, Any]:
    return view.status.as_json()


@JSON.register(v.TieringReport)
def _tiering_report(view: v.TieringReport) -> list[dict[str, Any]]:
    return [s.as_json() for s in view.statuses] + [d.as_json() for d in view.deletions]


@JSON.register(v.TieringTimedOut)
def _tiering_timed_out(view: v.TieringTimedOut) -> dict[str, Any]:
    return view.status.as_json()


def _change_json(change: TopicChange, status: TieringStatus | None) -> dict[str, Any]:
    """One topic of a bulk change: its outcome, and its tiered state when it has one."""
    out: dict[str, Any] = {"topic": change.topic, "error": change.error, "error_message": change.error_message}
    if status is not None:
        out |= {"state": status.state.name, "tiered_epoch": status.tiered_epoch, "policy": status.policy.name.lower()}
    return out


@JSON.register(v.BulkTieringChanged)
def _bulk_tiering_changed(view: v.BulkTieringChanged) -> dict[str, Any]:
    changes = view.changes
    return {
        "topics": [_change_json(c, view.statuses.get(c.topic)) for c in changes],
        "accepted": sum(1 for c in changes if c.ok),
        "failed": sum(1 for c in changes if not c.ok),
    }


@JSON.register(v.ScanSummary)
def _scan_summary(view: v.ScanSummary) -> Any:
    return view.summary


@JSON.register(v.ScanOverThreshold)
def _scan_over_threshold(view: v.ScanOverThreshold) -> None:
    return None  # the exit status and summary["alert"] say it


@JSON.register(v.ReclaimOutcome)
def _reclaim_outcome(view: v.ReclaimOutcome) -> dict[str, Any]:
    return view.result.as_json()


@JSON.register(v.ScramUsers)
def _scram_users(view: v.ScramUsers) -> list[dict[str, Any]]:
    return [
        {"user": u.name, "credentials": [{"mechanism": m, "iterations": i} for m, i in u.credentials]}
        for u in view.users
    ]


def _acl_json(binding: AclBinding) -> dict[str, str]:
    """One ACL in JSON: Kafka's enum names (``READ``, ``ALLOW``, ``TOPIC``, ``LITERAL``), the same keys always."""
    b = binding
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
        "resource_type": b.resource_type.name,
        "pattern_type": b.pattern_type.name,
        "resource_name": b.resource_name,
    }


@JSON.register(v.AclList)
def _acls(view: v.AclList) -> list[dict[str, str]]:
    return [_acl_json(b) for b in view.bindings]


@JSON.register(v.AclsAdded)
def _acls_added(view: v.AclsAdded) -> dict[str, Any]:
    return {"added": [_acl_json(b) for b in view.bindings]}


@JSON.register(v.AclsRemoved)
def _acls_removed(view: v.AclsRemoved) -> dict[str, Any]:
    return {"removed": [_acl_json(b) for b in view.bindings]}
