"""``--output text``: each view (:mod:`.views`) as lines and tables for people.

A text rendering is a list of pieces, printed in order: :class:`Echo` (text echoed by click as it is: no markup
read, never wrapped) and :class:`Rich` (a table, or a string whose markup rich reads). Results go to stdout; a
piece marked ``err`` goes to stderr (where a wait that timed out shows where the topic stands, before the error).

rich wraps to the terminal's width only on a terminal: on a pipe or a file (where rich would assume 80 columns)
nothing is wrapped and tables take their natural width (:func:`console`), so that a command line, a path or an id
printed for people stays one line that a script or a copy and paste can use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import click
from rich.console import Console, RenderableType
from rich.table import Table

from orchestrator.cli import views as v
from orchestrator.client import RemoteDeletionStatus, TieringStatus
from orchestrator.durations import format_duration
from orchestrator.local.state import CLIENT_PROPERTIES
from orchestrator.security.acls import AclBinding
from remote_storage.rlmm_topic.formatter import format_text

UNWRAPPED_WIDTH = 100_000
"""The width given to rich off a terminal: wider than any table; text is not wrapped at all (``soft_wrap``)."""
STATE_STYLE = {"ENABLED": "green", "DISABLING": "yellow", "DISABLED": "cyan", "NOT_TIERED": "dim"}
RECORDS_SHOWN = 20  # records that `topic consume` prints as it reads them


@dataclass(frozen=True)
class Echo:
    """Text echoed as it is (click): no markup read, never wrapped."""

    text: str
    err: bool = False


@dataclass(frozen=True)
class Rich:
    """Printed by rich (:func:`console`): a table, or a string whose markup rich reads."""

    renderable: RenderableType
    err: bool = False


Piece = Echo | Rich
TEXT: v.Renderers[list[Piece]] = v.Renderers("text")


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): rich's own on a terminal; elsewhere one that wraps nothing."""
    on_terminal = Console(stderr=stderr)
    if on_terminal.is_terminal:
        return on_terminal
    return Console(stderr=stderr, width=UNWRAPPED_WIDTH, soft_wrap=True)


def print_pieces(pieces: Sequence[Piece]) -> None:
    for piece in pieces:
        if isinstance(piece, Echo):
            click.echo(piece.text, err=piece.err)
        else:
            console(stderr=piece.err).print(piece.renderable)


def acl_name(value: IntEnum) -> str:
    """An ACL enum member as Kafka's CLI spells it: ``CLUSTER_ACTION`` -> ``ClusterAction``, ``ALLOW`` -> ``Allow``."""
    return "".join(word.capitalize() for word in value.name.split("_"))


# -- the local cluster -------------------------------------------------------------------------------------------


@TEXT.register(v.Message)
def _message(view: v.Message) -> list[Piece]:
    return [Echo(view.text)]


@TEXT.register(v.ClusterStarted)
def _cluster_started(view: v.ClusterStarted) -> list[Piece]:
    state = view.state
    lines = [
        f"bootstrap server: {state.bootstrap_server}",
        f"S3 endpoint:      {state.s3_endpoint}",
        f"bucket:           {state.bucket}",
        f"metadata store:   {state.store_spec}",
        f"export TIEREDCTL_BOOTSTRAP_SERVER={state.bootstrap_server}",
    ]
    if state.tls or state.sasl:
        security = ", ".join(name for name, on in (("TLS", state.tls), ("SASL/SCRAM", state.sasl)) if on)
        lines.insert(4, f"security:         {security}{', ACLs' if state.acls else ''}")
        lines.append(f"export TIEREDCTL_COMMAND_CONFIG={Path(state.dir) / CLIENT_PROPERTIES}")
    return [Echo("\n".join(lines))]


@TEXT.register(v.ClusterStopped)
def _cluster_stopped(view: v.ClusterStopped) -> list[Piece]:
    stopped = view.stopped
    lines = [f"stopped {p.role} {p.id} (pid {p.pid})" for p in stopped.processes] or ["nothing was running"]
    if stopped.purged:
        lines += [f"deleted {path}" for path in stopped.deleted] or [f"nothing to delete in {stopped.directory}"]
    else:
        kept = f"data kept in {stopped.directory}"
        if stopped.s3_objects is not None:
            kept += f" (with the embedded S3's {stopped.s3_objects} object(s))"
        if stopped.resumable:
            kept += f"; 'tieredctl cluster up --dir {stopped.directory}' resumes the cluster"
        lines.append(kept)
    lines += [f"warning: {w}" for w in stopped.warnings]
    return [Echo("\n".join(lines))]


@TEXT.register(v.ClusterStatus)
def _cluster_status(view: v.ClusterStatus) -> list[Piece]:
    status = view.status
    header = f"bootstrap server {status['bootstrap_server']}  S3 {status['s3_endpoint']}  bucket {status['bucket']}"
    lines = [header, f"metadata store {status['store']}"]
    security = status.get("security") or {}
    on = [name for name, key in (("TLS", "tls"), ("SASL/SCRAM", "sasl"), ("ACLs", "acls")) if security.get(key)]
    lines.append(f"security {', '.join(on) if on else 'none (plaintext, no authentication)'}")
    if status.get("client_properties"):
        lines.append(f"client properties {status['client_properties']}")
    if status.get("s3_credentials_file"):
        lines.append(
            f"S3 key pair {status['s3_credentials_file']} (the embedded S3 serves only requests signed with it)"
        )
    if status.get("store_error"):
        lines.append(
            f"warning: the metadata store cannot be read, so the active controller is unknown: {status['store_error']}"
        )
    for p in status["processes"]:
        extra = {True: " (active)", None: " (active: unknown)"}.get(p.get("active"), "") if "active" in p else ""
        alive = "alive" if p["alive"] else "DEAD "
        metrics = f"  metrics {p['metrics_url']}" if p.get("metrics_url") else ""
        lines.append(f"{p['role']:<10} {p['id']:>5}  pid {p['pid']:>7}  {alive}{extra}{metrics}")
    under = status.get("under_replicated_partitions")
    if under:
        lines.append(f"under-replicated partitions: {len(under)}")
        lines += [
            f"  {u['topic']}-{u['partition']}: leader {u['leader']} replicas {u['replicas']} isr {u['isr']}"
            + (f" eligible {u['eligible']}" if u.get("eligible") else "")
            for u in under
        ]
    return [Echo("\n".join(lines))]


# -- topics, configs and brokers ---------------------------------------------------------------------------------


def _state(status: TieringStatus) -> str:
    return f"[{STATE_STYLE[status.state.name]}]{status.state.name}[/]"


def _config_lines(configs: Mapping[str, str | None], *, indent: str = "") -> list[str]:
    return [f"{indent}{k} = {v}" for k, v in sorted(configs.items())]


@TEXT.register(v.TopicList)
def _topics(view: v.TopicList) -> list[Piece]:
    table = Table("topic", "topic id", "partitions", "tiered state", "epoch")
    for s in view.statuses:
        name = f"{s.topic} (internal)" if s.topic in view.internal else s.topic
        table.add_row(name, str(s.topic_id), str(s.partition_count), _state(s), str(s.tiered_epoch))
    return [Rich(table if view.statuses else "no topics")]


@TEXT.register(v.TopicDescription)
def _topic_description(view: v.TopicDescription) -> list[Piece]:
    s = view.status
    lines = [f"topic {s.topic}  id {s.topic_id}  tiered {s.state.name} (epoch {s.tiered_epoch})"]
    lines += [
        f"  partition {p['partition']}: leader {p['leader']} (epoch {p['leader_epoch']}) replicas {p['replicas']} "
        f"isr {p['isr']}" + ("  UNDER-REPLICATED" if p["under_replicated"] else "")
        for p in view.partitions
    ]
    lines += _config_lines(view.configs, indent="  ")
    return [Echo("\n".join(lines))]


@TEXT.register(v.ConsumedRecord)
def _consumed_record(view: v.ConsumedRecord) -> list[Piece]:
    if view.index >= RECORDS_SHOWN:
        return []
    record = view.record
    tier = "remote" if record.remote else "local "
    value = "null" if record.value is None else repr(record.value[:60])
    return [Echo(f"{view.partition}:{record.offset} {tier} {value}")]


@TEXT.register(v.RlmmRecord)
def _rlmm_record(view: v.RlmmRecord) -> list[Piece]:
    if view.record is None:
        where = f"partition: {view.partition}, offset: {view.offset}"
        return [Echo(f"{where}, undecodable value ({view.size} bytes): {view.error}")]
    return [Echo(format_text(view.record, partition=view.partition, offset=view.offset))]


@TEXT.register(v.RlmmDumpEnded)
def _rlmm_dump_ended(view: v.RlmmDumpEnded) -> list[Piece]:
    undecodable = f" ({view.undecodable} undecodable)" if view.undecodable else ""
    return [Echo(f"Processed a total of {view.records} messages{undecodable}", err=True)]


@TEXT.register(v.TopicConfigs)
def _topic_configs(view: v.TopicConfigs) -> list[Piece]:
    return [Echo("\n".join(_config_lines(view.configs)))]


@TEXT.register(v.BrokerList)
def _brokers(view: v.BrokerList) -> list[Piece]:
    lines = [
        f"{r['node_id']:>5}  {r['host']}:{r['port']}" + ("  (active controller)" if r["controller"] else "")
        for r in view.rows
    ]
    return [Echo("\n".join(lines))]


# -- tiering -----------------------------------------------------------------------------------------------------


def _tiering_table(statuses: Sequence[TieringStatus]) -> Table:
    table = Table("topic", "state", "epoch", "policy", "brokers acknowledged", "pending brokers")
    for s in statuses:
        pending = ", ".join(
            f"{p.broker_id}{' fenced' if p.fenced else ''}{' STALLED' if p.stalled else ''}" for p in s.pending_brokers
        )
        policy = s.policy.name.lower() if s.policy.value else "-"
        acknowledged = f"{s.acknowledged_brokers}/{s.required_brokers}" if s.required_brokers else "-"
        table.add_row(s.topic, _state(s), str(s.tiered_epoch), policy, acknowledged, pending or "-")
    return table


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _pending_lines(statuses: Sequence[TieringStatus], *, now_ms: int) -> list[str]:
    """One line per pending broker: attempts, when it is asked next, and its last error in full (never wrapped)."""
    lines = []
    for s in statuses:
        for p in s.pending_brokers:
            tried = _plural(p.attempts, "attempt")
            if p.attempts_without_progress:
                tried += f" ({p.attempts_without_progress} in a row without progress)"
            if p.fenced:
                when = "fenced: asked again once unfenced"
            elif p.next_attempt_ms < 0:
                when = "a request is in flight"
            else:
                wait_s = max(0, p.next_attempt_ms - now_ms) / 1000
                when = f"next attempt in {wait_s:.1f}s" if wait_s else "next attempt due now"
            error = f"; last error: {p.last_error}" if p.last_error else ""
            lines.append(f"{s.topic}: broker {p.broker_id} pending: {tried}, {when}{error}")
    return lines


def _copy_lines(statuses: Sequence[TieringStatus], *, now_ms: int) -> list[str]:
    """One line per partition whose copy to remote storage is in flight or failing: the upload, for how long, stalled
    or not, and the last copy pass's error in full (never wrapped)."""
    return [
        f"{s.topic}: partition {c.partition} (broker {c.broker_id}) copying: {c.cause(now_ms)}"
        for s in statuses
        for c in s.copies
    ]


def _owed_lines(statuses: Sequence[TieringStatus]) -> list[str]:
    """One line per partition whose remote data is still owed (delete policy): what is left and who deletes it."""
    lines = []
    for s in statuses:
        for o in s.owed_partitions:
            left = _plural(o.segments_remaining, "remote segment") + f" ({o.bytes_remaining} bytes) not deleted"
            if o.assigned_broker < 0:
                who = "no live broker to delete them"
            elif o.leaderless:
                who = f"no live leader, assigned to broker {o.assigned_broker}"
            else:
                who = f"deleted by its leader, broker {o.assigned_broker}"
            lines.append(f"{s.topic}: partition {o.partition} owes {left}: {who}")
    return lines


def _deletion_lines(deletions: Sequence[RemoteDeletionStatus]) -> list[str]:
    """One line per deleted topic whose remote data is still being deleted, then one per broker deleting it."""
    lines = []
    for d in deletions:
        partitions = ", ".join(str(p) for p in d.partitions_remaining)
        left = _plural(d.segments_remaining, "remote segment")
        lines.append(
            f"{d.topic} ({d.topic_id}): DELETED, remote data still being deleted: {left} ({d.bytes_remaining} bytes) "
            f"of partition(s) {partitions}"
        )
        if not d.brokers:
            lines.append(f"{d.topic} ({d.topic_id}): no live broker to delete it")
        for b in d.brokers:
            error = f"; last error: {b.last_error}" if b.last_error else ""
            assigned = ", ".join(str(p) for p in b.partitions)
            tried = _plural(b.attempts, "attempt")
            lines.append(
                f"{d.topic} ({d.topic_id}): broker {b.broker_id} deletes partition(s) {assigned}: {tried}{error}"
            )
    return lines


@TEXT.register(v.TieringChanged)
def _tiering_changed(view: v.TieringChanged) -> list[Piece]:
    asked = f" (policy {view.policy})" if view.policy is not None else ""
    status = view.status
    return [Echo(f"{status.topic}: {status.state.name} at tiered epoch {status.tiered_epoch}{asked}")]


@TEXT.register(v.TieringReport)
def _tiering_report(view: v.TieringReport) -> list[Piece]:
    pieces: list[Piece] = []
    if view.statuses:
        pieces.append(Rich(_tiering_table(view.statuses)))
    elif not view.deletions:
        pieces.append(Rich("no topics"))
    lines = _pending_lines(view.statuses, now_ms=view.now_ms) + _owed_lines(view.statuses)
    lines += _copy_lines(view.statuses, now_ms=view.now_ms)
    return pieces + [Echo(line) for line in lines + _deletion_lines(view.deletions)]


@TEXT.register(v.TieringTimedOut)
def _tiering_timed_out(view: v.TieringTimedOut) -> list[Piece]:
    statuses = [view.status]
    lines = _pending_lines(statuses, now_ms=view.now_ms) + _owed_lines(statuses)
    return [Rich(_tiering_table(statuses), err=True), *(Echo(line, err=True) for line in lines)]


@TEXT.register(v.BulkTieringChanged)
def _bulk_tiering_changed(view: v.BulkTieringChanged) -> list[Piece]:
    table = Table("topic", "result", "state", "epoch")
    for c in view.changes:
        st = view.statuses.get(c.topic)
        result = "accepted" if c.ok else f"[red]{c.error}[/]: {c.error_message or ''}"
        state = _state(st) if st is not None else "-"
        table.add_row(c.topic, result, state, str(st.tiered_epoch) if st is not None else "-")
    failed = sum(1 for c in view.changes if not c.ok)
    total = len(view.changes)
    summary = f"{total - failed} of {total} topic(s) accepted" + (f", {failed} failed" if failed else "")
    return [Rich(table), Echo(summary)]


# -- the scan and reclaim ----------------------------------------------------------------------------------------


@TEXT.register(v.ScanSummary)
def _scan_summary(view: v.ScanSummary) -> list[Piece]:
    return [Rich(view.render_text(view.summary)), Echo(f"report: {view.report}")]


@TEXT.register(v.ScanOverThreshold)
def _scan_over_threshold(view: v.ScanOverThreshold) -> list[Piece]:
    anomalies = view.summary["alert"]["anomalies_total"]
    message = f"anomalies {anomalies} exceed the threshold {view.threshold}: exit status {view.exit_status}"
    return [Echo(message, err=True)]


@TEXT.register(v.ReclaimOutcome)
def _reclaim_outcome(view: v.ReclaimOutcome) -> list[Piece]:
    result = view.result
    verb = "planned" if result.executed else "would delete"
    mode = "(executed)" if result.executed else "(dry run)"
    older_than = format_duration(result.older_than_ms)
    source = result.metadata_source
    pieces: list[Piece] = [
        Rich(f"reclaim {mode}: bucket {result.bucket}, objects older than {older_than}, metadata: {source}")
    ]
    if result.planned_by_category:
        for what, totals in (("category", result.planned_by_category), ("topic", result.planned_by_topic)):
            table = Table(f"{verb}: {what}", "objects", "bytes")
            for name, t in totals.items():
                table.add_row(name, f"{t.objects:,}", f"{t.bytes:,}")
            pieces.append(Rich(table))
    if result.skipped:
        table = Table("skipped: reason", "objects")
        for reason, n in result.skipped.items():
            table.add_row(reason, f"{n:,}")
        pieces.append(Rich(table))
    if result.executed:
        failed = f", {len(result.failed_keys):,} failed" if result.failed_keys else ""
        pieces.append(Rich(f"deleted {result.deleted_objects:,} objects ({result.deleted_bytes:,} bytes){failed}"))
    elif not result.run_refused:
        planned = f"{result.planned_objects:,} objects ({result.planned_bytes:,} bytes)"
        pieces.append(Rich(f"would delete {planned}; nothing was deleted (pass --execute to delete them)"))
    uploads = result.uploads
    if uploads.planned or uploads.skipped or uploads.failed:
        skipped = ", ".join(f"{n:,} {reason.replace('_', ' ')}" for reason, n in uploads.skipped.items())
        done = f"aborted {uploads.aborted:,}" if result.executed else "would abort"
        line = f"incomplete multipart uploads: {uploads.planned:,} ({uploads.planned_bytes:,} bytes), {done}"
        failed = f", {len(uploads.failed):,} failed" if uploads.failed else ""
        pieces.append(Rich(f"{line}{failed}" + (f"; skipped: {skipped}" if skipped else "")))
    return pieces


# -- users and ACLs ----------------------------------------------------------------------------------------------


@TEXT.register(v.ScramUsers)
def _scram_users(view: v.ScramUsers) -> list[Piece]:
    table = Table("user", "mechanism", "iterations")
    for u in view.users:
        for mechanism, iterations in u.credentials or [("-", 0)]:
            table.add_row(u.name, mechanism, str(iterations) if iterations else "-")
    return [Rich(table if view.users else "no SCRAM users")]


def _acl_table(bindings: Sequence[AclBinding]) -> Table:
    table = Table("principal", "host", "operation", "permission", "resource type", "pattern", "name")
    for b in bindings:
        kinds = (b.operation, b.permission_type, b.resource_type, b.pattern_type)
        table.add_row(b.principal, b.host, *(acl_name(k) for k in kinds), b.resource_name)
    return table


@TEXT.register(v.AclList)
def _acls(view: v.AclList) -> list[Piece]:
    return [Rich(_acl_table(view.bindings) if view.bindings else "no ACLs")]


@TEXT.register(v.AclsAdded)
def _acls_added(view: v.AclsAdded) -> list[Piece]:
    return [Rich(f"added {_plural(len(view.bindings), 'ACL')}"), Rich(_acl_table(view.bindings))]


@TEXT.register(v.AclsRemoved)
def _acls_removed(view: v.AclsRemoved) -> list[Piece]:
    if not view.bindings:
        return [Rich("no ACL matched: nothing removed")]
    return [Rich(f"removed {_plural(len(view.bindings), 'ACL')}"), Rich(_acl_table(view.bindings))]
