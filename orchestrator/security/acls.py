"""Kafka's ACL model: resource types, pattern types, operations, permission types (with Kafka's wire codes) and
the binding and filter types that the metadata log, the admin API and the authorizer share.

Invariants:
* The enum values are Kafka's codes (``org.apache.kafka.common.acl`` / ``resource``); they are written into the
  metadata log (``AccessControlEntryRecord``) and never change meaning.
* An :class:`AclBinding` is concrete: no ANY/MATCH/UNKNOWN in it (:meth:`AclBinding.problem` says what is wrong);
  an :class:`AclBindingFilter` may hold ANY (and MATCH for the pattern type) and ``None`` for "any name /
  principal / host", as DescribeAcls and DeleteAcls filters do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as in Kafka
WILDCARD = "*"  # a resource name, principal ("User:*") or host matching every one


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_FILTER_ONLY_TYPES = (ResourceType.ANY, ResourceType.UNKNOWN)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access control entry on one resource pattern (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", or "User:*"
    host: str  # "*" for any host
    operation: AclOperation
    permission_type: AclPermissionType

    def problem(self) -> str | None:
        """Why this binding cannot be stored (Kafka's INVALID_REQUEST reasons), or None when it can."""
        if self.resource_type in _FILTER_ONLY_TYPES:
            return f"resource type {self.resource_type.name} is not concrete"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"pattern type {self.pattern_type.name} is not concrete (LITERAL or PREFIXED)"
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return f"operation {self.operation.name} is not concrete"
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"permission type {self.permission_type.name} is not ALLOW or DENY"
        if not self.resource_name:
            return "the resource name is empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_RESOURCE_NAME:
            return f"the CLUSTER resource is named {CLUSTER_RESOURCE_NAME!r}"
        if ":" not in self.principal or self.principal.startswith(":"):
            return f"principal {self.principal!r} is not TYPE:NAME (e.g. User:alice)"
        if not self.host:
            return "the host is empty (use * for any host)"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings DescribeAcls returns and DeleteAcls removes; None / ANY match anything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY  # MATCH: every pattern that matches resource_name
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


_E = TypeVar("_E", bound=IntEnum)


def member(kind: type[_E], code: int) -> _E:
    """The member of ``kind`` with wire code ``code``; UNKNOWN (0 in each of Kafka's ACL enums) for a code Kafka does
    not define, which :meth:`AclBinding.problem` then refuses."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def binding_from_codes(fields: Mapping[str, Any], *, pattern_key: str = "pattern_type") -> AclBinding:
    """A binding from a wire entry or record with Kafka's field names (CreateAcls calls the pattern type
    ``resource_pattern_type``: ``pattern_key``)."""
    return AclBinding(
        resource_type=member(ResourceType, fields["resource_type"]),
        resource_name=fields["resource_name"],
        pattern_type=member(PatternType, fields[pattern_key]),
        principal=fields["principal"],
        host=fields["host"],
        operation=member(AclOperation, fields["operation"]),
        permission_type=member(AclPermissionType, fields["permission_type"]),
    )


def binding_codes(binding: AclBinding, *, pattern_key: str = "pattern_type") -> dict[str, Any]:
    """The wire fields of ``binding`` (the reverse of :func:`binding_from_codes`)."""
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        pattern_key: int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission_type),
    }
