"""The authorizer: may this principal, from this host, do this operation on this resource? Kafka's StandardAuthorizer
rules over a fixed set of ACLs, and Kafka's filter semantics for DescribeAcls and DeleteAcls.

:class:`Authorizer` is built once per set of ACLs (the metadata image's; rebuild it when the image changes) and
answers :meth:`Authorizer.authorize` per request. Pure: no I/O, no clock, no logging (the caller logs decisions).

Rules (Kafka's ``StandardAuthorizerData``), in order:
* A super user (Kafka's ``super.users``) may do everything; no ACL is consulted.
* The ACLs that apply to a request are those on its resource type whose pattern matches its resource name (LITERAL:
  the same name, or the wildcard name ``*``; PREFIXED: a prefix of the name, the whole name included), whose
  principal is the request's or ``User:*``, whose host is the request's or ``*``, and whose operation covers the
  requested one.
* An operation covers itself; ALL covers every operation (so a DENY of ALL denies everything). Only for ALLOW,
  READ, WRITE, DELETE and ALTER also cover DESCRIBE, and ALTER_CONFIGS covers DESCRIBE_CONFIGS: a DENY of READ does
  not deny DESCRIBE.
* An applicable DENY wins over any applicable ALLOW; with no applicable ACL the request is denied (Kafka's default,
  ``allow.everyone.if.no.acl.found=false``).

Cost: the ACLs are indexed by resource type, then by literal name and by prefix, so a decision looks at the ACLs of
the exact name, of ``*``, and of each prefix length some PREFIXED ACL of that type has: never at the whole set.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from orchestrator.security.acls import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

WILDCARD_PRINCIPAL = "User:*"

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def covers(binding: AclBinding, operation: AclOperation) -> bool:
    """Whether ``binding``'s operation applies to a request for ``operation`` (see the module docstring)."""
    granted = binding.operation
    if granted == AclOperation.ALL or granted == operation:
        return True
    if binding.permission_type != AclPermissionType.ALLOW:
        return False
    if operation == AclOperation.DESCRIBE:
        return granted in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return granted in _IMPLIES_DESCRIBE_CONFIGS
    return False


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type, by literal name (``*`` included) and by prefix."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: tuple[int, ...] = ()

    def candidates(self, name: str) -> Iterator[AclBinding]:
        """Every ACL whose pattern matches ``name``."""
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        for length in self.prefix_lengths:
            if length > len(name):
                break
            yield from self.prefixed.get(name[:length], ())


class Authorizer:
    """Kafka's StandardAuthorizer over a fixed set of ACLs (immutable once built)."""

    def __init__(self, acls: Iterable[AclBinding], *, super_users: Iterable[str] = frozenset()) -> None:
        self.super_users = frozenset(super_users)
        index: dict[ResourceType, _TypeIndex] = {}
        for acl in acls:
            by_type = index.setdefault(acl.resource_type, _TypeIndex())
            table = by_type.prefixed if acl.pattern_type == PatternType.PREFIXED else by_type.literal
            table.setdefault(acl.resource_name, []).append(acl)
        for by_type in index.values():
            by_type.prefix_lengths = tuple(sorted({len(prefix) for prefix in by_type.prefixed}))
        self._index = index

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """True when ``principal`` connected from ``host`` may do ``operation`` on the named resource."""
        if principal in self.super_users:
            return True
        by_type = self._index.get(resource_type)
        if by_type is None:
            return False
        allowed = False
        for acl in by_type.candidates(resource_name):
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if not covers(acl, operation):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                return False
            allowed = True
        return allowed


def matches(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    """Kafka's ``AclBindingFilter.matches``: whether DescribeAcls returns, and DeleteAcls removes, ``binding``.

    None and ANY match anything, and a given principal or host must be the binding's exactly (``User:*`` in a filter
    is the wildcard ACL's principal, not every principal). A resource name is matched by pattern type: with ANY or
    the binding's own pattern type, the names must be equal; with MATCH, the binding must be a pattern that applies
    to the filter's name (a LITERAL of that name or of ``*``, or a PREFIXED that is a prefix of it).
    """
    f = acl_filter
    if f.resource_type != ResourceType.ANY and f.resource_type != binding.resource_type:
        return False
    if f.pattern_type not in (PatternType.ANY, PatternType.MATCH) and f.pattern_type != binding.pattern_type:
        return False
    if f.resource_name is not None:
        if f.pattern_type in (PatternType.ANY, binding.pattern_type):
            if f.resource_name != binding.resource_name:
                return False
        elif binding.pattern_type == PatternType.LITERAL:
            if binding.resource_name not in (f.resource_name, WILDCARD):
                return False
        elif not f.resource_name.startswith(binding.resource_name):
            return False
    if f.principal is not None and f.principal != binding.principal:
        return False
    if f.host is not None and f.host != binding.host:
        return False
    if f.operation != AclOperation.ANY and f.operation != binding.operation:
        return False
    return f.permission_type == AclPermissionType.ANY or f.permission_type == binding.permission_type


def filter_problem(acl_filter: AclBindingFilter) -> str | None:
    """Why DescribeAcls or DeleteAcls cannot use ``acl_filter`` (Kafka's INVALID_REQUEST reasons), or None."""
    f = acl_filter
    for what, value in (
        ("resource type", f.resource_type),
        ("pattern type", f.pattern_type),
        ("operation", f.operation),
        ("permission type", f.permission_type),
    ):
        if value.name == "UNKNOWN":
            return f"the filter's {what} is unknown"
    return None
