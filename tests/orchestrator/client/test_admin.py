"""The admin calls' requests: disabling tiering is one config change, the same for one topic and for many, and a
bulk change answers each topic on its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from orchestrator.client.admin import DESCRIBE_BATCH
from orchestrator.errors import InvalidRequest, UnknownServerError
from orchestrator.metadata.records import ConfigResourceType
from orchestrator.metadata.topic_configs import AlterConfigOp
from orchestrator.protocol.api_keys import ApiKey
from tests.support.controller_stand_in import StandInController, run_with

pytestmark = pytest.mark.unit

DISABLE_WITH_DELETE = [
    {"name": "remote.storage.enable", "config_operation": AlterConfigOp.SET, "value": "false"},
    {"name": "remote.log.disable.policy", "config_operation": AlterConfigOp.SET, "value": "delete"},
]


class AlteringController(StandInController):
    """The active controller behind ``TieredClient.admin``: accepts every IncrementalAlterConfigs resource except
    those named in ``refused`` (INVALID_REQUEST) and leaves those in ``unanswered`` out of its answer."""

    def __init__(self, *, refused: frozenset[str] = frozenset(), unanswered: frozenset[str] = frozenset()) -> None:
        self.refused, self.unanswered = refused, unanswered
        self.bodies: list[Mapping[str, Any]] = []

    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, Any], response: Any, **options: Any
    ) -> Any:
        assert api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        self.bodies.append(body)
        answers = [
            {
                "error_code": InvalidRequest.code if r["resource_name"] in self.refused else 0,
                "error_message": "refused" if r["resource_name"] in self.refused else None,
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
            }
            for r in body["resources"]
            if r["resource_name"] not in self.unanswered
        ]
        return {"throttle_time_ms": 0, "responses": answers}


def test_disabling_one_topic_and_many_send_the_same_config_change():
    one, many = AlteringController(), AlteringController()
    run_with(one, lambda c: c.disable_tiering("orders", "delete"))
    run_with(many, lambda c: c.disable_tiering_many(["orders", "clicks"], "delete"))
    ((single,),) = [b["resources"] for b in one.bodies]
    assert single == {
        "resource_type": ConfigResourceType.TOPIC,
        "resource_name": "orders",
        "configs": DISABLE_WITH_DELETE,
    }
    (bulk,) = many.bodies
    assert [(r["resource_name"], r["configs"]) for r in bulk["resources"]] == [
        ("orders", DISABLE_WITH_DELETE),
        ("clicks", DISABLE_WITH_DELETE),
    ]


def test_enabling_sets_remote_storage_enable_and_deletes_nothing():
    controller = AlteringController()
    run_with(controller, lambda c: c.enable_tiering("orders"))
    ((resource,),) = [b["resources"] for b in controller.bodies]
    assert resource["configs"] == [
        {"name": "remote.storage.enable", "config_operation": AlterConfigOp.SET, "value": "true"}
    ]


def test_a_bulk_change_answers_each_topic_on_its_own_in_the_order_asked():
    controller = AlteringController(refused=frozenset({"b"}), unanswered=frozenset({"c"}))
    changes = run_with(controller, lambda c: c.disable_tiering_many(["a", "b", "c"]))
    assert [(ch.topic, ch.ok, ch.error) for ch in changes] == [
        ("a", True, None),
        ("b", False, "INVALID_REQUEST"),
        ("c", False, "UNKNOWN_SERVER_ERROR"),
    ]
    assert changes[1].error_message == "refused" and changes[2].error_code == UnknownServerError.code


def test_a_refused_change_of_one_topic_is_raised_with_the_controllers_message():
    with pytest.raises(InvalidRequest, match="altering configs of 'orders': refused"):
        run_with(AlteringController(refused=frozenset({"orders"})), lambda c: c.disable_tiering("orders"))


class DescribingController(StandInController):
    """Answers DescribeConfigs: every topic has retention.ms, except those in ``gone`` (UNKNOWN_TOPIC_OR_PARTITION)
    and ``broken`` (UNKNOWN_SERVER_ERROR)."""

    def __init__(self, *, gone: frozenset[str] = frozenset(), broken: frozenset[str] = frozenset()) -> None:
        self.gone, self.broken = gone, broken
        self.requests: list[list[str]] = []

    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, Any], response: Any, **options: Any
    ) -> Any:
        assert api_key == ApiKey.DESCRIBE_CONFIGS
        names = [r["resource_name"] for r in body["resources"]]
        self.requests.append(names)

        def result(name: str) -> dict[str, Any]:
            code = 3 if name in self.gone else UnknownServerError.code if name in self.broken else 0
            configs = [] if code else [{"name": "retention.ms", "value": name}]
            return {"error_code": code, "error_message": None, "resource_name": name, "configs": configs}

        return {"throttle_time_ms": 0, "results": [result(n) for n in names]}


def test_many_topics_configs_are_described_in_batches_leaving_out_deleted_ones_and_raising_other_errors():
    names = [f"t{i}" for i in range(DESCRIBE_BATCH + 2)]
    controller = DescribingController(gone=frozenset({"t1"}))
    described = run_with(controller, lambda c: c.describe_many_configs(names))
    assert [len(r) for r in controller.requests] == [DESCRIBE_BATCH, 2]
    assert sorted(described) == sorted(set(names) - {"t1"})
    assert described["t7"] == {"retention.ms": "t7"}
    with pytest.raises(UnknownServerError):
        run_with(DescribingController(broken=frozenset({"t3"})), lambda c: c.describe_many_configs(names[:5]))
    assert run_with(DescribingController(), lambda c: c.describe_configs("solo")) == {"retention.ms": "solo"}
