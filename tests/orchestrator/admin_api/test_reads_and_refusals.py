"""The admin reads every node answers from its image, and the refusals a node answers when it cannot serve."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.admin_api import reads
from orchestrator.admin_api.refusals import refusal
from orchestrator.errors import NotController, RequestTimedOut
from orchestrator.ids import Uuid
from orchestrator.metadata.store import Lease
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.schema import response_schema
from tests.orchestrator.controller.test_core import CoreHarness

pytestmark = pytest.mark.unit

NOW = 5_000


ACTIVE = "3000@10.0.0.9:9093"


def lease(holder: str = ACTIVE, expires: int = NOW + 1) -> Lease:
    return Lease(holder=holder, controller_epoch=4, expires_at_ms=expires)


def test_every_node_names_the_live_brokers_and_the_active_controller_and_a_forwarding_broker_as_controller_id():
    c = CoreHarness(brokers=3)
    c.heartbeat(2, want_fence=True)
    view = reads.cluster_view(c.core.refresh(), ACTIVE, cluster_id="k")
    assert set(view.nodes) == {1, 3, 3000} and view.nodes[3000] == ("10.0.0.9", 9093, None)
    assert view.controller_id == 1, "the lowest live broker, which forwards writes (KIP-590)"
    assert (view.active_controller_id, dict(view.controllers)) == (3000, {3000: ("10.0.0.9", 9093, None)})


def test_without_a_live_broker_the_active_controller_is_named_and_without_a_lease_nobody():
    c = CoreHarness(brokers=0)
    image = c.core.refresh()
    assert reads.cluster_view(image, ACTIVE, cluster_id="k").controller_id == 3000
    assert reads.live_holder(lease(), NOW) == ACTIVE
    assert reads.live_holder(lease(expires=NOW), NOW) is None and reads.live_holder(None, NOW) is None
    nobody = reads.cluster_view(image, None, cluster_id="k")
    assert (nobody.controller_id, nobody.active_controller_id, dict(nobody.nodes)) == (-1, -1, {})
    foreign = reads.cluster_view(image, "not-a-controller", cluster_id="k")
    assert foreign.controller_id == -1


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_lists_brokers_or_the_active_controller_by_endpoint_type(version: int):
    c = CoreHarness(brokers=2)
    view = reads.cluster_view(c.core.refresh(), ACTIVE, cluster_id="k")
    brokers = reads.describe_cluster({}, version, view)
    assert (brokers["error_code"], brokers["cluster_id"], brokers["controller_id"]) == (0, "k", 1)
    assert [b["broker_id"] for b in brokers["brokers"]] == [1, 2, 3000]
    codec.encode(response_schema(ApiKey.DESCRIBE_CLUSTER), version, brokers)
    if version == 1:
        controllers = reads.describe_cluster({"endpoint_type": 2}, 1, view)
        assert controllers["controller_id"] == 3000 and [b["broker_id"] for b in controllers["brokers"]] == [3000]
        odd = reads.describe_cluster({"endpoint_type": 7}, 1, view)
        assert (odd["error_code"], odd["brokers"]) == (115, []) and "endpoint type 7" in odd["error_message"]


REQUESTS: dict[int, dict[str, Any]] = {
    ApiKey.CREATE_TOPICS: {"topics": [{"name": "a"}, {"name": "b"}]},
    ApiKey.DELETE_TOPICS: {"topic_names": ["a"], "topics": []},
    ApiKey.CREATE_PARTITIONS: {"topics": [{"name": "a", "count": 3}]},
    ApiKey.DESCRIBE_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a"}]},
    ApiKey.ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a", "configs": []}]},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a", "configs": []}]},
}


@pytest.mark.parametrize("api_key", list(REQUESTS), ids=[ApiKey(k).name for k in REQUESTS])
def test_a_refusal_puts_the_error_on_every_entry_the_request_named_and_encodes(api_key: int):
    schema = response_schema(api_key)
    assert schema is not None and schema.valid_versions.hi is not None
    for version in range(schema.valid_versions.lo, schema.valid_versions.hi + 1):
        body = refusal(api_key, version, REQUESTS[api_key], NotController("the active controller is 3001"))
        [entries] = [v for v in body.values() if isinstance(v, list)]
        assert entries and all(e["error_code"] == NotController.code for e in entries)
        codec.encode(schema, version, body)


def test_a_refusal_of_topics_deleted_by_id_keeps_their_ids():
    topic_id = Uuid.random()
    body = refusal(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": topic_id}]}, RequestTimedOut("x"))
    assert body["responses"] == [
        {"name": None, "topic_id": topic_id, "error_code": RequestTimedOut.code, "error_message": "x"}
    ]


def test_a_refusal_of_an_api_without_entries_carries_the_error_at_the_top_level():
    body = refusal(ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 2}, NotController("nobody is active"))
    assert (body["error_code"], body["error_message"], body["brokers"]) == (NotController.code, "nobody is active", [])
    assert refusal(ApiKey.DESCRIBE_TIERED_STATE, 0, {"topics": None}, NotController("x"))["error_code"] == 41
