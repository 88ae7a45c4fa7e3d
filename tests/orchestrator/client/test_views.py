"""The status views the client reads from DescribeTieredState: a tiered topic's disablement and a deleted topic's
remote data, each with the brokers that still owe work and how their attempts went.

What ``tiering status --output json`` prints from them is a user contract (README, "tiering status --output json",
and the DELETED entries of topic deletion): these tests hold its keys, their order and their values to the byte,
through the CLI's own JSON renderer, and read the views from a DescribeTieredState answer as the controller sends it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.views import TieringReport
from orchestrator.client import BrokerProgressView, RemoteDeletionStatus, TieringStatus
from orchestrator.client.views import broker_progress
from orchestrator.errors import UnknownTopicOrPartition
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.protocol.api_keys import ApiKey
from tests.support.controller_stand_in import StandInController, run_with

pytestmark = pytest.mark.unit

ORDERS = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
CLICKS = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAg")

DISABLING_ORDERS = {
    "name": "orders",
    "topic_id": ORDERS,
    "error_code": 0,
    "error_message": None,
    "tiered_state": int(TieredState.DISABLING),
    "tiered_epoch": 3,
    "policy": int(DisablePolicy.DELETE),
    "partition_count": 2,
    "pending_brokers": [
        {
            "broker_id": 2,
            "attempts": 4,
            "last_error": "KAFKA_STORAGE_ERROR: bucket unreachable",
            "last_attempt_ms": 1_700_000_000_000,
            "fenced": False,
            "stalled": True,
            "next_attempt_ms": 1_700_000_004_000,
            "attempts_without_progress": 3,
        },
        {
            "broker_id": 3,
            "attempts": 1,
            "last_error": None,
            "last_attempt_ms": -1,
            "fenced": True,
            "stalled": False,
            "next_attempt_ms": -1,
            "attempts_without_progress": 0,
        },
    ],
    "acknowledged_brokers": 1,
    "segments_deleted": 7,
    "segments_remaining": 5,
    "owed_partitions": [
        {"partition_id": 1, "leader": -1, "assigned_broker": 2, "segments_remaining": 5, "bytes_remaining": 5120},
    ],
}

DELETED_CLICKS = {
    "name": "clicks",
    "topic_id": CLICKS,
    "partitions_remaining": [0, 2],
    "segments_remaining": 6,
    "bytes_remaining": 6144,
    "brokers": [
        {"broker_id": 1, "partitions": [0], "attempts": 2, "last_error": "S3 said no", "next_attempt_ms": 5_000},
        {"broker_id": 2, "partitions": [2], "attempts": 1, "last_error": None, "next_attempt_ms": -1},
    ],
}

ORDERS_JSON = """\
  {
    "topic": "orders",
    "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
    "state": "DISABLING",
    "tiered_epoch": 3,
    "policy": "delete",
    "partitions": 2,
    "acknowledged_brokers": 1,
    "segments_deleted": 7,
    "segments_remaining": 5,
    "pending_brokers": [
      {
        "broker_id": 2,
        "attempts": 4,
        "last_error": "KAFKA_STORAGE_ERROR: bucket unreachable",
        "last_attempt_ms": 1700000000000,
        "fenced": false,
        "stalled": true,
        "next_attempt_ms": 1700000004000,
        "attempts_without_progress": 3
      },
      {
        "broker_id": 3,
        "attempts": 1,
        "last_error": null,
        "last_attempt_ms": -1,
        "fenced": true,
        "stalled": false,
        "next_attempt_ms": -1,
        "attempts_without_progress": 0
      }
    ],
    "owed_partitions": [
      {
        "partition": 1,
        "leader": -1,
        "assigned_broker": 2,
        "segments_remaining": 5,
        "bytes_remaining": 5120,
        "leaderless": true
      }
    ],
    "copies": []
  }"""

CLICKS_JSON = """\
  {
    "topic": "clicks",
    "topic_id": "AAAAAAAAAAAAAAAAAAAAAg",
    "state": "DELETED",
    "tiered_epoch": null,
    "policy": null,
    "pending_brokers": [
      {
        "broker_id": 1,
        "attempts": 2,
        "last_error": "S3 said no",
        "fenced": false
      },
      {
        "broker_id": 2,
        "attempts": 1,
        "last_error": null,
        "fenced": false
      }
    ],
    "remote_deletion": {
      "partitions_remaining": [
        0,
        2
      ],
      "segments_remaining": 6,
      "bytes_remaining": 6144,
      "brokers": [
        {
          "broker_id": 1,
          "partitions": [
            0
          ],
          "attempts": 2,
          "last_error": "S3 said no",
          "next_attempt_ms": 5000
        },
        {
          "broker_id": 2,
          "partitions": [
            2
          ],
          "attempts": 1,
          "last_error": null,
          "next_attempt_ms": -1
        }
      ]
    }
  }"""


class DescribingController(StandInController):
    """The active controller behind ``TieredClient.admin``, answering every DescribeTieredState with ``answer``."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        self.answer = answer
        self.asked: list[tuple[int, Mapping[str, object], dict[str, Any]]] = []

    async def call(
        self, api_key: int, version_range: tuple[int, int], body: Mapping[str, object], response: Any, **options: Any
    ) -> Any:
        self.asked.append((api_key, body, options))
        return self.answer


def described(*, topics: Sequence[Any] = (), deleting: Sequence[Any] = ()) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "topics": list(topics), "deleting_topics": list(deleting)}


def printed(statuses: list[TieringStatus], deletions: list[RemoteDeletionStatus], capsys: Any) -> str:
    Output("json").show(TieringReport(statuses, deletions, now_ms=0))
    out: str = capsys.readouterr().out
    return out


def test_a_disabling_topic_prints_the_readme_keys_in_their_order_with_its_pending_brokers_and_owed_partitions(capsys):
    statuses = run_with(DescribingController(described(topics=[DISABLING_ORDERS])), lambda c: c.tiering_status())
    assert printed(statuses, [], capsys) == f"[\n{ORDERS_JSON}\n]\n"


def test_a_deleted_topic_prints_as_deleted_with_its_brokers_as_pending_and_its_remote_deletion(capsys):
    deletions = run_with(DescribingController(described(deleting=[DELETED_CLICKS])), lambda c: c.remote_deletions())
    assert printed([], deletions, capsys) == f"[\n{CLICKS_JSON}\n]\n"


def test_topics_then_deleted_topics_print_as_one_list(capsys):
    controller = DescribingController(described(topics=[DISABLING_ORDERS], deleting=[DELETED_CLICKS]))
    statuses = run_with(controller, lambda c: c.tiering_status())
    deletions = run_with(controller, lambda c: c.remote_deletions())
    assert printed(statuses, deletions, capsys) == f"[\n{ORDERS_JSON},\n{CLICKS_JSON}\n]\n"


def test_the_views_read_every_field_of_the_answer():
    controller = DescribingController(described(topics=[DISABLING_ORDERS], deleting=[DELETED_CLICKS]))
    (orders,) = run_with(controller, lambda c: c.tiering_status(["orders"]))
    assert (orders.topic, orders.topic_id, orders.state, orders.policy) == (
        "orders",
        ORDERS,
        TieredState.DISABLING,
        DisablePolicy.DELETE,
    )
    assert orders.required_brokers == 3  # one acknowledged, two pending
    slow, fenced = orders.pending_brokers
    assert (slow.broker_id, slow.stalled, slow.fenced, slow.attempts_without_progress) == (2, True, False, 3)
    assert (slow.next_attempt_ms, slow.last_attempt_ms) == (1_700_000_004_000, 1_700_000_000_000)
    assert (fenced.broker_id, fenced.fenced, fenced.last_error) == (3, True, None)
    (owed,) = orders.owed_partitions
    assert (owed.partition, owed.assigned_broker, owed.leaderless) == (1, 2, True)

    (clicks,) = run_with(controller, lambda c: c.remote_deletions(["clicks"]))
    assert (clicks.topic, clicks.topic_id, clicks.partitions_remaining) == ("clicks", CLICKS, (0, 2))
    assert [(b.broker_id, b.partitions, b.attempts, b.last_error) for b in clicks.brokers] == [
        (1, (0,), 2, "S3 said no"),
        (2, (2,), 1, None),
    ]
    assert [b.next_attempt_ms for b in clicks.brokers] == [5_000, -1]


def test_both_views_ask_describe_tiered_state_for_the_names_given_or_every_topic_as_a_request_safe_to_repeat():
    controller = DescribingController(described())
    run_with(controller, lambda c: c.tiering_status(["orders"]))
    run_with(controller, lambda c: c.remote_deletions())
    assert controller.asked == [
        (ApiKey.DESCRIBE_TIERED_STATE, {"topics": ["orders"]}, {"idempotent": True}),
        (ApiKey.DESCRIBE_TIERED_STATE, {"topics": None}, {"idempotent": True}),
    ]


def test_a_topic_the_controller_could_not_describe_is_raised_as_its_kafka_error():
    unknown = {**DISABLING_ORDERS, "error_code": UnknownTopicOrPartition.code, "error_message": "no such topic"}
    with pytest.raises(UnknownTopicOrPartition, match="topic 'orders': no such topic"):
        run_with(DescribingController(described(topics=[unknown])), lambda c: c.tiering_status(["orders"]))


def test_a_broker_owing_a_disablement_and_one_deleting_partitions_are_one_view():
    pending = broker_progress(DISABLING_ORDERS["pending_brokers"][0])
    deleting = broker_progress(DELETED_CLICKS["brokers"][0])
    assert type(pending) is type(deleting) is BrokerProgressView
    assert (pending.partitions, pending.stalled, pending.attempts_without_progress) == ((), True, 3)


def test_what_a_deletions_entry_does_not_carry_reads_as_never_attempted_not_fenced_not_stalled():
    deleting = broker_progress(DELETED_CLICKS["brokers"][0])
    assert deleting == BrokerProgressView(
        broker_id=1,
        attempts=2,
        last_error="S3 said no",
        next_attempt_ms=5_000,
        last_attempt_ms=-1,
        fenced=False,
        stalled=False,
        attempts_without_progress=0,
        partitions=(0,),
    )
