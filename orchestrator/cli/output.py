"""How a command's result reaches the user: one :class:`Output`, rendered as text or as JSON (``--output``).

Commands compute and call the output object; the renderer prints. Invariants, kept by both renderers:

- stdout carries only the command's result: lines and tables for people, or with ``--output json`` one JSON
  document (``json.dumps(data, indent=2, default=str)``, never through rich, never wrapped to the terminal width);
- stderr carries everything else: progress lines and bars (text only), warnings and errors (both formats);
- rich wraps text to the terminal's width only on a terminal: on a pipe or a file (where rich would assume 80
  columns) nothing is wrapped and tables take their natural width (:func:`console`), so that a command line, a path
  or an id printed for people stays one line that a script or a copy and paste can use.

The reclaim executor appears here for its type only (``TYPE_CHECKING``): this module is loaded by every command,
and importing it would load boto3 for ``tieredctl topic list`` too.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

import click
from rich.console import Console, RenderableType
from rich.table import Table

from orchestrator.client import FetchedRecord, RemoteDeletionStatus, ScramUser, TieringStatus, TopicChange
from orchestrator.durations import format_duration
from orchestrator.local.state import CLIENT_PROPERTIES, LocalClusterState, Stopped
from orchestrator.security.acls import AclBinding

if TYPE_CHECKING:  # loads boto3: for the type only
    from policies.reclaim_executor import ReclaimResult

UNWRAPPED_WIDTH = 100_000
"""The width given to rich off a terminal: wider than any table; text is not wrapped at all (``soft_wrap``)."""
STATE_STYLE = {"ENABLED": "green", "DISABLING": "yellow", "DISABLED": "cyan", "NOT_TIERED": "dim"}
RECORDS_SHOWN = 20  # records that `topic consume` prints as it reads them (text only)


class PartitionRow(TypedDict):
    """One partition of ``topic describe``."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


class BrokerRow(TypedDict):
    """One node of ``broker list``; ``controller`` marks the active controller."""

    node_id: int
    host: str
    port: int
    controller: bool


ScanTextRenderer = Callable[[Mapping[str, Any]], RenderableType]


class Output(ABC):
    """What a command shows. One method per kind of result; each renderer decides how it looks."""

    shows_progress: ClassVar[bool]
    """Progress lines and bars (stderr) are for people: shown with text output only."""

    # -- stderr, the same in both formats ------------------------------------------------------------------------

    def warning(self, message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    def error(self, message: str) -> None:
        click.echo(f"error: {message}", err=True)

    # -- results -------------------------------------------------------------------------------------------------

    @abstractmethod
    def progress(self, message: str, *, level: int = 0) -> None:
        """A step of a long command, on stderr; ``level`` 1 is a step within a step (indented)."""

    @abstractmethod
    def message(self, data: Any, text: str) -> None:
        """A one-line result: ``data`` is the JSON document, ``text`` the line for people."""

    @abstractmethod
    def cluster_started(self, state: LocalClusterState) -> None:
        """``cluster up``: where the new local cluster answers."""

    @abstractmethod
    def cluster_stopped(self, stopped: Stopped) -> None:
        """``cluster down``: the processes that were stopped, and what was kept or deleted."""

    @abstractmethod
    def cluster_status(self, status: Mapping[str, Any]) -> None:
        """``cluster status``: :func:`orchestrator.local.cluster.status`'s document."""

    @abstractmethod
    def topics(self, statuses: Sequence[TieringStatus]) -> None:
        """``topic list``: every topic with its id, partitions and tiered state."""

    @abstractmethod
    def topic_description(
        self, status: TieringStatus, *, partitions: Sequence[PartitionRow], configs: Mapping[str, str | None]
    ) -> None:
        """``topic describe``: tiered state, partitions (by index) and configs of one topic."""

    @abstractmethod
    def consumed_record(self, record: FetchedRecord, *, partition: int, index: int) -> None:
        """``topic consume``: the ``index``-th record read (from 0), as it arrives."""

    @abstractmethod
    def topic_configs(self, configs: Mapping[str, str | None]) -> None:
        """``configs describe``: every config of a topic."""

    @abstractmethod
    def brokers(self, rows: Sequence[BrokerRow]) -> None:
        """``broker list``: live brokers and the controllers."""

    @abstractmethod
    def tiering_state(self, status: TieringStatus, *, policy: str | None = None) -> None:
        """A topic's tiered state after a change (``policy``: the one a disable asked for)."""

    @abstractmethod
    def tiering_status(
        self, statuses: Sequence[TieringStatus], *, deletions: Sequence[RemoteDeletionStatus] = ()
    ) -> None:
        """``tiering status``: state, epoch, policy and pending brokers of each topic, then the deleted topics whose
        remote data is still being deleted."""

    @abstractmethod
    def tiering_timed_out(self, status: TieringStatus) -> None:
        """``tiering disable|enable --wait`` ran out of time: where the topic stands (the error follows)."""

    @abstractmethod
    def tiering_bulk(self, changes: Sequence[TopicChange], statuses: Mapping[str, TieringStatus]) -> None:
        """``tiering disable`` of many topics: each topic's outcome (accepted, or its error) and, for those
        accepted, its tiered state now (``statuses`` by name)."""

    @abstractmethod
    def scan_summary(self, summary: Mapping[str, Any], *, report: Path | None, render_text: ScanTextRenderer) -> None:
        """A scan's summary and the path of its HTML report. ``render_text`` is the scan's own per-topic table
        (:func:`remote_storage.scan.report.render_text`), handed in so that this module does not load the scan."""

    @abstractmethod
    def scan_over_threshold(self, summary: Mapping[str, Any], *, threshold: int, exit_status: int) -> None:
        """``scan run`` found more anomalies than ``--max-anomalies``: why the exit status is ``exit_status``."""

    @abstractmethod
    def reclaim_result(self, result: ReclaimResult) -> None:
        """``reclaim``: what was planned, skipped and deleted (warnings and refusals are on stderr)."""

    @abstractmethod
    def scram_users(self, users: Sequence[ScramUser]) -> None:
        """``users list``: each user's SCRAM mechanisms with their iterations (a password, salt or key never)."""

    @abstractmethod
    def acls(self, bindings: Sequence[AclBinding]) -> None:
        """``acls list``: the ACLs that matched."""

    @abstractmethod
    def acls_added(self, bindings: Sequence[AclBinding]) -> None:
        """``acls add``: the ACLs created (or already there)."""

    @abstractmethod
    def acls_removed(self, bindings: Sequence[AclBinding]) -> None:
        """``acls remove``: the ACLs deleted, none when nothing matched."""


def _change_json(change: TopicChange, status: TieringStatus | None) -> dict[str, Any]:
    """One topic of a bulk change: its outcome, and its tiered state when it has one."""
    out: dict[str, Any] = {"topic": change.topic, "error": change.error, "error_message": change.error_message}
    if status is not None:
        out |= {"state": status.state.name, "tiered_epoch": status.tiered_epoch, "policy": status.policy.name.lower()}
    return out


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


class JsonOutput(Output):
    """``--output json``: one JSON document on stdout per command; nothing else on stdout, no progress."""

    shows_progress = False

    def progress(self, message: str, *, level: int = 0) -> None:
        pass

    def message(self, data: Any, text: str) -> None:
        _dump(data)

    def cluster_started(self, state: LocalClusterState) -> None:
        _dump(
            {
                "bootstrap_server": state.bootstrap_server,
                "s3_endpoint": state.s3_endpoint,
                "bucket": state.bucket,
                "dir": state.dir,
                "security": {"tls": state.tls, "sasl": state.sasl, "acls": state.acls},
                "client_properties": str(Path(state.dir) / CLIENT_PROPERTIES) if state.tls or state.sasl else None,
            }
        )

    def cluster_stopped(self, stopped: Stopped) -> None:
        _dump(
            {
                "dir": stopped.directory,
                "stopped": [{"role": p.role, "id": p.id, "pid": p.pid} for p in stopped.processes],
                "purged": stopped.purged,
                "deleted": stopped.deleted,
                "s3_objects_kept": stopped.s3_objects,
                "resumable": stopped.resumable,
                "warnings": stopped.warnings,
            }
        )

    def cluster_status(self, status: Mapping[str, Any]) -> None:
        _dump(status)

    def topics(self, statuses: Sequence[TieringStatus]) -> None:
        _dump([s.as_json() for s in statuses])

    def topic_description(
        self, status: TieringStatus, *, partitions: Sequence[PartitionRow], configs: Mapping[str, str | None]
    ) -> None:
        _dump({**status.as_json(), "partitions": partitions, "configs": configs})

    def consumed_record(self, record: FetchedRecord, *, partition: int, index: int) -> None:
        pass  # the totals come as one document at the end

    def topic_configs(self, configs: Mapping[str, str | None]) -> None:
        _dump(configs)

    def brokers(self, rows: Sequence[BrokerRow]) -> None:
        _dump(rows)

    def tiering_state(self, status: TieringStatus, *, policy: str | None = None) -> None:
        _dump(status.as_json())

    def tiering_status(
        self, statuses: Sequence[TieringStatus], *, deletions: Sequence[RemoteDeletionStatus] = ()
    ) -> None:
        _dump([s.as_json() for s in statuses] + [d.as_json() for d in deletions])

    def tiering_timed_out(self, status: TieringStatus) -> None:
        _dump(status.as_json())

    def tiering_bulk(self, changes: Sequence[TopicChange], statuses: Mapping[str, TieringStatus]) -> None:
        _dump(
            {
                "topics": [_change_json(c, statuses.get(c.topic)) for c in changes],
                "accepted": sum(1 for c in changes if c.ok),
                "failed": sum(1 for c in changes if not c.ok),
            }
        )

    def scan_summary(self, summary: Mapping[str, Any], *, report: Path | None, render_text: ScanTextRenderer) -> None:
        _dump(summary)

    def scan_over_threshold(self, summary: Mapping[str, Any], *, threshold: int, exit_status: int) -> None:
        pass  # the exit status and summary["alert"] say it

    def reclaim_result(self, result: ReclaimResult) -> None:
        _dump(result.as_json())

    def scram_users(self, users: Sequence[ScramUser]) -> None:
        _dump(
            [
                {"user": u.name, "credentials": [{"mechanism": m, "iterations": i} for m, i in u.credentials]}
                for u in users
            ]
        )

    def acls(self, bindings: Sequence[AclBinding]) -> None:
        _dump([_acl_json(b) for b in bindings])

    def acls_added(self, bindings: Sequence[AclBinding]) -> None:
        _dump({"added": [_acl_json(b) for b in bindings]})

    def acls_removed(self, bindings: Sequence[AclBinding]) -> None:
        _dump({"removed": [_acl_json(b) for b in bindings]})


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


def acl_name(value: IntEnum) -> str:
    """An ACL enum member as Kafka's CLI spells it: ``CLUSTER_ACTION`` -> ``ClusterAction``, ``ALLOW`` -> ``Allow``."""
    return "".join(word.capitalize() for word in value.name.split("_"))


def _wall_ms() -> int:
    """Now, to say how far off a pending broker's next attempt is (the controller's times are wall-clock ms)."""
    return int(time.time() * 1000)


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): rich's own on a terminal; elsewhere one that wraps nothing."""
    on_terminal = Console(stderr=stderr)
    if on_terminal.is_terminal:
        return on_terminal
    return Console(stderr=stderr, width=UNWRAPPED_WIDTH, soft_wrap=True)


def _print(renderable: RenderableType) -> None:
    console().print(renderable)


def _state(status: TieringStatus) -> str:
    return f"[{STATE_STYLE[status.state.name]}]{status.state.name}[/]"


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


def _pending_lines(statuses: Sequence[TieringStatus], *, now_ms: int) -> list[str]:
    """One line per pending broker: attempts, when it is asked next, and its last error in full (never wrapped)."""
    lines = []
    for s in statuses:
        for p in s.pending_brokers:
            tried = f"{p.attempts} attempt{'s' if p.attempts != 1 else ''}"
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


def _owed_lines(statuses: Sequence[TieringStatus]) -> list[str]:
    """One line per partition whose remote data is still owed (delete policy): what is left and who deletes it."""
    lines = []
    for s in statuses:
        for o in s.owed_partitions:
            left = f"{o.segments_remaining} remote segment{'s' if o.segments_remaining != 1 else ''}"
            left += f" ({o.bytes_remaining} bytes) not deleted"
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
        left = f"{d.segments_remaining} remote segment{'s' if d.segments_remaining != 1 else ''}"
        lines.append(
            f"{d.topic} ({d.topic_id}): DELETED, remote data still being deleted: {left} ({d.bytes_remaining} bytes) "
            f"of partition(s) {partitions}"
        )
        if not d.brokers:
            lines.append(f"{d.topic} ({d.topic_id}): no live broker to delete it")
        for b in d.brokers:
            error = f"; last error: {b.last_error}" if b.last_error else ""
            assigned = ", ".join(str(p) for p in b.partitions)
            tried = f"{b.attempts} attempt{'s' if b.attempts != 1 else ''}"
            lines.append(
                f"{d.topic} ({d.topic_id}): broker {b.broker_id} deletes partition(s) {assigned}: {tried}{error}"
            )
    return lines


def _acl_table(bindings: Sequence[AclBinding]) -> Table:
    table = Table("principal", "host", "operation", "permission", "resource type", "pattern", "name")
    for b in bindings:
        kinds = (b.operation, b.permission_type, b.resource_type, b.pattern_type)
        table.add_row(b.principal, b.host, *(acl_name(k) for k in kinds), b.resource_name)
    return table


def _config_lines(configs: Mapping[str, str | None], *, indent: str = "") -> list[str]:
    return [f"{indent}{k} = {v}" for k, v in sorted(configs.items())]


class TextOutput(Output):
    """``--output text``: lines (click) and tables (rich) for people on stdout; progress on stderr."""

    shows_progress = True

    def progress(self, message: str, *, level: int = 0) -> None:
        click.echo(f"{'  ' * level}{message}", err=True)

    def message(self, data: Any, text: str) -> None:
        click.echo(text)

    def cluster_started(self, state: LocalClusterState) -> None:
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
        click.echo("\n".join(lines))

    def cluster_stopped(self, stopped: Stopped) -> None:
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
        click.echo("\n".join(lines))

    def cluster_status(self, status: Mapping[str, Any]) -> None:
        header = f"bootstrap server {status['bootstrap_server']}  S3 {status['s3_endpoint']}  bucket {status['bucket']}"
        lines = [header, f"metadata store {status['store']}"]
        security = status.get("security") or {}
        on = [name for name, key in (("TLS", "tls"), ("SASL/SCRAM", "sasl"), ("ACLs", "acls")) if security.get(key)]
        lines.append(f"security {', '.join(on) if on else 'none (plaintext, no authentication)'}")
        if status.get("client_properties"):
            lines.append(f"client properties {status['client_properties']}")
        for p in status["processes"]:
            extra = " (active)" if p.get("active") else ""
            alive = "alive" if p["alive"] else "DEAD "
            metrics = f"  metrics {p['metrics_url']}" if p.get("metrics_url") else ""
            lines.append(f"{p['role']:<10} {p['id']:>5}  pid {p['pid']:>7}  {alive}{extra}{metrics}")
        click.echo("\n".join(lines))

    def topics(self, statuses: Sequence[TieringStatus]) -> None:
        table = Table("topic", "topic id", "partitions", "tiered state", "epoch")
        for s in statuses:
            table.add_row(s.topic, str(s.topic_id), str(s.partition_count), _state(s), str(s.tiered_epoch))
        _print(table if statuses else "no topics")

    def topic_description(
        self, status: TieringStatus, *, partitions: Sequence[PartitionRow], configs: Mapping[str, str | None]
    ) -> None:
        s = status
        lines = [f"topic {s.topic}  id {s.topic_id}  tiered {s.state.name} (epoch {s.tiered_epoch})"]
        lines += [
            f"  partition {p['partition']}: leader {p['leader']} replicas {p['replicas']} isr {p['isr']}"
            for p in partitions
        ]
        lines += _config_lines(configs, indent="  ")
        click.echo("\n".join(lines))

    def consumed_record(self, record: FetchedRecord, *, partition: int, index: int) -> None:
        if index < RECORDS_SHOWN:
            tier = "remote" if record.remote else "local "
            value = "null" if record.value is None else repr(record.value[:60])
            click.echo(f"{partition}:{record.offset} {tier} {value}")

    def topic_configs(self, configs: Mapping[str, str | None]) -> None:
        click.echo("\n".join(_config_lines(configs)))

    def brokers(self, rows: Sequence[BrokerRow]) -> None:
        lines = [
            f"{r['node_id']:>5}  {r['host']}:{r['port']}" + ("  (active controller)" if r["controller"] else "")
            for r in rows
        ]
        click.echo("\n".join(lines))

    def tiering_state(self, status: TieringStatus, *, policy: str | None = None) -> None:
        asked = f" (policy {policy})" if policy is not None else ""
        click.echo(f"{status.topic}: {status.state.name} at tiered epoch {status.tiered_epoch}{asked}")

    def tiering_status(
        self, statuses: Sequence[TieringStatus], *, deletions: Sequence[RemoteDeletionStatus] = ()
    ) -> None:
        if statuses:
            _print(_tiering_table(statuses))
        elif not deletions:
            _print("no topics")
        lines = [*_pending_lines(statuses, now_ms=_wall_ms()), *_owed_lines(statuses), *_deletion_lines(deletions)]
        for line in lines:
            click.echo(line)

    def tiering_bulk(self, changes: Sequence[TopicChange], statuses: Mapping[str, TieringStatus]) -> None:
        table = Table("topic", "result", "state", "epoch")
        for c in changes:
            st = statuses.get(c.topic)
            result = "accepted" if c.ok else f"[red]{c.error}[/]: {c.error_message or ''}"
            state = _state(st) if st is not None else "-"
            table.add_row(c.topic, result, state, str(st.tiered_epoch) if st is not None else "-")
        _print(table)
        failed = sum(1 for c in changes if not c.ok)
        click.echo(
            f"{len(changes) - failed} of {len(changes)} topic(s) accepted" + (f", {failed} failed" if failed else "")
        )

    def tiering_timed_out(self, status: TieringStatus) -> None:
        console(stderr=True).print(_tiering_table([status]))
        for line in [*_pending_lines([status], now_ms=_wall_ms()), *_owed_lines([status])]:
            click.echo(line, err=True)

    def scan_summary(self, summary: Mapping[str, Any], *, report: Path | None, render_text: ScanTextRenderer) -> None:
        _print(render_text(summary))
        click.echo(f"report: {report}")

    def scan_over_threshold(self, summary: Mapping[str, Any], *, threshold: int, exit_status: int) -> None:
        anomalies = summary["alert"]["anomalies_total"]
        message = f"anomalies {anomalies} exceed the threshold {threshold}: exit status {exit_status}"
        click.echo(message, err=True)

    def reclaim_result(self, result: ReclaimResult) -> None:
        out = console()
        verb = "planned" if result.executed else "would delete"
        mode = "(executed)" if result.executed else "(dry run)"
        older_than = format_duration(result.older_than_ms)
        source = result.metadata_source
        out.print(f"reclaim {mode}: bucket {result.bucket}, objects older than {older_than}, metadata: {source}")
        if result.planned_by_category:
            for what, totals in (("category", result.planned_by_category), ("topic", result.planned_by_topic)):
                table = Table(f"{verb}: {what}", "objects", "bytes")
                for name, t in totals.items():
                    table.add_row(name, f"{t.objects:,}", f"{t.bytes:,}")
                out.print(table)
        if result.skipped:
            table = Table("skipped: reason", "objects")
            for reason, n in result.skipped.items():
                table.add_row(reason, f"{n:,}")
            out.print(table)
        if result.executed:
            failed = f", {len(result.failed_keys):,} failed" if result.failed_keys else ""
            out.print(f"deleted {result.deleted_objects:,} objects ({result.deleted_bytes:,} bytes){failed}")
        elif not result.run_refused:
            planned = f"{result.planned_objects:,} objects ({result.planned_bytes:,} bytes)"
            out.print(f"would delete {planned}; nothing was deleted (pass --execute to delete them)")

    def scram_users(self, users: Sequence[ScramUser]) -> None:
        table = Table("user", "mechanism", "iterations")
        for u in users:
            for mechanism, iterations in u.credentials or [("-", 0)]:
                table.add_row(u.name, mechanism, str(iterations) if iterations else "-")
        _print(table if users else "no SCRAM users")

    def acls(self, bindings: Sequence[AclBinding]) -> None:
        _print(_acl_table(bindings) if bindings else "no ACLs")

    def acls_added(self, bindings: Sequence[AclBinding]) -> None:
        _print(f"added {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}")
        _print(_acl_table(bindings))

    def acls_removed(self, bindings: Sequence[AclBinding]) -> None:
        if not bindings:
            _print("no ACL matched: nothing removed")
            return
        _print(f"removed {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}")
        _print(_acl_table(bindings))


OUTPUT_FORMATS: dict[str, type[Output]] = {"text": TextOutput, "json": JsonOutput}
"""``--output`` choices, in the order ``--help`` lists them."""
