"""``tieredctl acls``: Kafka ACLs added, listed and removed from the CLI, as ``kafka-acls.sh`` does (KIP-140).

The options become :class:`~orchestrator.security.acls.AclBinding` (``add``) and
:class:`~orchestrator.security.acls.AclBindingFilter` (``list``, ``remove``) in pure functions
(:func:`bindings_to_add`, :func:`selection_filters`), which the tests check without a cluster.

* A resource is one topic (``--topic NAME``, its name as a prefix with ``--prefixed``) or the cluster
  (``--cluster``); ``list`` and ``remove`` without either match every resource.
* Operations are spelt as Kafka's CLI spells them (``Read``, ``ClusterAction``...), in any case.
* ``remove`` with no selector would delete every ACL of the cluster: it is refused unless ``--all`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.render_text import acl_name
from orchestrator.cli.views import AclList, AclsAdded, AclsRemoved
from orchestrator.security.acls import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from orchestrator.security.principals import parse_principal

F = TypeVar("F", bound=Callable[..., Any])

OPERATIONS: dict[str, AclOperation] = {
    acl_name(op): op
    for op in (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALL,
    )
}
"""``--operation`` values (Kafka's CLI spelling) -> operation."""
_OPERATIONS_BY_LOWER_CASE = {name.lower(): op for name, op in OPERATIONS.items()}


class _AnyCaseChoice(click.Choice[str]):
    """A choice matched in any case, shown and returned as written (click's own lower-cases them in ``--help``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str):
            value = {choice.lower(): choice for choice in self.choices}.get(value.lower(), value)
        return super().convert(value, param, ctx)


_operation_choice = _AnyCaseChoice(list(OPERATIONS))


def _principal(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Option callback: ``User:alice`` checked (a usage error naming the option says what to write)."""
    if value is None:
        return None
    try:
        return parse_principal(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def _resource_options(fn: F) -> F:
    """``--topic NAME | --cluster`` and ``--prefixed``."""
    options = [
        click.option("--topic", default=None, metavar="NAME", help="the topic (with --prefixed: every topic so named)"),
        click.option("--cluster", is_flag=True, help=f"the cluster ({CLUSTER_RESOURCE_NAME!r})"),
        click.option("--prefixed", is_flag=True, help="--topic is a name prefix (a PREFIXED pattern)"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def resource_pattern(
    *, topic: str | None, cluster: bool, prefixed: bool
) -> tuple[ResourceType, str, PatternType] | None:
    """The resource pattern the options name: a topic (literal, or prefixed) or the cluster; None for neither."""
    if topic is not None and cluster:
        raise click.UsageError("--topic and --cluster name two resources: give one")
    if topic == "":
        raise click.BadParameter("the topic name is empty", param_hint="--topic")
    if cluster:
        if prefixed:
            raise click.UsageError("--prefixed applies to --topic; the cluster has one literal name")
        return ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL
    if topic is not None:
        return ResourceType.TOPIC, topic, PatternType.PREFIXED if prefixed else PatternType.LITERAL
    return None


def bindings_to_add(
    *,
    principal: str,
    host: str,
    operations: Sequence[str],
    topic: str | None,
    cluster: bool,
    prefixed: bool,
    deny: bool,
) -> list[AclBinding]:
    """One binding per operation (repeated ones once), ALLOW unless ``deny``."""
    resource = resource_pattern(topic=topic, cluster=cluster, prefixed=prefixed)
    if resource is None:
        raise click.UsageError("name the resource: --topic NAME or --cluster")
    resource_type, resource_name, pattern_type = resource
    if not host:
        raise click.BadParameter(f"the host is empty (use {WILDCARD} for any host)", param_hint="--host")
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    chosen = dict.fromkeys(_operation(name) for name in operations)
    return [AclBinding(resource_type, resource_name, pattern_type, principal, host, op, permission) for op in chosen]


def selection_filters(
    *, principal: str | None, topic: str | None, cluster: bool, prefixed: bool, operations: Sequence[str] = ()
) -> list[AclBindingFilter]:
    """The filters of ``list`` and ``remove``: one per operation (repeated ones once), or one for any operation.
    With no resource named, any resource matches, of any pattern type unless ``prefixed`` asks for prefixed ones."""
    resource = resource_pattern(topic=topic, cluster=cluster, prefixed=prefixed)
    any_pattern = PatternType.PREFIXED if prefixed else PatternType.ANY
    resource_type, resource_name, pattern_type = resource or (ResourceType.ANY, None, any_pattern)
    chosen = dict.fromkeys(_operation(name) for name in operations) or [AclOperation.ANY]
    return [
        AclBindingFilter(
            resource_type=resource_type,
            resource_name=resource_name,
            pattern_type=pattern_type,
            principal=principal,
            operation=op,
        )
        for op in chosen
    ]


def _operation(name: str) -> AclOperation:
    """An ``--operation`` value, in any case (click has already checked it is one of :data:`OPERATIONS`)."""
    return _OPERATIONS_BY_LOWER_CASE[name.lower()]


def _sorted(bindings: Sequence[AclBinding]) -> list[AclBinding]:
    """Bindings in a stable order: by resource, then principal, host, operation and permission."""

    def key(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
        return (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission_type)

    return sorted(bindings, key=key)


@click.group(cls=NounGroup)
def acls() -> None:
    """Kafka ACLs: who may do what to a topic or the cluster."""


@acls.command("add")
@click.option("--principal", required=True, callback=_principal, help="who: User:NAME, or User:* for everyone")
@click.option("--host", default=WILDCARD, show_default=True, help="the client host it applies to")
@click.option("--operation", "operations", multiple=True, required=True, type=_operation_choice, help="repeatable")
@_resource_options
@click.option("--deny", is_flag=True, help="a DENY ACL (default: ALLOW)")
@click.pass_obj
def acls_add(
    obj: Ctx,
    principal: str,
    host: str,
    operations: tuple[str, ...],
    topic: str | None,
    cluster: bool,
    prefixed: bool,
    deny: bool,
) -> None:
    """Allow (or with --deny, deny) --principal each --operation on --topic NAME or --cluster."""
    bindings = bindings_to_add(
        principal=principal,
        host=host,
        operations=operations,
        topic=topic,
        cluster=cluster,
        prefixed=prefixed,
        deny=deny,
    )
    obj.run(lambda c: c.create_acls(bindings))
    obj.output.show(AclsAdded(bindings))


@acls.command("list")
@click.option("--principal", default=None, callback=_principal, help="only this principal's ACLs")
@_resource_options
@click.pass_obj
def acls_list(obj: Ctx, principal: str | None, topic: str | None, cluster: bool, prefixed: bool) -> None:
    """ACLs, all of them unless --principal, --topic, --cluster or --prefixed narrow them."""
    (acl_filter,) = selection_filters(principal=principal, topic=topic, cluster=cluster, prefixed=prefixed)
    found = obj.run(lambda c: c.describe_acls(acl_filter))
    obj.output.show(AclList(_sorted(found)))


@acls.command("remove")
@click.option("--principal", default=None, callback=_principal, help="only this principal's ACLs")
@_resource_options
@click.option("--operation", "operations", multiple=True, type=_operation_choice, help="only these (repeatable)")
@click.option("--all", "remove_all", is_flag=True, help="remove every ACL of the cluster (no selector given)")
@click.pass_obj
def acls_remove(
    obj: Ctx,
    principal: str | None,
    topic: str | None,
    cluster: bool,
    prefixed: bool,
    operations: tuple[str, ...],
    remove_all: bool,
) -> None:
    """Remove the ACLs that --principal, --topic/--cluster (--prefixed) and --operation select; --all for all."""
    selected = principal is not None or topic is not None or cluster or bool(operations)
    if remove_all and (selected or prefixed):
        raise click.UsageError("--all removes every ACL: give it no --principal, --topic, --cluster or --operation")
    if not remove_all and not selected:
        raise click.UsageError(
            "no selector: name --principal, --topic, --cluster or --operation, or pass --all to remove every ACL"
        )
    filters = selection_filters(
        principal=principal, topic=topic, cluster=cluster, prefixed=prefixed, operations=operations
    )
    removed = obj.run(lambda c: c.delete_acls(filters))
    obj.output.show(AclsRemoved(_sorted(removed)))
