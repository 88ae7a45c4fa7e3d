"""``tieredctl users`` and ``tieredctl acls``: options become the right bindings and filters, what is sent is what
Kafka expects (a salted password, never the password), and the commands print what the controller answered. The
client's request bodies on their own are tested in ``tests/orchestrator/client/test_security.py``.

The commands run against the controller's own security admin API (:class:`SecurityAdmin` on an in-memory metadata
store), reached through the real :class:`TieredClient` methods, every request and answer encoded and decoded at each
version the client offers, as the wire would. Only the connection of ``Ctx``'s client is replaced
(:meth:`Ctx.new_client`). The same against a live cluster is the lead's end-to-end test.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from orchestrator.cli.acls import acls, bindings_to_add, selection_filters
from orchestrator.cli.context import Ctx
from orchestrator.cli.output import Output
from orchestrator.cli.users import users
from orchestrator.client import SCRAM_SALT_BYTES, TieredClient
from orchestrator.controller.security_admin import SecurityAdmin
from orchestrator.controller.state import ControllerState
from orchestrator.errors import ResourceNotFound
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import request_schema, response_schema
from orchestrator.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from orchestrator.security.scram import (
    ScramClientExchange,
    ScramMechanism,
    ScramServerExchange,
)

pytestmark = pytest.mark.unit

T = TypeVar("T")
PASSWORD = "correct horse battery staple"


# --- the controller behind the commands -------------------------------------------------------------------------


class Controller:
    """The active controller's security APIs behind ``TieredClient.admin``: each body crosses the codec at every
    version of the range the client offers (the highest is answered), and its bytes are kept."""

    def __init__(self) -> None:
        store = InMemoryMetadataStore()
        lease = store.acquire_lease(holder="c1", now_ms=1_000, ttl_ms=60_000)
        assert lease is not None
        self.state = ControllerState(
            store,
            holder=lease.holder,
            controller_epoch=lease.controller_epoch,
            now_ms=lambda: 1_000,
            rng=random.Random(1),
        )
        admin = SecurityAdmin(self.state)
        self.handlers: dict[int, Callable[[Any, int], Mapping[str, Any]]] = {
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: admin.alter_user_scram_credentials,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: admin.describe_user_scram_credentials,
            ApiKey.CREATE_ACLS: admin.create_acls,
            ApiKey.DESCRIBE_ACLS: admin.describe_acls,
            ApiKey.DELETE_ACLS: admin.delete_acls,
        }
        self.requests: list[tuple[int, dict[str, Any]]] = []  # (api key, the body decoded)
        self.wire = bytearray()  # every request's bytes, at every version
        self.logs: list[dict[str, Any]] = []

    async def call(
        self,
        api_key: int,
        version_range: tuple[int, int],
        body: Mapping[str, object],
        response: type[T],
        **_: Any,
    ) -> T:
        request, answer_schema = request_schema(api_key), response_schema(api_key)
        assert request is not None and answer_schema is not None
        low, high = version_range
        decoded = {}
        for version in range(low, high + 1):
            request.check_version(version)
            data = codec.encode(request, version, body)
            self.wire += data
            decoded[version] = codec.decode(request, version, data)
        self.requests.append((api_key, decoded[high]))
        with capture_logs() as logs:  # the controller's log lines: kept here, off the command's stdout
            answer = self.handlers[api_key](decoded[high], high)
        self.logs += logs
        return codec.decode(answer_schema, high, codec.encode(answer_schema, high, answer))  # type: ignore[return-value]

    async def close(self) -> None:
        pass

    def bindings(self) -> set[AclBinding]:
        return set(self.state.refresh().acls.values())

    def logs_in(self, user: str, password: str, mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512) -> bool:
        image = self.state.refresh()
        server = ScramServerExchange(mechanism, lambda name: image.scram_credential(name, mechanism))
        client = ScramClientExchange(mechanism, user, password)
        try:
            client.finish(server.step(client.step(server.step(client.first()))))
        except Exception:
            return False
        return server.username == user


@dataclass(frozen=True)
class LocalCtx(Ctx):
    """The commands' context, its requests sent to :class:`Controller` through a real :class:`TieredClient`."""

    controller: Controller = field(default_factory=Controller)

    def new_client(self, timeout_s: float) -> TieredClient:
        client = TieredClient("controller.invalid:9093", timeout_s=timeout_s)
        client.admin = self.controller  # type: ignore[assignment]
        return client


@pytest.fixture
def controller() -> Controller:
    return Controller()


def invoke(controller: Controller, group: click.Group, *args: str, stdin: str | None = None) -> Result:
    obj = LocalCtx(output=Output("text"), bootstrap_server=None, controller=controller)
    return CliRunner().invoke(group, list(args), obj=obj, input=stdin)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


# --- options into bindings and filters --------------------------------------------------------------------------


def test_each_operation_is_one_binding_spelt_in_any_case_and_named_once():
    bindings = bindings_to_add(
        principal="User:alice",
        host="*",
        operations=["read", "Describe", "READ"],
        topic="orders",
        cluster=False,
        prefixed=False,
        deny=False,
    )
    assert [(b.operation, b.permission_type) for b in bindings] == [
        (AclOperation.READ, AclPermissionType.ALLOW),
        (AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]
    assert {(b.resource_type, b.resource_name, b.pattern_type) for b in bindings} == {
        (ResourceType.TOPIC, "orders", PatternType.LITERAL)
    }


def test_the_cluster_is_its_one_literal_name_and_deny_denies():
    (binding,) = bindings_to_add(
        principal="User:ops",
        host="10.0.0.1",
        operations=["ClusterAction"],
        topic=None,
        cluster=True,
        prefixed=False,
        deny=True,
    )
    assert binding == AclBinding(
        ResourceType.CLUSTER,
        CLUSTER_RESOURCE_NAME,
        PatternType.LITERAL,
        "User:ops",
        "10.0.0.1",
        AclOperation.CLUSTER_ACTION,
        AclPermissionType.DENY,
    )
    assert binding.problem() is None


@pytest.mark.parametrize(
    ("topic", "cluster", "prefixed", "message"),
    [
        (None, False, False, "--topic NAME or --cluster"),
        ("orders", True, False, "give one"),
        (None, True, True, "--prefixed applies to --topic"),
    ],
)
def test_an_acl_names_exactly_one_resource(topic, cluster, prefixed, message):
    with pytest.raises(click.UsageError, match=message):
        bindings_to_add(
            principal="User:a",
            host="*",
            operations=["Read"],
            topic=topic,
            cluster=cluster,
            prefixed=prefixed,
            deny=False,
        )


def test_filters_match_anything_unless_narrowed():
    assert selection_filters(principal=None, topic=None, cluster=False, prefixed=False) == [AclBindingFilter()]
    (prefixed_only,) = selection_filters(principal=None, topic=None, cluster=False, prefixed=True)
    assert prefixed_only == AclBindingFilter(pattern_type=PatternType.PREFIXED)
    narrowed = selection_filters(
        principal="User:bob", topic="pay", cluster=False, prefixed=True, operations=["write", "Read"]
    )
    assert narrowed == [
        AclBindingFilter(ResourceType.TOPIC, "pay", PatternType.PREFIXED, "User:bob", None, op)
        for op in (AclOperation.WRITE, AclOperation.READ)
    ]


# --- tieredctl users --------------------------------------------------------------------------------------------


def test_a_user_added_from_a_password_file_logs_in_with_that_password_and_it_is_never_shown(controller, tmp_path):
    password_file = tmp_path / "alice.password"
    password_file.write_text(PASSWORD + "\n")
    result = ok(invoke(controller, users, "add", "alice", "--password-file", str(password_file), "-o", "json"))
    assert json.loads(result.stdout) == {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096}
    assert controller.logs_in("alice", PASSWORD)
    assert not controller.logs_in("alice", PASSWORD + "!")
    assert PASSWORD not in result.output and PASSWORD.encode() not in controller.wire
    assert controller.logs and PASSWORD not in repr(controller.logs)
    ((api_key, body),) = controller.requests
    assert api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS and len(body["upsertions"][0]["salt"]) == SCRAM_SALT_BYTES


def test_without_a_password_file_the_password_is_asked_twice_hidden_and_on_stderr(controller):
    result = ok(invoke(controller, users, "add", "bob", "--mechanism", "SCRAM-SHA-256", stdin=f"{PASSWORD}\n" * 2))
    assert result.stdout == "user bob: SCRAM-SHA-256 credential set (4096 iterations)\n"
    assert "Password of bob" in result.stderr and "Repeat for confirmation" in result.stderr
    assert PASSWORD not in result.output
    assert controller.logs_in("bob", PASSWORD, ScramMechanism.SCRAM_SHA_256)


def test_an_empty_password_file_is_a_usage_error_and_nothing_is_sent(controller, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    result = invoke(controller, users, "add", "alice", "--password-file", str(empty))
    assert result.exit_code == 2 and "--password-file" in result.output and "holds no password" in result.output
    assert controller.requests == []


def test_iterations_out_of_kafkas_range_are_a_usage_error(controller):
    result = invoke(controller, users, "add", "alice", "--iterations", "1000", stdin="x\nx\n")
    assert result.exit_code == 2 and "--iterations" in result.output


def test_users_are_listed_with_their_mechanisms_and_iterations(controller, tmp_path):
    password_file = tmp_path / "p"
    password_file.write_text(PASSWORD)
    ok(invoke(controller, users, "add", "bob", "--password-file", str(password_file)))
    ok(invoke(controller, users, "add", "alice", "--password-file", str(password_file), "--iterations", "8192"))
    ok(invoke(controller, users, "add", "alice", "--password-file", str(password_file), "--mechanism", "SCRAM-SHA-256"))

    listed = json.loads(ok(invoke(controller, users, "list", "-o", "json")).stdout)
    assert listed == [
        {
            "user": "alice",
            "credentials": [
                {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
            ],
        },
        {"user": "bob", "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]},
    ]
    rows = [line.split() for line in ok(invoke(controller, users, "list", "bob")).stdout.splitlines()]
    assert ["│", "bob", "│", "SCRAM-SHA-512", "│", "4096", "│"] in rows
    assert not any("alice" in row for row in rows)


def test_listing_an_unknown_user_is_resource_not_found(controller):
    result = invoke(controller, users, "list", "nobody")
    assert isinstance(result.exception, ResourceNotFound)


def test_removing_a_user_removes_each_mechanism_in_its_own_request(controller, tmp_path):
    password_file = tmp_path / "p"
    password_file.write_text(PASSWORD)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        ok(invoke(controller, users, "add", "carol", "--password-file", str(password_file), "--mechanism", mechanism))
    controller.requests.clear()

    result = ok(invoke(controller, users, "remove", "carol", "-o", "json"))
    assert json.loads(result.stdout) == {"user": "carol", "removed": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    deletions = [body["deletions"] for key, body in controller.requests if key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    assert deletions == [[{"name": "carol", "mechanism": 1}], [{"name": "carol", "mechanism": 2}]]
    assert ok(invoke(controller, users, "list")).stdout.strip() == "no SCRAM users"


def test_removing_one_mechanism_keeps_the_other(controller, tmp_path):
    password_file = tmp_path / "p"
    password_file.write_text(PASSWORD)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        ok(invoke(controller, users, "add", "dave", "--password-file", str(password_file), "--mechanism", mechanism))
    result = ok(invoke(controller, users, "remove", "dave", "--mechanism", "SCRAM-SHA-256"))
    assert result.stdout == "user dave: removed SCRAM-SHA-256 credential\n"
    assert controller.logs_in("dave", PASSWORD) and not controller.logs_in(
        "dave", PASSWORD, ScramMechanism.SCRAM_SHA_256
    )


# --- tieredctl acls ---------------------------------------------------------------------------------------------


def test_acls_added_are_listed_in_text_and_json(controller):
    two_operations = ["--operation", "read", "--operation", "Describe"]
    added = ok(invoke(controller, acls, "add", "--principal", "User:alice", *two_operations, "--topic", "orders"))
    assert added.stdout.startswith("added 2 ACLs\n")
    ok(
        invoke(
            controller, acls, "add", "--principal", "User:ops", "--operation", "ClusterAction", "--cluster", "--deny"
        )
    )
    assert len(controller.bindings()) == 3

    listed = json.loads(ok(invoke(controller, acls, "list", "-o", "json")).stdout)
    assert listed[0] == {
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
        "resource_type": "TOPIC",
        "pattern_type": "LITERAL",
        "resource_name": "orders",
    }
    assert [(acl["resource_type"], acl["operation"], acl["permission"]) for acl in listed] == [
        ("TOPIC", "READ", "ALLOW"),
        ("TOPIC", "DESCRIBE", "ALLOW"),
        ("CLUSTER", "CLUSTER_ACTION", "DENY"),
    ]
    text = ok(invoke(controller, acls, "list", "--cluster")).stdout
    assert "User:ops" in text and "ClusterAction" in text and "Deny" in text and "kafka-cluster" in text
    assert "User:alice" not in text


def test_a_prefixed_topic_acl_is_listed_by_its_prefix_and_not_as_a_literal(controller):
    ok(invoke(controller, acls, "add", "--principal", "User:*", "--operation", "Write", "--topic", "pay", "--prefixed"))
    assert "Prefixed" in ok(invoke(controller, acls, "list", "--topic", "pay", "--prefixed")).stdout
    assert ok(invoke(controller, acls, "list", "--topic", "pay")).stdout.strip() == "no ACLs"


def test_a_principal_that_is_not_user_name_is_a_usage_error_naming_the_option(controller):
    result = invoke(controller, acls, "add", "--principal", "alice", "--operation", "Read", "--topic", "orders")
    assert result.exit_code == 2
    assert "Invalid value for '--principal'" in result.output and "User:alice" in result.output
    assert controller.requests == []


def test_an_unknown_operation_is_a_usage_error_listing_kafkas_names(controller):
    result = invoke(controller, acls, "add", "--principal", "User:a", "--operation", "Fly", "--topic", "orders")
    assert result.exit_code == 2 and "ClusterAction" in result.output and "IdempotentWrite" in result.output


def test_remove_without_a_selector_is_refused_unless_all_is_given(controller):
    ok(invoke(controller, acls, "add", "--principal", "User:a", "--operation", "Read", "--topic", "t1"))
    ok(invoke(controller, acls, "add", "--principal", "User:b", "--operation", "Write", "--topic", "t2"))
    controller.requests.clear()

    refused = invoke(controller, acls, "remove")
    assert refused.exit_code == 2 and "--all" in refused.output
    assert invoke(controller, acls, "remove", "--prefixed").exit_code == 2
    assert invoke(controller, acls, "remove", "--all", "--principal", "User:a").exit_code == 2
    assert controller.requests == [] and len(controller.bindings()) == 2

    removed = json.loads(ok(invoke(controller, acls, "remove", "--all", "-o", "json")).stdout)
    assert {(acl["principal"], acl["resource_name"]) for acl in removed["removed"]} == {
        ("User:a", "t1"),
        ("User:b", "t2"),
    }
    assert controller.bindings() == set()


def test_remove_deletes_only_what_its_selectors_match(controller):
    for op in ("Read", "Write"):
        ok(invoke(controller, acls, "add", "--principal", "User:a", "--operation", op, "--topic", "orders"))
    ok(invoke(controller, acls, "add", "--principal", "User:b", "--operation", "Read", "--topic", "orders"))

    result = ok(invoke(controller, acls, "remove", "--principal", "User:a", "--operation", "write"))
    assert result.stdout.startswith("removed 1 ACL\n") and "Write" in result.stdout
    assert {(b.principal, b.operation) for b in controller.bindings()} == {
        ("User:a", AclOperation.READ),
        ("User:b", AclOperation.READ),
    }
    nothing = ok(invoke(controller, acls, "remove", "--topic", "other"))
    assert nothing.stdout.strip() == "no ACL matched: nothing removed"
