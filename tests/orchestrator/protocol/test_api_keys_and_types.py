"""The api keys and the typed message bodies agree with the schema files."""

import pytest

from orchestrator.protocol import typegen
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import load_schemas, parse_schema, request_schema, response_schema

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("key", list(ApiKey), ids=lambda k: k.name)
def test_every_api_key_names_its_request_and_response_schema(key):
    request, response = request_schema(key), response_schema(key)
    assert request is not None and request.name == f"{key.schema_stem}Request"
    assert response is not None and response.name == f"{key.schema_stem}Response"


def test_every_request_schema_has_an_api_key_member():
    keys = {s.api_key for s in load_schemas().values() if s.type == "request"}
    assert keys == {int(k) for k in ApiKey}


def test_the_typed_messages_module_is_what_the_generator_writes_from_the_schemas():
    assert typegen.OUTPUT.read_text(encoding="utf-8") == typegen.render(), (
        "orchestrator/protocol/messages.py is stale: run python -m orchestrator.protocol.typegen"
    )


def _message(name, entry_fields):
    entry = {"name": "Entries", "type": "[]Entry", "versions": "0+", "fields": entry_fields}
    return parse_schema({"name": name, "type": "data", "validVersions": "0", "fields": [entry]})


def test_a_struct_two_messages_define_alike_is_one_class_and_differently_one_per_message():
    a_field = {"name": "A", "type": "int32", "versions": "0+"}
    b_field = {"name": "B", "type": "string", "versions": "0+"}
    alike, _ = typegen._collect([_message("One", [a_field]), _message("Two", [a_field])])
    assert set(alike.values()) == {"Entry"}
    differ, structs = typegen._collect([_message("One", [a_field]), _message("Two", [b_field])])
    assert differ == {("One", "Entry"): "OneEntry", ("Two", "Entry"): "TwoEntry"}
    assert sorted(s.name for s in structs) == ["OneEntry", "TwoEntry"]
