"""The authorizer follows Kafka's StandardAuthorizer: super users, DENY over ALLOW, LITERAL / wildcard / PREFIXED
patterns, principal and host wildcards, implied operations, denied when no ACL applies; and ACL filters match as
Kafka's AclBindingFilter does. Table tests pin Kafka's cases; hypothesis checks the indexed authorizer against a
plain reading of the rules over every ACL, and the properties the rules imply."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from orchestrator.security.authorizer import Authorizer, filter_problem, matches

pytestmark = pytest.mark.unit

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE = "User:alice"


def acl(
    name: str = "orders",
    op: AclOperation = Op.READ,
    perm: AclPermissionType = Perm.ALLOW,
    *,
    pattern: PatternType = Pat.LITERAL,
    principal: str = ALICE,
    host: str = "*",
    resource_type: ResourceType = Res.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, op, perm)


def allowed(acls: list[AclBinding], op: AclOperation = Op.READ, name: str = "orders", **kw: str) -> bool:
    principal, host = kw.get("principal", ALICE), kw.get("host", "10.0.0.1")
    return Authorizer(acls).authorize(principal, host, op, Res.TOPIC, name)


# --- table tests: Kafka's rules one by one ----------------------------------------------------------------------


def test_no_acl_at_all_denies_and_a_super_user_needs_none() -> None:
    assert not allowed([])
    authorizer = Authorizer([acl(perm=Perm.DENY, op=Op.ALL)], super_users={"User:admin"})
    assert authorizer.authorize("User:admin", "1.2.3.4", Op.ALTER, Res.CLUSTER, "kafka-cluster")
    assert authorizer.authorize("User:admin", "1.2.3.4", Op.READ, Res.TOPIC, "orders")  # a DENY does not bind them


@pytest.mark.parametrize(
    ("pattern", "acl_name", "name", "expected"),
    [
        (Pat.LITERAL, "orders", "orders", True),
        (Pat.LITERAL, "orders", "orders-eu", False),
        (Pat.LITERAL, "*", "anything", True),
        (Pat.PREFIXED, "ord", "orders", True),
        (Pat.PREFIXED, "orders", "orders", True),  # a prefix may be the whole name
        (Pat.PREFIXED, "orders-", "orders", False),
        (Pat.PREFIXED, "*", "orders", False),  # a PREFIXED '*' is a literal character, not a wildcard
        (Pat.PREFIXED, "*", "*x", True),
    ],
)
def test_resource_patterns(pattern: PatternType, acl_name: str, name: str, expected: bool) -> None:
    assert allowed([acl(acl_name, pattern=pattern)], name=name) is expected


def test_principal_and_host_match_exactly_or_by_wildcard() -> None:
    assert allowed([acl(principal="User:*")])
    assert not allowed([acl(principal="User:bob")])
    assert allowed([acl(host="10.0.0.1")], host="10.0.0.1")
    assert not allowed([acl(host="10.0.0.2")], host="10.0.0.1")
    assert not allowed([acl(principal="Group:*")])  # the wildcard principal is User:* only


@pytest.mark.parametrize(
    ("granted", "requested", "expected"),
    [
        (Op.ALL, Op.ALTER_CONFIGS, True),
        (Op.READ, Op.DESCRIBE, True),
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.CREATE, Op.DESCRIBE, False),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.ALTER_CONFIGS, Op.DESCRIBE, False),
        (Op.DESCRIBE, Op.READ, False),
        (Op.READ, Op.WRITE, False),
    ],
)
def test_an_allow_implies_the_operations_kafka_implies(
    granted: AclOperation, requested: AclOperation, expected: bool
) -> None:
    assert allowed([acl(op=granted)], op=requested) is expected


def test_a_deny_beats_any_allow_and_implies_nothing_but_deny_all_denies_everything() -> None:
    allow_all = acl(op=Op.ALL, principal="User:*")
    assert not allowed([allow_all, acl(op=Op.READ, perm=Perm.DENY)], op=Op.READ)
    assert allowed([allow_all, acl(op=Op.READ, perm=Perm.DENY)], op=Op.DESCRIBE)  # DENY READ does not deny DESCRIBE
    assert not allowed([allow_all, acl("o", op=Op.ALL, perm=Perm.DENY, pattern=Pat.PREFIXED)], op=Op.DESCRIBE)
    assert not allowed([acl(op=Op.ALL), acl("*", op=Op.WRITE, perm=Perm.DENY)], op=Op.WRITE)


def test_acls_of_another_resource_type_do_not_apply() -> None:
    group = acl(op=Op.ALL, resource_type=Res.GROUP)
    assert not allowed([group])
    assert Authorizer([group]).authorize(ALICE, "h", Op.READ, Res.GROUP, "orders")


# --- filters ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acl_filter", "binding", "expected"),
    [
        (AclBindingFilter(), acl(), True),
        (AclBindingFilter(resource_type=Res.GROUP), acl(), False),
        (AclBindingFilter(resource_name="orders"), acl("orders"), True),
        (AclBindingFilter(resource_name="orders"), acl("*"), False),  # ANY: the names must be equal
        (AclBindingFilter(resource_name="orders", pattern_type=Pat.MATCH), acl("*"), True),
        (AclBindingFilter(resource_name="orders", pattern_type=Pat.MATCH), acl("ord", pattern=Pat.PREFIXED), True),
        (AclBindingFilter(resource_name="orders", pattern_type=Pat.MATCH), acl("ordersx", pattern=Pat.PREFIXED), False),
        (AclBindingFilter(resource_name="orders", pattern_type=Pat.MATCH), acl("order"), False),
        (AclBindingFilter(pattern_type=Pat.MATCH), acl("anything", pattern=Pat.PREFIXED), True),
        (AclBindingFilter(resource_name="ord", pattern_type=Pat.PREFIXED), acl("ord", pattern=Pat.PREFIXED), True),
        (AclBindingFilter(resource_name="ord", pattern_type=Pat.PREFIXED), acl("ord"), False),
        (AclBindingFilter(pattern_type=Pat.LITERAL), acl("x", pattern=Pat.PREFIXED), False),
        (AclBindingFilter(principal="User:*"), acl(), False),  # a filter's principal is matched exactly
        (AclBindingFilter(principal=ALICE, host="*"), acl(), True),
        (AclBindingFilter(host="10.0.0.1"), acl(), False),
        (AclBindingFilter(operation=Op.READ, permission_type=Perm.ALLOW), acl(), True),
        (AclBindingFilter(operation=Op.DESCRIBE), acl(), False),  # no implication in filters
        (AclBindingFilter(permission_type=Perm.DENY), acl(), False),
    ],
)
def test_filters_match_as_kafkas_acl_binding_filter(
    acl_filter: AclBindingFilter, binding: AclBinding, expected: bool
) -> None:
    assert matches(acl_filter, binding) is expected


def test_a_filter_with_an_unknown_field_is_refused() -> None:
    assert filter_problem(AclBindingFilter()) is None
    assert filter_problem(AclBindingFilter(pattern_type=Pat.MATCH)) is None
    assert "pattern type" in str(filter_problem(AclBindingFilter(pattern_type=Pat.UNKNOWN)))
    assert "operation" in str(filter_problem(AclBindingFilter(operation=Op.UNKNOWN)))


# --- properties -------------------------------------------------------------------------------------------------

NAMES = st.text("ab*", min_size=1, max_size=4)
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2", "*"])
CONCRETE_OPS = st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY)])
REQUESTED_OPS = st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY, Op.ALL)])
TYPES = st.sampled_from([Res.TOPIC, Res.GROUP])

BINDINGS = st.builds(
    AclBinding,
    resource_type=TYPES,
    resource_name=NAMES,
    pattern_type=st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
    principal=PRINCIPALS,
    host=HOSTS,
    operation=CONCRETE_OPS,
    permission_type=st.sampled_from([Perm.ALLOW, Perm.DENY]),
)
REQUESTS = st.tuples(
    st.sampled_from(["User:alice", "User:bob"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    REQUESTED_OPS,
    TYPES,
    NAMES,
)
Request = tuple[str, str, AclOperation, ResourceType, str]


def reference(acls: list[AclBinding], request: Request) -> bool:
    """The rules read plainly, over every ACL: no index."""
    principal, host, op, resource_type, name = request
    implied = {
        Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    }
    verdicts = set()
    for a in acls:
        name_ok = a.resource_name in (name, "*") if a.pattern_type == Pat.LITERAL else name.startswith(a.resource_name)
        if not name_ok or a.resource_type != resource_type:
            continue
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            continue
        exact = a.operation in (Op.ALL, op)
        if exact or (a.permission_type == Perm.ALLOW and a.operation in implied.get(op, set())):
            verdicts.add(a.permission_type)
    return Perm.ALLOW in verdicts and Perm.DENY not in verdicts


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)


@PROPERTY_SETTINGS
@given(acls=st.lists(BINDINGS, max_size=12), request=REQUESTS)
def test_the_indexed_authorizer_agrees_with_the_rules_read_over_every_acl(
    acls: list[AclBinding], request: Request
) -> None:
    assert Authorizer(acls).authorize(*request) is reference(acls, request)


@PROPERTY_SETTINGS
@given(acls=st.lists(BINDINGS, max_size=12), more=BINDINGS, request=REQUESTS)
def test_an_allow_never_takes_access_away_and_a_deny_never_gives_it(
    acls: list[AclBinding], more: AclBinding, request: Request
) -> None:
    before = Authorizer(acls).authorize(*request)
    after = Authorizer([*acls, more]).authorize(*request)
    if more.permission_type == Perm.ALLOW:
        assert after or not before
    else:
        assert before or not after


@PROPERTY_SETTINGS
@given(acls=st.lists(BINDINGS, max_size=12), request=REQUESTS)
def test_a_super_user_is_always_allowed_and_a_literal_deny_all_of_the_exact_request_always_denies(
    acls: list[AclBinding], request: Request
) -> None:
    principal, host, _, resource_type, name = request
    assert Authorizer(acls, super_users={principal}).authorize(*request)
    deny = AclBinding(resource_type, name, Pat.LITERAL, principal, host, Op.ALL, Perm.DENY)
    assert not Authorizer([*acls, deny]).authorize(*request)


@PROPERTY_SETTINGS
@given(binding=BINDINGS, request=REQUESTS)
def test_a_match_filter_for_a_name_finds_exactly_the_patterns_that_apply_to_it(
    binding: AclBinding, request: Request
) -> None:
    """MATCH on a name selects the ACLs the authorizer consults for that name (principal and operation aside)."""
    _, _, _, resource_type, name = request
    acl_filter = AclBindingFilter(resource_type=resource_type, resource_name=name, pattern_type=Pat.MATCH)
    everyone = AclBinding(
        binding.resource_type, binding.resource_name, binding.pattern_type, "User:*", "*", Op.ALL, Perm.ALLOW
    )
    applies = Authorizer([everyone]).authorize("User:x", "h", Op.READ, resource_type, name)
    assert matches(acl_filter, binding) is applies
