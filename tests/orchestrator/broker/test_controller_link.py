"""A broker's heartbeats, each followed by a ReportCopyStates while any of its copies is in flight or failing, and
once more when none is left (which clears the controller's view), never when there was nothing to say. The link runs
against a fake controller that records each request and ends the loop after a set number of heartbeats."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.broker.controller_link import AlterPartitionResult, ControllerLink
from orchestrator.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidUpdateVersion,
    StaleBrokerEpoch,
    UnknownServerError,
)
from orchestrator.ids import Uuid
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.settings import BrokerSettings

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TID = Uuid.random()
STUCK = {"topic_id": TID, "partition": 0, "in_flight_since_ms": 1, "in_flight": "upload", "stalled": True}


class ScriptedController:
    def __init__(self, heartbeats: int) -> None:
        self.requests: list[tuple[int, Any]] = []
        self._heartbeats_left = heartbeats

    async def call(self, api_key: int, version_range: tuple[int, int], body: Any, response: Any, **_: Any) -> Any:
        self.requests.append((api_key, body))
        if api_key == ApiKey.BROKER_HEARTBEAT:
            if self._heartbeats_left == 0:
                raise asyncio.CancelledError
            self._heartbeats_left -= 1
        return {"error_code": 0, "error_message": None, "broker_epoch": 7}


def test_copy_states_follow_heartbeats_while_there_are_some_and_once_more_when_none_is_left(tmp_path) -> None:
    script = [[], [STUCK], [STUCK], [], [], []]
    settings = BrokerSettings(
        broker_id=1, data_dir=str(tmp_path), metadata_store=str(tmp_path / "m.db"), controllers="127.0.0.1:1"
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    link = ControllerLink(
        settings,
        advertised_port=lambda: 9092,
        image_offset=lambda: 0,
        copy_states=lambda: script.pop(0),
        sleep=sleep,
    )
    controller = ScriptedController(heartbeats=5)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(link.heartbeat_loop(controller))  # type: ignore[arg-type]

    kinds = [api_key for api_key, _ in controller.requests]
    heartbeat, report = ApiKey.BROKER_HEARTBEAT, ApiKey.REPORT_COPY_STATES
    assert kinds == [
        ApiKey.BROKER_REGISTRATION,
        *(heartbeat,),  # nothing in flight or failing: no report
        *(heartbeat, report),  # an upload stuck
        *(heartbeat, report),  # still stuck
        *(heartbeat, report),  # done: one report more, empty, clears the controller's view
        *(heartbeat, heartbeat),  # nothing to say again; the loop ends at the next heartbeat
    ]
    assert slept == [settings.heartbeat_interval_ms / 1000] * 5
    reports = [body for api_key, body in controller.requests if api_key == report]
    assert [r["copy_states"] for r in reports] == [[STUCK], [STUCK], []]
    assert all(r["broker_id"] == 1 and r["broker_epoch"] == 7 for r in reports)


class AnsweringController:
    """Answers every request with ``answer`` and records the request, its version range and its retry policy."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.calls: list[tuple[int, tuple[int, int], Any, dict[str, Any]]] = []

    async def call(self, api_key: int, version_range: tuple[int, int], body: Any, response: Any, **kw: Any) -> Any:
        self.calls.append((api_key, version_range, body, kw))
        return self.answer


def _alter(link: ControllerLink, controller: AnsweringController) -> Any:
    change = link.alter_partition(
        controller,  # type: ignore[arg-type]
        topic_id=TID,
        partition=3,
        leader_epoch=4,
        partition_epoch=9,
        new_isr=[1, 2],
    )
    return asyncio.run(change)


def _answer(error_code: int = 0, partition_error: int = 0) -> dict[str, Any]:
    state = {"partition_index": 3, "error_code": partition_error, "leader_id": 1, "leader_epoch": 4, "isr": [1, 2]}
    return {
        "throttle_time_ms": 0,
        "error_code": error_code,
        "topics": [] if error_code else [{"topic_id": TID, "partitions": [{**state, "partition_epoch": 10}]}],
    }


def test_alter_partition_sends_the_leaders_change_with_its_broker_epoch_and_returns_the_state_after(tmp_path) -> None:
    settings = BrokerSettings(
        broker_id=1, data_dir=str(tmp_path), metadata_store=str(tmp_path / "m.db"), controllers="127.0.0.1:1"
    )
    link = ControllerLink(settings, advertised_port=lambda: 9092, image_offset=lambda: 0)
    link.broker_epoch = 7
    controller = AnsweringController(_answer())
    assert _alter(link, controller) == AlterPartitionResult(leader_id=1, leader_epoch=4, isr=(1, 2), partition_epoch=10)
    [(api_key, versions, body, kw)] = controller.calls
    assert (api_key, versions, kw) == (ApiKey.ALTER_PARTITION, (2, 2), {"idempotent": True})
    partition = {"partition_index": 3, "leader_epoch": 4, "new_isr": [1, 2], "partition_epoch": 9}
    assert body == {"broker_id": 1, "broker_epoch": 7, "topics": [{"topic_id": TID, "partitions": [partition]}]}


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (_answer(error_code=77), StaleBrokerEpoch),
        (_answer(partition_error=95), InvalidUpdateVersion),
        (_answer(partition_error=107), IneligibleReplica),
        (_answer(partition_error=74), FencedLeaderEpoch),
        ({"throttle_time_ms": 0, "error_code": 0, "topics": []}, UnknownServerError),  # the partition unanswered
    ],
)
def test_alter_partition_raises_the_refusals_error(tmp_path, answer: dict[str, Any], error: type[Exception]) -> None:
    settings = BrokerSettings(
        broker_id=1, data_dir=str(tmp_path), metadata_store=str(tmp_path / "m.db"), controllers="127.0.0.1:1"
    )
    link = ControllerLink(settings, advertised_port=lambda: 9092, image_offset=lambda: 0)
    with pytest.raises(error):
        _alter(link, AnsweringController(answer))
