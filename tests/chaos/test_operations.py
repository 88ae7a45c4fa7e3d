"""What the workload keeps of a delete-policy disable whose answer is an error: a definite refusal applied nothing,
but one the client heard on a retry of a request that was applied (TIERED_STORAGE_DISABLEMENT_IN_PROGRESS: its
controller died after the epoch bump, before answering) may have been, so it stands for every later moment."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from chaos.history import History
from chaos.operations import UNKNOWN_OUTCOME, Operations
from chaos.scenario import Op
from orchestrator.errors import InvalidRequest, KafkaError, TieredStorageDisablementInProgress

pytestmark = pytest.mark.unit


class _Client:
    def __init__(self, error: KafkaError) -> None:
        self.error = error

    def topic(self, name: str) -> dict[str, Any]:
        return {"topic_id": "T1"}

    def disable_tiering(self, name: str, policy: str) -> None:
        raise self.error


def _delete_requests(error: KafkaError) -> dict[str, list[int]]:
    client = _Client(error)
    rig = SimpleNamespace(scenario=SimpleNamespace(seed=1), call=lambda fn, **kw: fn(client))
    ops = Operations(rig, History(), injector=None)  # type: ignore[arg-type]
    ops.run(Op(0, "disable", "chaos-0", {"policy": "delete"}))
    assert ops.failed == 1
    return dict(ops.delete_requests)


def test_a_definite_refusal_of_a_delete_is_not_kept():
    assert _delete_requests(InvalidRequest("retain cannot apply")) == {}


def test_already_disabling_may_be_the_answer_to_a_retry_of_an_applied_delete():
    error = TieredStorageDisablementInProgress("topic 'chaos-0' is DISABLING at tiered epoch 2 with policy delete")
    assert _delete_requests(error) == {"T1": [UNKNOWN_OUTCOME]}
