"""``tiering status`` in text: a table of the topics, "no topics" when there is none at all, a deleted topic whose
remote data is still being removed as its own line even when no topic is left, and a line per partition whose copy to
remote storage is in flight or failing (in JSON: the topic's ``copies``)."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.views import TieringReport
from orchestrator.client import RemoteDeletionStatus, TieringStatus
from orchestrator.client.views import PartitionCopyView
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState

pytestmark = pytest.mark.unit


def test_no_topic_and_nothing_being_deleted_says_no_topics(capsys):
    Output("text").show(TieringReport([], [], now_ms=0))
    assert capsys.readouterr().out.strip() == "no topics"


def test_a_deleted_topic_still_being_removed_is_shown_when_no_topic_is_left(capsys):
    deletion = RemoteDeletionStatus("clicks", Uuid.random(), (0, 2), 5, 1234, ())
    Output("text").show(TieringReport([], [deletion], now_ms=0))
    out = capsys.readouterr().out
    assert "no topics" not in out
    assert "clicks" in out and "DELETED, remote data still being deleted: 5 remote segments (1234 bytes)" in out
    assert "no live broker to delete it" in out


def _tiered(copies: tuple[PartitionCopyView, ...]) -> TieringStatus:
    return TieringStatus("orders", Uuid.random(), TieredState.ENABLED, 1, DisablePolicy.NONE, 2, (), copies=copies)


UPLOAD = "upload of segment 0-99 of orders-0 to s3://tiered-storage/tiered/orders-x/0/00000000000000000000-y.log"


def test_a_stalled_upload_says_what_it_uploads_where_and_for_how_long_and_a_failing_pass_its_error(capsys):
    stuck = PartitionCopyView(0, 1, in_flight_since_ms=1_000, in_flight=UPLOAD, stalled=True)
    failing = PartitionCopyView(1, 2, last_error="RemoteStorageError: Read timeout on endpoint URL", failed_passes=3)
    Output("text").show(TieringReport([_tiered((stuck, failing))], [], now_ms=96_500))
    lines = capsys.readouterr().out.splitlines()
    assert f"orders: partition 0 (broker 1) copying: {UPLOAD} in flight for 95 s (STALLED)" in lines
    assert (
        "orders: partition 1 (broker 2) copying: last copy pass failed (3 passes in a row): RemoteStorageError: "
        "Read timeout on endpoint URL"
    ) in lines


def test_the_json_status_of_a_tiered_topic_carries_its_copies_stalled_and_last_error(capsys):
    stuck = PartitionCopyView(0, 1, in_flight_since_ms=1_000, in_flight=UPLOAD, stalled=True)
    Output("json").show(TieringReport([_tiered((stuck,))], [], now_ms=96_500))
    [topic] = json.loads(capsys.readouterr().out)
    assert topic["copies"] == [
        {
            "partition": 0,
            "broker_id": 1,
            "in_flight": UPLOAD,
            "in_flight_since_ms": 1_000,
            "stalled": True,
            "last_error": None,
            "last_error_ms": -1,
            "failed_passes": 0,
        }
    ]
