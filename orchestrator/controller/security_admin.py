"""The security admin API: CreateAcls, DeleteAcls, AlterUserScramCredentials (the active controller's writes), and
DescribeAcls, DescribeUserScramCredentials (reads of the metadata image, as pure functions any node can call).

Each handler takes a typed request body and its version and returns the typed response body, normalized to that
version (``admin_api/responses.py``), with Kafka's per-entry errors (AclControlManager, ScramControlManager and
ScramImage are the models). Authorization is not checked here: whoever dispatches a request checks it first.

Invariants:
* One request is at most one append, all of it or none (Kafka writes each of these requests atomically); a request
  whose every entry fails writes nothing. A deposed controller's :class:`StaleControllerEpoch` propagates.
* CreateAcls does not store a binding twice: a binding already held (or earlier in the same request) succeeds and
  writes nothing. Each new binding gets a fresh id no ACL has.
* DeleteAcls removes every ACL a filter matches, each once however many filters match it, and reports in each
  filter's result every ACL that filter matched.
* AlterUserScramCredentials answers once per user; a user named twice in one request (two deletions, two
  upsertions, or one of each) is DUPLICATE_RESOURCE and nothing of it is written.
* No salt, key or salted password is ever logged or answered: DescribeUserScramCredentials gives mechanisms and
  iterations only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import structlog

from orchestrator.admin_api.responses import normalized
from orchestrator.errors import (
    DuplicateResource,
    InvalidRequest,
    KafkaError,
    ResourceNotFound,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, acl_record, scram_credential_record
from orchestrator.metadata.records import MetadataRecord, make_record
from orchestrator.protocol import messages as m
from orchestrator.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_codes,
    binding_from_codes,
    member,
)
from orchestrator.security.authorizer import filter_problem, matches
from orchestrator.security.scram import ScramMechanism, credential_from_salted_password

from .state import ControllerState

log = structlog.get_logger(__name__)


_DUPLICATE_USER = "A user credential cannot be altered twice in the same request"


class SecurityAdmin:
    """The security APIs of the active controller, writing through its :class:`ControllerState`."""

    def __init__(self, state: ControllerState) -> None:
        self._state = state

    # --- ACLs ---------------------------------------------------------------------------------------------------

    def create_acls(self, body: m.CreateAclsRequest, version: int) -> m.CreateAclsResponse:
        req = normalized("CreateAclsRequest", version, body)
        image = self._state.refresh()
        held = set(image.acls.values())
        new: dict[Uuid, AclBinding] = {}
        results: list[m.AclCreationResult] = []
        for creation in req["creations"]:
            binding = _binding(creation)
            problem = binding.problem()
            if problem is not None:
                log.info("acl.create_refused", **_acl_fields(binding), detail=problem)
                results.append(m.AclCreationResult(error_code=InvalidRequest.code, error_message=problem))
                continue
            if binding not in held:
                held.add(binding)
                new[self._new_acl_id(image, new)] = binding
            results.append(m.AclCreationResult(error_code=0, error_message=None))
        if new:
            self._state.append([acl_record(acl_id, binding) for acl_id, binding in new.items()])
            for acl_id, binding in new.items():
                log.info("acl.created", acl_id=str(acl_id), **_acl_fields(binding))
        return normalized("CreateAclsResponse", version, m.CreateAclsResponse(throttle_time_ms=0, results=results))

    def describe_acls(self, body: m.DescribeAclsRequest, version: int) -> m.DescribeAclsResponse:
        return describe_acls(self._state.refresh(), body, version)

    def delete_acls(self, body: m.DeleteAclsRequest, version: int) -> m.DeleteAclsResponse:
        req = normalized("DeleteAclsRequest", version, body)
        image = self._state.refresh()
        removed: dict[Uuid, AclBinding] = {}
        results: list[m.DeleteAclsFilterResult] = []
        for wire_filter in req["filters"]:
            acl_filter = _filter(wire_filter)
            problem = filter_problem(acl_filter)
            if problem is not None:
                results.append(
                    m.DeleteAclsFilterResult(error_code=InvalidRequest.code, error_message=problem, matching_acls=[])
                )
                continue
            matched = [(acl_id, b) for acl_id, b in image.acls.items() if matches(acl_filter, b)]
            removed.update(matched)
            results.append(
                m.DeleteAclsFilterResult(
                    error_code=0, error_message=None, matching_acls=[_matching_acl(b) for _, b in matched]
                )
            )
        if removed:
            self._state.append([make_record("RemoveAccessControlEntryRecord", id=acl_id) for acl_id in removed])
            for acl_id, binding in removed.items():
                log.info("acl.deleted", acl_id=str(acl_id), **_acl_fields(binding))
        response = m.DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
        return normalized("DeleteAclsResponse", version, response)

    # --- SCRAM credentials --------------------------------------------------------------------------------------

    def alter_user_scram_credentials(
        self, body: m.AlterUserScramCredentialsRequest, version: int
    ) -> m.AlterUserScramCredentialsResponse:
        """Kafka's ScramControlManager.alterCredentials: deletions, then upsertions, one answer per user."""
        req = normalized("AlterUserScramCredentialsRequest", version, body)
        image = self._state.refresh()
        users: list[str] = []  # in the order the request first names them
        errors: dict[str, KafkaError] = {}
        records: dict[str, MetadataRecord] = {}
        for deletion in req["deletions"]:
            name = deletion["name"]
            if not _first_mention(name, users, errors, records):
                continue
            try:
                mechanism = _mechanism(name, deletion["mechanism"])
                if image.scram_credential(name, mechanism) is None:
                    raise ResourceNotFound("Attempt to delete a user credential that does not exist")
                records[name] = make_record("RemoveUserScramCredentialRecord", name=name, mechanism=int(mechanism))
            except KafkaError as exc:
                errors[name] = exc
        for upsertion in req["upsertions"]:
            name = upsertion["name"]
            if not _first_mention(name, users, errors, records):
                continue
            try:
                mechanism = _mechanism(name, upsertion["mechanism"])
                credential = credential_from_salted_password(
                    mechanism, upsertion["salt"], upsertion["salted_password"], upsertion["iterations"]
                )
                records[name] = scram_credential_record(name, mechanism, credential)
            except KafkaError as exc:
                errors[name] = exc
        if records:
            self._state.append(list(records.values()))
            for name, record in records.items():
                mechanism_name = ScramMechanism(record["mechanism"]).mechanism_name
                if record.name == "UserScramCredentialRecord":
                    log.info(
                        "scram.credential_set", user=name, mechanism=mechanism_name, iterations=record["iterations"]
                    )
                else:
                    log.info("scram.credential_deleted", user=name, mechanism=mechanism_name)
        results: list[m.AlterUserScramCredentialsResult] = []
        for name in users:
            error = errors.get(name)
            if error is not None:
                log.info("scram.alter_refused", user=name, error=error.name, detail=error.message)
            results.append(
                m.AlterUserScramCredentialsResult(
                    user=name,
                    error_code=0 if error is None else error.code,
                    error_message=None if error is None else error.message,
                )
            )
        response = m.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)
        return normalized("AlterUserScramCredentialsResponse", version, response)

    def describe_user_scram_credentials(
        self, body: m.DescribeUserScramCredentialsRequest, version: int
    ) -> m.DescribeUserScramCredentialsResponse:
        return describe_user_scram_credentials(self._state.refresh(), body, version)

    # --- internals ----------------------------------------------------------------------------------------------

    def _new_acl_id(self, image: MetadataImage, pending: Mapping[Uuid, AclBinding]) -> Uuid:
        while True:
            acl_id = Uuid.random(self._state.rng.randbytes)
            if acl_id not in image.acls and acl_id not in pending and not acl_id.is_zero:
                return acl_id


# --- the reads: pure functions of an image ----------------------------------------------------------------------


def describe_acls(image: MetadataImage, body: m.DescribeAclsRequest, version: int) -> m.DescribeAclsResponse:
    """The ACLs the request's filter matches, grouped by resource pattern (Kafka's DescribeAclsResponse shape)."""
    req = normalized("DescribeAclsRequest", version, body)
    acl_filter = _filter(req)
    problem = filter_problem(acl_filter)
    if problem is not None:
        response = m.DescribeAclsResponse(
            throttle_time_ms=0, error_code=InvalidRequest.code, error_message=problem, resources=[]
        )
        return normalized("DescribeAclsResponse", version, response)
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[m.AclDescription]] = {}
    for binding in image.acls.values():
        if matches(acl_filter, binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            by_pattern.setdefault(key, []).append(
                m.AclDescription(
                    principal=binding.principal,
                    host=binding.host,
                    operation=int(binding.operation),
                    permission_type=int(binding.permission_type),
                )
            )
    resources = [
        m.DescribeAclsResource(
            resource_type=int(rtype), resource_name=rname, pattern_type=int(ptype), acls=descriptions
        )
        for (rtype, rname, ptype), descriptions in by_pattern.items()
    ]
    response = m.DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)
    return normalized("DescribeAclsResponse", version, response)


def describe_user_scram_credentials(
    image: MetadataImage, body: m.DescribeUserScramCredentialsRequest, version: int
) -> m.DescribeUserScramCredentialsResponse:
    """Kafka's ScramImage.describe: per user its mechanisms and iterations; every user when none is named."""
    req = normalized("DescribeUserScramCredentialsRequest", version, body)
    infos: dict[str, list[m.CredentialInfo]] = {}
    for (user, mechanism), credential in sorted(image.scram_credentials.items(), key=lambda item: item[0]):
        infos.setdefault(user, []).append(m.CredentialInfo(mechanism=mechanism, iterations=credential.iterations))
    named = [u["name"] for u in req["users"] or []]
    results: list[m.DescribeUserScramCredentialsResult] = []
    for user in dict.fromkeys(named) if named else infos:
        error: KafkaError | None = None
        if named.count(user) > 1:
            error = DuplicateResource(
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
            )
        elif user not in infos:
            error = ResourceNotFound(f"Attempt to describe a user credential that does not exist: {user}")
        results.append(
            m.DescribeUserScramCredentialsResult(
                user=user,
                error_code=0 if error is None else error.code,
                error_message=None if error is None else error.message,
                credential_infos=infos.get(user, []) if error is None else [],
            )
        )
    response = m.DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=0, error_message=None, results=results
    )
    return normalized("DescribeUserScramCredentialsResponse", version, response)


# --- wire <-> model ---------------------------------------------------------------------------------------------


def _binding(creation: m.AclCreation) -> AclBinding:
    return binding_from_codes(creation, pattern_key="resource_pattern_type")


def _filter(wire: Mapping[str, Any]) -> AclBindingFilter:
    """A DescribeAcls request's or a DeleteAcls filter's fields (the same names in both) as a filter."""
    return AclBindingFilter(
        resource_type=member(ResourceType, wire["resource_type_filter"]),
        resource_name=wire["resource_name_filter"],
        pattern_type=member(PatternType, wire["pattern_type_filter"]),
        principal=wire["principal_filter"],
        host=wire["host_filter"],
        operation=member(AclOperation, wire["operation"]),
        permission_type=member(AclPermissionType, wire["permission_type"]),
    )


def _matching_acl(b: AclBinding) -> m.DeleteAclsMatchingAcl:
    return cast(m.DeleteAclsMatchingAcl, {"error_code": 0, "error_message": None, **binding_codes(b)})


def _acl_fields(b: AclBinding) -> dict[str, Any]:
    """A binding as log fields (names, not codes)."""
    return {
        "resource_type": b.resource_type.name,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


def _mechanism(user: str, code: int) -> ScramMechanism:
    """Kafka's validateScramUsernameAndMechanism: a non-empty user name and a known mechanism."""
    if not user:
        raise UnacceptableCredential("Username must not be empty")
    mechanism = ScramMechanism.from_code(code)
    if mechanism is ScramMechanism.UNKNOWN:
        raise UnsupportedSaslMechanism(f"Unknown SCRAM mechanism {code}")
    return mechanism


def _first_mention(
    name: str, users: list[str], errors: dict[str, KafkaError], records: dict[str, MetadataRecord]
) -> bool:
    """Whether this entry of AlterUserScramCredentials is the user's first (to be validated). A second one makes the
    user DUPLICATE_RESOURCE and drops what the first would have written; a user already failed keeps its error."""
    if name in errors:
        return False
    if name in records:
        del records[name]
        errors[name] = DuplicateResource(_DUPLICATE_USER)
        return False
    users.append(name)
    return True
