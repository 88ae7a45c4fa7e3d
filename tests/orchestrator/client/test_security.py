"""The security calls' request bodies and answers, as pure functions: a SCRAM upsertion carries a salt and the
salted password (never the password), a deletion names one user and one mechanism, and ACL bodies carry Kafka's
codes at the versions the client offers."""

from __future__ import annotations

import hashlib

import pytest

from orchestrator.client import (
    ACL_VERSIONS,
    SCRAM_SALT_BYTES,
    acl_creation,
    bindings_from_describe,
    delete_acls_filter,
    describe_acls_request,
    scram_deletion_request,
    scram_upsertion_request,
)
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import request_schema
from orchestrator.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from orchestrator.security.scram import ScramMechanism, credential_from_password, credential_from_salted_password

pytestmark = pytest.mark.unit

PASSWORD = "correct horse battery staple"
SALT = bytes(range(SCRAM_SALT_BYTES))


def test_an_upsertion_carries_a_salt_and_the_salted_password_never_the_password():
    body = scram_upsertion_request(
        "alice", PASSWORD, mechanism=ScramMechanism.SCRAM_SHA_256, iterations=8192, salt=SALT
    )
    (upsertion,) = body["upsertions"]
    assert body["deletions"] == []
    assert (upsertion["name"], upsertion["mechanism"], upsertion["iterations"]) == ("alice", 1, 8192)
    assert upsertion["salt"] == SALT
    assert upsertion["salted_password"] == hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), SALT, 8192)
    assert PASSWORD.encode() not in codec.encode(request_schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS), 0, body)


def test_the_server_derives_from_the_salted_password_the_credential_the_password_gives():
    body = scram_upsertion_request(
        "alice", PASSWORD, mechanism=ScramMechanism.SCRAM_SHA_512, iterations=4096, salt=SALT
    )
    (u,) = body["upsertions"]
    derived = credential_from_salted_password(ScramMechanism.SCRAM_SHA_512, u["salt"], u["salted_password"], 4096)
    assert derived == credential_from_password(ScramMechanism.SCRAM_SHA_512, PASSWORD, 4096, salt=SALT)


def test_a_deletion_names_one_user_and_one_mechanism():
    assert scram_deletion_request("bob", ScramMechanism.SCRAM_SHA_256) == {
        "deletions": [{"name": "bob", "mechanism": 1}],
        "upsertions": [],
    }


def test_acl_bodies_carry_kafkas_codes_and_a_describe_answer_reads_back_as_bindings():
    binding = AclBinding(
        ResourceType.TOPIC, "orders", PatternType.PREFIXED, "User:alice", "*", AclOperation.READ, AclPermissionType.DENY
    )
    assert acl_creation(binding) == {
        "resource_type": 2,
        "resource_name": "orders",
        "resource_pattern_type": 4,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permission_type": 2,
    }
    answer = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "orders",
                "pattern_type": 4,
                "acls": [{"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 2}],
            }
        ]
    }
    assert bindings_from_describe(answer) == [binding]  # type: ignore[arg-type]


def test_a_filter_leaves_unset_fields_open_in_describe_and_delete_bodies():
    body = describe_acls_request(AclBindingFilter(principal="User:bob"))
    assert body == delete_acls_filter(AclBindingFilter(principal="User:bob"))
    assert body == {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": "User:bob",
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }


def test_the_acl_version_range_starts_where_the_pattern_type_does():
    for api_key in (ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS):
        schema = request_schema(api_key)
        assert schema is not None
        for version in range(ACL_VERSIONS[0], ACL_VERSIONS[1] + 1):
            schema.check_version(version)
