"""The security calls of a session: SCRAM users (AlterUserScramCredentials, DescribeUserScramCredentials) and ACLs
(CreateAcls, DescribeAcls, DeleteAcls), sent to the active controller; their request bodies and the reading of their
answers are pure functions below the calls.

Invariants:

* A password never leaves this process: as Kafka's clients do, the salted password is computed here from a fresh
  random salt, and only the salt and ``Hi(password, salt, iterations)`` are sent.
* ACL requests use versions from 1, where the pattern type begins (:data:`ACL_VERSIONS`).
* The error of a user, a filter or one binding is raised as its typed Kafka error, naming what was being done.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import NamedTuple, cast

from orchestrator.client.answers import check
from orchestrator.client.session import ClientSession
from orchestrator.protocol import messages as m
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.security.acls import AclBinding, AclBindingFilter, binding_codes, binding_from_codes
from orchestrator.security.scram import DEFAULT_ITERATIONS, ScramMechanism, salted_password

SCRAM_SALT_BYTES = 32  # the salt of a new credential: random, as Kafka's clients make it
SCRAM_MECHANISMS = tuple(mech.mechanism_name for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512))
ACL_VERSIONS = (1, 3)  # CreateAcls, DescribeAcls and DeleteAcls: v0 has no pattern type


class SecurityCalls(ClientSession):
    """SCRAM users and ACLs, managed through the active controller."""

    async def upsert_scram_user(
        self, name: str, password: str, *, mechanism: str = "SCRAM-SHA-512", iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """Create or replace ``name``'s credential for ``mechanism`` (AlterUserScramCredentials).

        As Kafka's clients do, the salted password is computed here from a fresh random salt: the password itself
        never leaves this process."""
        salt = secrets.token_bytes(SCRAM_SALT_BYTES)
        scram = ScramMechanism.from_name(mechanism)
        body = scram_upsertion_request(name, password, mechanism=scram, iterations=iterations, salt=salt)
        resp = await self.admin.call(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), body, m.AlterUserScramCredentialsResponse
        )
        for r in resp["results"]:
            check(r["error_code"], r.get("error_message"), f"setting the {mechanism} credential of user '{name}'")

    async def delete_scram_user(self, name: str, *, mechanisms: Sequence[str] | None = None) -> list[str]:
        """Remove ``name``'s credentials for ``mechanisms`` (default: every one the user has, as described first);
        returns the names of the mechanisms removed. A user without credentials is the server's RESOURCE_NOT_FOUND.

        One request per mechanism: Kafka refuses a user named twice in one request (DUPLICATE_RESOURCE). If one
        fails, those before it stay removed; the error names the mechanism."""
        if mechanisms is None:
            described = await self.describe_scram_users([name])
            mechanisms = [mech for user in described for mech, _ in user.credentials if mech in SCRAM_MECHANISMS]
            mechanisms = mechanisms or [SCRAM_MECHANISMS[-1]]  # none described: the server says what is wrong
        removed = []
        for mechanism in dict.fromkeys(mechanisms):
            body = scram_deletion_request(name, ScramMechanism.from_name(mechanism))
            resp = await self.admin.call(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), body, m.AlterUserScramCredentialsResponse
            )
            for r in resp["results"]:
                check(r["error_code"], r.get("error_message"), f"removing the {mechanism} credential of user '{name}'")
            removed.append(mechanism)
        return removed

    async def describe_scram_users(self, names: Sequence[str] | None = None) -> list[ScramUser]:
        """The users named (default: every user with a credential), each with its mechanisms and iterations; a
        named user without any credential is the server's RESOURCE_NOT_FOUND."""
        users: list[m.UserName] | None = None if names is None else [{"name": n} for n in names]
        body: m.DescribeUserScramCredentialsRequest = {"users": users}
        resp = await self.admin.call(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            (0, 0),
            body,
            m.DescribeUserScramCredentialsResponse,
            idempotent=True,
        )
        check(resp["error_code"], resp.get("error_message"), "describing SCRAM users")
        return scram_users_from_response(resp)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Create every binding (CreateAcls); one that already exists is left as it is, as in Kafka."""
        if not bindings:
            return
        body: m.CreateAclsRequest = {"creations": [acl_creation(b) for b in bindings]}
        resp = await self.admin.call(ApiKey.CREATE_ACLS, ACL_VERSIONS, body, m.CreateAclsResponse)
        for binding, r in zip(bindings, resp["results"], strict=True):
            check(r["error_code"], r.get("error_message"), f"creating ACL {describe_binding(binding)}")

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches (DescribeAcls)."""
        body = describe_acls_request(acl_filter)
        resp = await self.admin.call(ApiKey.DESCRIBE_ACLS, ACL_VERSIONS, body, m.DescribeAclsResponse, idempotent=True)
        check(resp["error_code"], resp.get("error_message"), "describing ACLs")
        return bindings_from_describe(resp)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding one of ``filters`` matches (DeleteAcls); returns the bindings removed."""
        if not filters:
            return []
        body: m.DeleteAclsRequest = {"filters": [delete_acls_filter(f) for f in filters]}
        resp = await self.admin.call(ApiKey.DELETE_ACLS, ACL_VERSIONS, body, m.DeleteAclsResponse)
        return bindings_deleted(resp)


# -- the request bodies and the answers, as pure functions ----------------------------------------------------------


class ScramUser(NamedTuple):
    """A user with SCRAM credentials, as DescribeUserScramCredentials tells it: never a salt or a key."""

    name: str
    credentials: list[tuple[str, int]]  # (mechanism name, iterations)


def scram_upsertion_request(
    name: str, password: str, *, mechanism: ScramMechanism, iterations: int, salt: bytes
) -> m.AlterUserScramCredentialsRequest:
    """The AlterUserScramCredentials body that sets ``name``'s credential: the salt and ``Hi(password, salt,
    iterations)``, never the password."""
    upsertion: m.ScramCredentialUpsertion = {
        "name": name,
        "mechanism": int(mechanism),
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password(mechanism, password, salt, iterations),
    }
    return {"deletions": [], "upsertions": [upsertion]}


def scram_deletion_request(name: str, mechanism: ScramMechanism) -> m.AlterUserScramCredentialsRequest:
    """The AlterUserScramCredentials body that removes ``name``'s credential for ``mechanism``."""
    deletion: m.ScramCredentialDeletion = {"name": name, "mechanism": int(mechanism)}
    return {"deletions": [deletion], "upsertions": []}


def scram_users_from_response(resp: m.DescribeUserScramCredentialsResponse) -> list[ScramUser]:
    """The users of a DescribeUserScramCredentials answer; a user's error is raised (RESOURCE_NOT_FOUND: none)."""
    users = []
    for r in resp["results"]:
        check(r["error_code"], r.get("error_message"), f"describing user '{r['user']}'")
        credentials = [
            (ScramMechanism.from_code(c["mechanism"]).mechanism_name, c["iterations"]) for c in r["credential_infos"]
        ]
        users.append(ScramUser(r["user"], credentials))
    return users


def describe_binding(binding: AclBinding) -> str:
    """One ACL in words, for messages: ``ALLOW User:alice READ from * on TOPIC 'orders' (LITERAL)``."""
    b = binding
    resource = f"{b.resource_type.name} '{b.resource_name}' ({b.pattern_type.name})"
    return f"{b.permission_type.name} {b.principal} {b.operation.name} from {b.host} on {resource}"


def acl_creation(binding: AclBinding) -> m.AclCreation:
    return cast(m.AclCreation, binding_codes(binding, pattern_key="resource_pattern_type"))


def describe_acls_request(acl_filter: AclBindingFilter) -> m.DescribeAclsRequest:
    f = acl_filter
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def delete_acls_filter(acl_filter: AclBindingFilter) -> m.DeleteAclsFilter:
    return describe_acls_request(acl_filter)  # a DeleteAcls filter has the fields of a DescribeAcls request


def bindings_from_describe(resp: m.DescribeAclsResponse) -> list[AclBinding]:
    """Every binding of a DescribeAcls answer, one per ACL of each resource pattern."""
    return [binding_from_codes({**resource, **acl}) for resource in resp["resources"] for acl in resource["acls"]]


def bindings_deleted(resp: m.DeleteAclsResponse) -> list[AclBinding]:
    """The bindings a DeleteAcls answer says were removed; the error of a filter or of one binding is raised."""
    removed = []
    for result in resp["filter_results"]:
        check(result["error_code"], result.get("error_message"), "deleting ACLs")
        for acl in result["matching_acls"]:
            binding = binding_from_codes(acl)
            check(acl["error_code"], acl.get("error_message"), f"deleting ACL {describe_binding(binding)}")
            removed.append(binding)
    return removed
